//! The embedded Kubernetes API server (`krec cluster`, `krec dev`, the tests): a
//! protocol-faithful kube-apiserver stand-in that `kubectl` and `kube` use unchanged.
//!
//! It serves HTTPS on loopback with a generated CA, writes a kubeconfig trusting it, keeps
//! objects in memory (or in a redb database with `--data-dir`) and implements discovery, every
//! verb, watches with resourceVersions, bookmarks and 410 Gone, the status subresource, CRDs with
//! schema validation, finalizers, owner-reference garbage collection and namespace deletion.
//!
//! # Its API
//!
//! - [`Server::builder`] starts a server ([`Builder`]: address, data directory, audit log,
//!   faults, [`controllers`]); [`in_process`] answers requests without a socket.
//! - [`Store`] over a [`ResourceTypes`] of served types is the object store alone (what the guest
//!   SDK's fake cluster is: without the default feature `server`, the crate is only that), with
//!   [`local::LocalClient`] for a client's calls on it in the same process.
//! - [`faults`] injects failures, [`audit`] is the audit log, [`protobuf`] the Kubernetes
//!   protobuf encoding (for tests sending protobuf bodies).
//!
//! Everything else — the kinds' strategies, endpoints, storage, admission, OpenAPI — is the
//! server's own, laid out as kube-apiserver's (`docs/apiserver.md`, "How the crate is laid
//! out").
//!
//! # Caveats
//!
//! - Requests need a bearer token: the kubeconfig's ([`Server::token`]; 401 without it), whose
//!   holder is in `system:masters`, or a ServiceAccount's from the TokenRequest API; anyone but
//!   the admin gets what RBAC (with kube's default policy) allows. No client certificates. It
//!   binds loopback unless told otherwise.
//! - The built-in controllers and simulated nodes ([`controllers`]) run only when the builder
//!   asks for them ([`Builder::controllers`]); `krec cluster` and `krec dev` do by default.
//! - Server-side apply tracks field ownership per manager (`managed`) but does not validate
//!   the applied configuration against a typed schema as structured-merge-diff does.
//! - Custom resources are stored in whichever version they were last written in; other versions
//!   are converted on the way out — by the CRD's conversion webhook (`conversion`), or, without
//!   one, by changing only `apiVersion`.

// Without `server`, parts of the modules the store shares with the server serve only the server
// (webhook configurations' matching, server-side apply's merge): the default build checks them.
#![cfg_attr(not(feature = "server"), allow(dead_code))]

#[cfg(feature = "server")]
mod admission;
mod admissionregistration;
#[cfg(feature = "server")]
pub mod audit;
#[cfg(feature = "server")]
mod authentication;
#[cfg(feature = "server")]
mod authorization;
#[cfg(feature = "server")]
pub mod controllers;
#[cfg(feature = "server")]
mod conversion;
mod defaults;
#[cfg(feature = "server")]
mod endpoints;
#[cfg(feature = "server")]
mod expressions;
#[cfg(feature = "server")]
pub mod faults;
#[cfg(feature = "server")]
mod field_validation;
pub mod local;
mod managed;
#[cfg(feature = "server")]
mod metrics;
mod openapi;
mod patch;
mod printers;
#[cfg(feature = "server")]
pub mod protobuf;
mod registry;
mod resources;
mod scale;
#[cfg(feature = "server")]
mod server;
mod storage;
pub mod store;
mod timestamp;
mod validation;
#[cfg(feature = "server")]
mod warnings;
mod webhook;

pub use krec_core::{ApiError, ErrorKind};
pub use registry::apiextensions::formats::unrecognized as unrecognized_crd_formats;
pub use resources::{ResourceType, ResourceTypes};
#[cfg(feature = "server")]
pub use server::{Builder, Server, StartError, in_process};
pub use store::{INITIAL_NAMESPACES, Store, ensure_namespaces};
