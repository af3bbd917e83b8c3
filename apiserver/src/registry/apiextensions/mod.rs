//! `apiextensions.k8s.io`: CustomResourceDefinitions.

mod approval;
mod conversion;
pub mod crd;
mod validation;
