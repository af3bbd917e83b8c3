//! The [`Reconciler`] trait a guest implements, and what it receives and returns.

use std::time::Duration;

use crate::{Context, Result};

/// A Kubernetes reconciler: brings the cluster towards the desired state for one object key.
///
/// The host calls [`reconcile`](Reconciler::reconcile) for each request it takes from the guest's
/// workqueue. Requests come from watch events on the kinds in the manifest (`for`, `owns`,
/// `watches`), from periodic tickers, resyncs and manual triggers; many events for one key
/// collapse into one request.
///
/// # Guarantees
///
/// These are the host's promises to every guest, in `krec run` and `krec dev` alike.
///
/// - A request is never reconciled twice at the same time: the host runs at most one reconcile
///   per key, however many workers the guest has.
/// - A request may be reconciled again at any time, also when nothing changed (resyncs,
///   restarts, retries, a new module version). A reconcile must therefore be **idempotent**:
///   compare the observed state with the desired state and write only the difference.
/// - The object named by the request may not exist (it was deleted); read it with
///   [`Context::get_opt`] and return [`Action::done`] when it is gone.
/// - A reconcile that returns `Err`, panics or exceeds its time or memory limit is retried with
///   per-key exponential backoff; the error is logged and counted by the host.
/// - Reads come from the host's cache and may lag writes slightly; writes carry the
///   `resourceVersion` read, so acting on stale data fails with [`Error::Conflict`](crate::Error)
///   instead of overwriting newer changes. Return the error and the host retries.
pub trait Reconciler {
    /// Reconcile one request. See the trait's [Guarantees](Reconciler#guarantees).
    fn reconcile(req: Request, ctx: &Context) -> Result<Action>;
}

/// The key of the object to reconcile, as controller-runtime's `reconcile.Request`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    /// Namespace of the object; `None` for cluster-scoped objects and namespace-less requests.
    pub namespace: Option<String>,
    /// Name of the object.
    pub name: String,
}

impl Request {
    /// The namespace as a `&str` option, as [`Context`] methods take it.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// What the host does with the request after a successful reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Done: the host forgets the key's backoff and waits for the next event.
    Done,
    /// Reconcile again soon, through the guest's rate limiter.
    Requeue,
    /// Reconcile again after this delay (e.g. to poll something outside the cluster).
    RequeueAfter(Duration),
}

impl Action {
    /// The object is in its desired state.
    pub fn done() -> Self {
        Action::Done
    }

    /// Reconcile the request again soon, rate limited.
    pub fn requeue() -> Self {
        Action::Requeue
    }

    /// Reconcile the request again after `after` (millisecond resolution).
    pub fn requeue_after(after: Duration) -> Self {
        Action::RequeueAfter(after)
    }
}
