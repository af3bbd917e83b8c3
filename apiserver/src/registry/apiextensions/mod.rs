//! `apiextensions.k8s.io`: CustomResourceDefinitions.

mod approval;
mod conversion;
pub mod crd;
pub mod formats;
mod validation;
