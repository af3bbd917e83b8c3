//! krec's Kubernetes vocabulary, the workspace's ground floor (as `kube-core` is under kube's
//! client and runtime): no I/O, no async runtime, no HTTP, no WebAssembly. The host, the guest
//! SDK and the embedded API server all stand on it, so they speak of kinds, keys, selectors,
//! errors and schemas alike.
//!
//! - which object: [`Gvk`], [`ObjectKey`], the facts of the built-in kinds ([`kinds`]);
//! - what a request names: label and field [`selector`]s, DNS names, [`duration`]s, the
//!   [`PatchType`] of a patch, [`ListOptions`], [`Preconditions`], an object's [`ObjectHead`],
//!   a [`WriteKind`]; what a watch event says happened ([`EventKind`]); the Events a guest
//!   records ([`EventRecord`]);
//! - how a request fails: [`ApiError`] and its [`ErrorKind`]s, the `Status` kube-apiserver
//!   returns; [`CallError`], the cases a guest's call fails with;
//! - what a body holds: JSON pointer lookups and the API-object writer ([`json`]), structural
//!   schemas ([`schema`]), YAML bounded before it is parsed ([`yaml`]).

mod call_error;
pub mod duration;
pub mod error;
mod gvk;
pub mod json;
mod key;
pub mod kinds;
mod patch;
mod record;
mod request;
#[cfg(feature = "schema")]
pub mod schema;
pub mod selector;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod watch;
#[cfg(feature = "yaml")]
pub mod yaml;

pub use call_error::CallError;
pub use error::{ApiError, ErrorKind};
pub use gvk::{Gvk, MissingField};
pub use key::{BadObjectName, KeyRef, MAX_NAME, ObjectKey};
pub use patch::PatchType;
pub use record::{EventRecord, EventType, ObjectReference, cut, printable};
pub use request::{ListOptions, ObjectHead, Preconditions, WriteKind, describe, json_text};
pub use watch::EventKind;
