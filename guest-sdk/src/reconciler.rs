//! The [`Reconciler`] trait a guest implements, and what it receives and returns.

use std::time::Duration;

use kube_core::{DynamicObject, GroupVersionKind};
use serde::de::{Deserialize, DeserializeOwned, Deserializer};

use crate::context::Context;
use crate::error::Result;

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
///   per key, however many workers the guest has — and however many replicas share the guests
///   (`krec run --shard`): a guest runs in one replica at a time, and a replica that lost the
///   guest's Lease stops its writes before another takes it over.
/// - A request may be reconciled again at any time, also when nothing changed (resyncs,
///   restarts, retries, a new module version). A reconcile must therefore be **idempotent**:
///   compare the observed state with the desired state and write only the difference.
/// - The object named by the request may not exist (it was deleted); read it with
///   [`Context::get_opt`] and return [`Action::done`] when it is gone.
/// - A reconcile that returns `Err`, panics or exceeds its time or memory limit is retried with
///   per-key exponential backoff; the error is logged and counted by the host.
/// - Reads come from the host's cache and may lag other writers' changes slightly; writes carry
///   the `resourceVersion` read, so acting on stale data fails with
///   `Error::Conflict` instead of overwriting newer changes. Return the error and
///   the host retries.
/// - **Read-your-own-writes**: once one of the guest's creates, updates, patches or deletes has
///   returned, a later read of that kind (in that namespace) reflects it or something newer —
///   the host waits briefly for its cache, else asks the API server — so a reconcile right after
///   a create does not create again, nor one after a delete find the object.
///   (`readYourWrites: false` in the manifest turns this off.)
///
/// # State and configuration
///
/// The host builds one value of the reconciler per instance, through [`FromConfig`], from the
/// manifest's `spec.config`, and calls every method on it: settings live in `self`. A type
/// that implements [`Default`] takes no configuration; implement [`FromConfig`] to take one.
/// An instance may be dropped at any time (a trap, a new module version, `isolation:
/// per-reconcile`), so `self` holds settings and caches, never state that must survive.
pub trait Reconciler {
    /// Reconcile one request. See the trait's [Guarantees](Reconciler#guarantees).
    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action>;

    /// Map an object of a watched kind to the requests it causes, for the manifest's watches
    /// with `mapByGuest: true` — controller-runtime's `EnqueueRequestsFromMapFunc`, kube-rs's
    /// `watches(…, mapper)`. `kind` is the watched kind (one guest may map several); `object`
    /// is the object as the host's cache holds it (for a deletion, its last state).
    ///
    /// The host calls it once per event, with the guest's limits. It returns no requests
    /// unless implemented. A map that must read the cluster (a Namespace appearing, mapped to
    /// the objects that name it) implements [`map_in`](Self::map_in) instead.
    ///
    /// ```
    /// # use krec_guest::prelude::*;
    /// # use krec_guest::{DynamicObject, GroupVersionKind};
    /// # #[derive(Default)] struct NamespaceLabeller;
    /// impl Reconciler for NamespaceLabeller {
    ///     # fn reconcile(&self, _: Request, _: &Context) -> Result<Action> { Ok(Action::done()) }
    ///     // A Deployment's events reconcile its Namespace (a cluster-scoped request).
    ///     fn map(&self, _kind: &GroupVersionKind, object: &DynamicObject) -> Vec<Request> {
    ///         object.namespace().map(|ns| Request::cluster(&ns)).into_iter().collect()
    ///     }
    /// }
    /// ```
    fn map(&self, kind: &GroupVersionKind, object: &DynamicObject) -> Vec<Request> {
        let _ = (kind, object);
        Vec::new()
    }

