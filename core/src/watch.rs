//! [`EventKind`]: what a watch event (or a generic event) says happened.

use serde::Deserialize;

/// Kind of a watch event, for per-event-type filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// An object appeared.
    Create,
    /// An object changed.
    Update,
    /// An object was deleted.
    Delete,
    /// A generic event: ticker, resync or manual trigger.
    Generic,
}
