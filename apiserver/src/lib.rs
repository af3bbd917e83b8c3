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

pub mod admission;
pub mod admissionregistration;
pub mod audit;
pub mod controllers;
pub mod conversion;
pub mod defaults;
pub mod endpoints;
pub mod faults;
pub mod field_validation;
pub mod http;
pub mod local;
pub mod managed;
pub mod metrics;
pub mod openapi;
pub mod patch;
pub mod printers;
pub mod protobuf;
pub mod registry;
pub mod resources;
pub mod scale;
pub mod server;
pub mod store;
pub mod timestamp;
pub mod validation;
pub mod warnings;
pub mod webhook;

// The vocabulary the server shares with the host and the SDK (`crate::json`, … inside).
use krec_core::{duration, error, json, schema, selector, yaml};
use krec_net::{connections, tls};

pub use krec_core::{ApiError, ErrorKind};
pub use resources::{Registry, ResourceType};
pub use server::{Builder, INITIAL_NAMESPACES, Server, StartError, ensure_namespaces, in_process};
pub use store::Store;
