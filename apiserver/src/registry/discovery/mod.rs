//! `discovery.k8s.io`: EndpointSlices.

pub mod endpointslice;
