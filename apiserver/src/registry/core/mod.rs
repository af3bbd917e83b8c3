//! The core group's kinds with behaviour of their own.

pub mod configmap;
pub mod endpoints;
pub mod event;
pub mod namespace;
pub mod node;
pub mod pod;
pub mod replicationcontroller;
pub mod secret;
pub mod service;
