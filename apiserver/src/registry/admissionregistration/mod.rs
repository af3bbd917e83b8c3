//! `admissionregistration.k8s.io`: webhook configurations.

pub mod webhookconfiguration;
