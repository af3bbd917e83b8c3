//! `admissionregistration.k8s.io`: webhook configurations and admission policies.

pub mod policy;
pub mod webhookconfiguration;