    /// [`map`](Self::map) with a [`Context`] to read the cluster through (from the host's
    /// cache, as controller-runtime's map functions read through the manager's client); writes
    /// are refused (`Forbidden`): a map only names requests. The host calls this one; by
    /// default it is `map`.
    ///
    /// ```
    /// # use krec_guest::prelude::*;
    /// # use krec_guest::{DynamicObject, GroupVersionKind};
    /// # use krec_guest::k8s_openapi::api::apps::v1::Deployment;
    /// # #[derive(Default)] struct Labeller;
    /// impl Reconciler for Labeller {
    ///     # fn reconcile(&self, _: Request, _: &Context) -> Result<Action> { Ok(Action::done()) }
    ///     // A Namespace appearing: every Deployment in it.
    ///     fn map_in(&self, _kind: &GroupVersionKind, ns: &DynamicObject, ctx: &Context) -> Vec<Request> {
    ///         let name = ns.name_any();
    ///         ctx.list::<Deployment>(&ListParams::default().namespace(Some(name.as_str())))
    ///             .unwrap_or_default()
    ///             .iter()
    ///             .map(|d| Request::new(&name, &d.name_any()))
    ///             .collect()
    ///     }
    /// }
    /// ```
    fn map_in(
        &self,
        kind: &GroupVersionKind,
        object: &DynamicObject,
        ctx: &Context,
    ) -> Vec<Request> {
        let _ = ctx;
        self.map(kind, object)
    }
}

/// How a guest's reconciler is built from the manifest's `spec.config`.
///
/// Every type that implements [`Default`] takes no configuration (a manifest that gives one is
/// refused). To take settings, implement this trait with a `Config` type that deserializes
/// from the manifest's YAML:
///
/// ```
/// use std::time::Duration;
/// use krec_guest::prelude::*;
///
/// #[derive(serde::Deserialize)]
/// #[serde(rename_all = "camelCase", deny_unknown_fields)]
/// struct Settings {
///     annotation: String,
///     #[serde(default = "default_period")]
///     period_seconds: u64,
/// }
/// fn default_period() -> u64 { 300 }
///
/// struct Counter { annotation: String, period: Duration }
///
/// impl FromConfig for Counter {
///     type Config = Settings;
///     fn from_config(settings: Settings) -> Result<Self> {
///         if settings.annotation.is_empty() {
///             return Err(Error::Invalid("annotation: must not be empty".into()));
///         }
///         Ok(Counter { annotation: settings.annotation, period: Duration::from_secs(settings.period_seconds) })
///     }
/// }
/// ```
///
/// A config that does not deserialize, or that `from_config` refuses, is rejected when the
/// guest is loaded or swapped, with the field named (`spec.config.periodSeconds: invalid type:
/// string "x", expected u64`), and the version running before keeps running.
pub trait FromConfig: Sized {
    /// What `spec.config` deserializes to.
    type Config: DeserializeOwned;

    /// Whether it reads `spec.config`. The parts of a guest (its reconciler and webhooks) all
    /// read the same `spec.config`; a part that takes none is built without it when another
    /// part takes it (and refuses a config when no part takes one).
    const TAKES_CONFIG: bool = true;

    /// Build the reconciler from its settings. An error rejects the configuration.
    fn from_config(config: Self::Config) -> Result<Self>;
}

impl<T: Default> FromConfig for T {
    type Config = NoConfig;
    const TAKES_CONFIG: bool = false;

    fn from_config(_: NoConfig) -> Result<Self> {
        Ok(T::default())
    }
}

/// The configuration of a guest that takes none: `spec.config` absent, `null` or `{}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoConfig;

impl<'de> Deserialize<'de> for NoConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error;
        match Option::<serde_json::Value>::deserialize(deserializer)? {
            None => Ok(NoConfig),
            Some(serde_json::Value::Object(map)) if map.is_empty() => Ok(NoConfig),
            Some(_) => Err(D::Error::custom(
                "this guest takes no configuration: remove spec.config, or implement krec_guest::FromConfig for the reconciler (or a webhook)",
            )),
        }
    }
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
    /// A request for `name` in `namespace`.
    pub fn new(namespace: &str, name: &str) -> Self {
        Request {
            namespace: Some(namespace.to_owned()),
            name: name.to_owned(),
        }
    }

    /// A request without a namespace: a cluster-scoped object (a Namespace, a Node, …).
    pub fn cluster(name: &str) -> Self {
        Request {
            namespace: None,
            name: name.to_owned(),
        }
    }

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
