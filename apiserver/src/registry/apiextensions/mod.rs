//! `apiextensions.k8s.io`: CustomResourceDefinitions.

pub mod crd;
