//! The core group's kinds with behaviour of their own.

pub mod configmap;
pub mod namespace;
pub mod pod;
pub mod secret;
pub mod service;
