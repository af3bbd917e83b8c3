//! krec: a host that runs Kubernetes reconcilers compiled to WebAssembly components.
//!
//! The host owns everything generic a controller needs and calls guests through the
//! `krec:reconciler` WIT world (`wit/`). The data flows
//! `cluster` → `guest` (this crate's [`guest::GuestWorker`] runs one reconcile) → the guest's
//! `client` calls ([`imports`]) → permission check against the [`manifest`] →
//! [`cluster::ClusterAccess`].

#![deny(missing_docs)]

pub mod admin;
#[allow(missing_docs)]
pub mod bindings;
pub mod cache;
pub mod client;
pub mod cluster;
pub mod controller;
pub mod dev;
pub mod engine;
pub mod files;
pub mod guest;
pub mod imports;
pub mod leader;
pub mod manager;
pub mod manifest;
pub mod memory;
pub mod metrics;
#[cfg(feature = "native")]
pub mod native;
pub mod objects;
pub mod progress;
pub mod queue;
pub mod rbac;
pub mod scaffold;
pub mod shard;
pub mod tenure;
pub mod vocab;
pub mod webhooks;
