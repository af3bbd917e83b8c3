//! krec: a host that runs Kubernetes reconcilers compiled to WebAssembly components.
//!
//! The host owns everything generic a controller needs and calls guests through the
//! `krec:reconciler` WIT world (`wit/`). From the top down:
//!
//! - [`cli`]: one file per `krec` command; [`runtime`]: the one place that assembles a running
//!   host (admin server, leader election or [`shard`]ing, the [`guests`], admission server,
//!   manifest watcher).
//! - [`guests`]: the guest set, by manifest and guest object, each a [`controller`] (workqueue, workers, handlers)
//!   over the shared [`cache`].
//! - [`guest`]: a [`guest::GuestWorker`] runs one reconcile in wasmtime; the guest's `client`
//!   calls ([`imports`]) are checked against its [`manifest`] and go to
//!   [`cluster::ClusterAccess`], whose live backend reads the [`cache`] and writes through the
//!   API [`client`].
//! - the words every stage shares (kinds, errors, requests) are [`krec_core`]'s, below everything.

#![deny(missing_docs)]

pub mod access;
pub mod admin;
#[allow(missing_docs)]
pub mod bindings;
pub mod cache;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod componentize;
pub mod connect;
pub mod controller;
pub mod engine;
pub mod files;
pub mod guest;
pub mod guests;
pub mod imports;
pub mod install;
pub mod leader;
pub mod manifest;
pub mod memory;
pub mod metrics;
#[cfg(feature = "native")]
pub mod native;
pub mod objects;
pub mod oci;
pub mod progress;
pub mod queue;
pub mod rbac;
pub mod rollout;
pub mod runtime;
pub mod scaffold;
pub mod shard;
pub mod tenancy;
pub mod tenure;
pub mod webhook_tls;
pub mod webhooks;
