//! krec's Kubernetes vocabulary, the workspace's ground floor (as `kube-core` is under kube's
//! client and runtime): no I/O, no async runtime, no HTTP, no WebAssembly. The host, the guest
//! SDK and the embedded API server all stand on it, so they speak of kinds, keys, selectors,
//! errors and schemas alike.
//!
//! - which object: [`Gvk`], [`ObjectKey`], the facts of the built-in kinds ([`kinds`]);
//! - what a request names: label and field [`selector`]s, DNS names, [`duration`]s;
//! - how a request fails: [`ApiError`] and its [`ErrorKind`]s, the `Status` kube-apiserver
//!   returns;
//! - what a body holds: JSON pointer lookups and the API-object writer ([`json`]), structural
//!   schemas ([`schema`]), YAML bounded before it is parsed ([`yaml`]).

pub mod duration;
pub mod error;
mod gvk;
pub mod json;
mod key;
pub mod kinds;
pub mod schema;
pub mod selector;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod yaml;

pub use error::{ApiError, ErrorKind};
pub use gvk::{Gvk, MissingField};
pub use key::ObjectKey;
