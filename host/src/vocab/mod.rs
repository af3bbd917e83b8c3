//! The host's vocabulary, below every pipeline stage (as `kube-core` is below kube's client and
//! runtime): which kind an object is ([`Gvk`]), what a read or write names ([`ObjectHead`],
//! [`ListOptions`], [`PatchType`], [`Preconditions`], [`WriteKind`]), the Events guests record
//! ([`EventRecord`]), why a cluster call failed ([`AccessError`]) and what a watch event says
//! happened ([`EventKind`]). Nothing here depends on any other module of the host.

mod error;
mod record;
mod request;
mod watch;

pub use error::{AccessError, truncated};
pub use krec_core::Gvk;
pub use record::{EventRecord, EventType, ObjectReference, cut, printable};
pub use request::{
    ListOptions, ObjectHead, PatchType, Preconditions, WriteKind, describe, json_text,
};
pub use watch::EventKind;
