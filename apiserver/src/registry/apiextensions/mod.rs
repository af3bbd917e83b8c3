//! `apiextensions.k8s.io`: CustomResourceDefinitions.

mod approval;
pub mod crd;
