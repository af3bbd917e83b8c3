//! krec: a host that runs Kubernetes reconcilers compiled to WebAssembly components.
//!
//! The host owns everything generic a controller needs and calls guests through the
//! `krec:reconciler` WIT world (`wit/`). Its rooms, from the bottom up (the words they all
//! share — kinds, keys, requests, call errors — are [`krec_core`]'s):
//!
//! - [`process`]: what the whole process shares — metrics, what it tells the person running
//!   it, memory given back after a burst.
//! - [`manifest`]: a guest's manifest (its module, watches, permissions, limits), the files
//!   it comes from and the tenancy rules that confine it.
//! - [`cluster`]: the API server client, the shared informer [`cluster::cache`], and a guest's
//!   access to the cluster ([`cluster::ClusterAccess`]), whose live backend reads the cache and
//!   writes through the client.
//! - [`guest`]: one component compiled and run in wasmtime under its limits; its host calls
//!   ([`guest::imports`]), checked against its manifest.
//! - [`controller`]: one guest's controller — handlers, workqueue, workers; [`rollout`]: a
//!   candidate version beside the live one, record and replay.
//! - [`guests`]: the guest set — loading, starting, swapping and removing guests, what
//!   triggers a reload, modules pulled from OCI registries, the guest objects' status.
//! - [`admission`]: the admission server and its certificates; [`install`]: the objects krec
//!   writes to a cluster (its CRDs, RBAC, the tenancy policy, webhook configurations).
//! - [`runtime`]: the one place a running host is assembled (admin server, leader election
//!   or sharding, the guest set, the admission server); [`cli`]: one file per `krec` command.

#![deny(missing_docs)]

pub mod admission;
pub mod cli;
pub mod cluster;
pub mod controller;
pub mod guest;
pub mod guests;
pub mod install;
pub mod manifest;
pub mod process;
pub mod rollout;
pub mod runtime;
pub mod telemetry;
