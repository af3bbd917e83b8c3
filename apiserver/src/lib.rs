//! The embedded Kubernetes API server (`krec cluster`, `krec dev`, the tests): a
//! protocol-faithful kube-apiserver stand-in that `kubectl` and `kube` use unchanged.
//!
//! It serves HTTPS on loopback with a generated CA, writes a kubeconfig trusting it, keeps
//! objects in memory (or in a redb database with `--data-dir`) and implements discovery, every
//! verb, watches with resourceVersions, bookmarks and 410 Gone, the status subresource, CRDs with
//! schema validation, finalizers, owner-reference garbage collection and namespace deletion.
//!
//! # Caveats
//!
//! - There is no authentication or authorization: anyone who can reach the port is an admin.
//!   It binds loopback unless told otherwise.
//! - The built-in controllers and simulated nodes ([`controllers`]) run only when the builder
//!   asks for them ([`Builder::controllers`]); `krec cluster` and `krec dev` do by default.
//! - Server-side apply tracks field ownership per manager ([`managed`]) but does not validate
//!   the applied configuration against a typed schema as structured-merge-diff does.
//! - Custom resources are stored in whichever version they were last written in; other versions
//!   are converted on the way out — by the CRD's conversion webhook ([`conversion`]), or, without
//!   one, by changing only `apiVersion`.

#[cfg(feature = "server")]
pub mod admission;
pub mod admissionregistration;
#[cfg(feature = "server")]
pub mod audit;
#[cfg(feature = "server")]
pub mod controllers;
#[cfg(feature = "server")]
pub mod conversion;
pub mod defaults;
#[cfg(feature = "server")]
pub mod endpoints;
#[cfg(feature = "server")]
pub mod faults;
#[cfg(feature = "server")]
pub mod field_validation;
pub mod local;
pub mod managed;
#[cfg(feature = "server")]
pub mod metrics;
pub mod openapi;
pub mod patch;
pub mod printers;
#[cfg(feature = "server")]
pub mod protobuf;
pub mod registry;
pub mod resources;
pub mod scale;
#[cfg(feature = "server")]
pub mod server;
pub mod storage;
pub mod store;
pub mod timestamp;
pub mod validation;
#[cfg(feature = "server")]
pub mod warnings;
pub mod webhook;

// The vocabulary the server shares with the host and the SDK (`crate::json`, … inside).
#[cfg(feature = "server")]
use krec_core::{duration, yaml};
use krec_core::{error, json, schema, selector};
#[cfg(feature = "server")]
use krec_net::{connections, tls};

pub use krec_core::{ApiError, ErrorKind};
pub use resources::{Registry, ResourceType};
#[cfg(feature = "server")]
pub use server::{Builder, Server, StartError, in_process};
pub use store::{INITIAL_NAMESPACES, Store, ensure_namespaces};
