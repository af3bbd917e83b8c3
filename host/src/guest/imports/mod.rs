//! The host side of the interfaces a guest imports: `client`, `events` and `log`.
//!
//! Each call is checked against the guest's manifest before it reaches the
//! [`ClusterAccess`]; a refused call returns `forbidden` to the
//! guest and logs a line, and the object is untouched. Sizes the guest controls are bounded by
//! the `MAX_*` constants here.

mod client;
mod events;
mod log;

#[cfg_attr(not(feature = "native"), allow(unused_imports))] // the native arm's alone
pub(crate) use log::log_for;

use std::sync::Arc;

use crate::cluster::ClusterAccess;
use crate::guest::bindings::{WitError, WitGvk, krec::reconciler::types};
use crate::guest::state::HostState;
pub use crate::guest::state::Writes;
use crate::manifest::{Manifest, Verb};
use crate::process::metrics::Metrics;
use krec_core::{CallError, Gvk};

/// Largest object (JSON bytes) a guest may send in one call: the API server's own request limit
/// is 3 MiB, so nothing larger could be stored anyway.
pub const MAX_OBJECT_BYTES: usize = 3 << 20;
/// Largest total response (JSON bytes) of one `list`, to bound what is copied into the guest.
pub const MAX_LIST_BYTES: usize = 64 << 20;
/// Longest log line a guest may write; longer lines are cut.
pub const MAX_LOG_LINE_BYTES: usize = 16 << 10;
/// Longest Event reason and message, as the API server's validation allows (message 1 KiB
/// in `events.k8s.io/v1` notes; reason 128).
pub const MAX_EVENT_MESSAGE_BYTES: usize = 1024;
/// Longest Event reason.
pub const MAX_EVENT_REASON_BYTES: usize = 128;

impl types::Host for HostState {}

impl From<WitGvk> for Gvk {
    fn from(g: WitGvk) -> Self {
        Gvk {
            group: g.group,
            version: g.version,
            kind: g.kind,
        }
    }
}

/// One guest's calls to the host, checked and carried out: bounds, the permission check and
/// JSON in and out. The WIT host traits and the native host (`crate::guest::native`) both go
/// through it, so a guest is treated the same whichever way it runs.
pub(crate) struct Calls<'a> {
    /// The guest's manifest: its name and permissions.
    pub manifest: &'a Manifest,
    /// Where its reads and writes go.
    pub cluster: &'a Arc<dyn ClusterAccess>,
    /// The request being reconciled, for log lines.
    pub request: &'a str,
    /// The guest's write rate limit.
    pub writes: &'a crate::guest::budget::WriteLimiter,
    /// When the reconcile must end: a write that would wait for the rate limit past it fails.
    pub deadline: std::time::Instant,
    /// Whether writes are allowed, or refused and why.
    pub writes_allowed: Writes,
}

impl Calls<'_> {
    /// Wait for the guest's write rate limit to allow one more write.
    pub(crate) async fn throttle_write(&self) -> Result<(), CallError> {
        if self.writes_allowed != Writes::Allowed {
            return self.throttle_write_refused();
        }
        self.writes.acquire(self.deadline).await
    }

    /// A write during an admission review or a map: refused, logged.
    fn throttle_write_refused(&self) -> Result<(), CallError> {
        let while_ = match self.writes_allowed {
            Writes::RefusedInMap => "while mapping an event (map reads only)",
            Writes::Allowed | Writes::RefusedInReview => {
                "while answering an admission review (webhooks read only)"
            }
        };
        let message = format!("guest {:?} may not write {while_}", self.guest());
        tracing::warn!(guest = %self.guest(), request = %self.request, "forbidden: {message}");
        Err(CallError::Forbidden(message))
    }

    /// The guest's name.
    pub(crate) fn guest(&self) -> &str {
        &self.manifest.name
    }

    /// Check the manifest's permissions for a call; log and return `forbidden` if refused.
    pub(crate) fn authorize(
        &self,
        verb: Verb,
        gvk: &Gvk,
        namespace: Option<&str>,
    ) -> Result<(), CallError> {
        if self.writes_allowed != Writes::Allowed
            && !matches!(verb, Verb::Get | Verb::List | Verb::Watch)
        {
            return self.throttle_write_refused();
        }
        if self.manifest.allows(verb, gvk, namespace) {
            return Ok(());
        }
        let scope = match namespace {
            Some(ns) => format!("in namespace {ns:?}"),
            None => "across all namespaces / cluster-scoped".to_owned(),
        };
        let message = format!(
            "guest {:?} may not {verb} {gvk} {scope}: not permitted by its manifest {}",
            self.guest(),
            self.manifest.path.display()
        );
        tracing::warn!(guest = %self.guest(), request = %self.request, "forbidden: {message}");
        Err(CallError::Forbidden(message))
    }
}

/// The bytes a host call's answer hands to the guest.
pub(crate) trait Handed {
    /// Its length in bytes.
    fn handed(&self) -> usize;
}

impl Handed for String {
    fn handed(&self) -> usize {
        self.len()
    }
}

impl Handed for Vec<String> {
    fn handed(&self) -> usize {
        self.iter().map(String::len).sum()
    }
}

impl Handed for () {
    fn handed(&self) -> usize {
        0
    }
}

/// Count a host call of `guest` by verb and result in `metrics`.
pub(crate) fn count_call<T>(
    metrics: Option<&Metrics>,
    guest: &str,
    verb: &'static str,
    result: &Result<T, CallError>,
) {
    let Some(metrics) = metrics else {
        return;
    };
    let outcome = match result {
        Ok(_) => "ok",
        Err(err) => err.label(),
    };
    metrics.count_call(guest, verb, outcome);
}

impl HostState {
    /// The calls of this store's guest.
    pub(crate) fn calls(&self) -> Calls<'_> {
        Calls {
            manifest: &self.manifest,
            cluster: &self.cluster,
            request: &self.request,
            writes: &self.budgets.writes,
            deadline: self.deadline,
            writes_allowed: self.writes_allowed,
        }
    }

    /// Account for a host call that started at `started` and took `taken` bytes from the
    /// guest: its time is not the guest's, and it is counted by verb and result, and in the
    /// guest's ledger with the bytes it handed over. Returns the result as the guest sees it.
    pub(crate) fn host_call<T: Handed>(
        &mut self,
        verb: &'static str,
        started: std::time::Instant,
        taken: usize,
        result: Result<T, CallError>,
        span: Option<crate::telemetry::CallSpan>,
    ) -> Result<T, WitError> {
        if let Some(span) = span {
            span.end(result.as_ref().err());
        }
        self.host_time += started.elapsed();
        self.first_call.get_or_insert(started);
        count_call(self.metrics.as_deref(), self.guest(), verb, &result);
        let handed = result.as_ref().map_or(0, Handed::handed);
        self.budgets.ledger.call(verb, handed, taken);
        result.map_err(WitError::from)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::cluster::{ClusterAccess, ClusterCalls, MemoryCluster};
    use crate::guest::{CpuGovernor, GuestBudgets};
    use crate::manifest::{Manifest, Verb};

    /// A guest that may read and create ConfigMaps in `team-a` only.
    fn manifest() -> Arc<Manifest> {
        let text = "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: g}\nspec:\n  module: g.wasm\n  for: {apiVersion: v1, kind: ConfigMap}\n  permissions:\n    - {apiVersion: v1, kind: ConfigMap, verbs: [get, list, watch, create], namespaces: [team-a]}\n";
        Arc::new(Manifest::parse(Path::new("/guests/g.yaml"), text).expect("manifest"))
    }

    /// Run `f` with the calls of a reconcile of `manifest()` over a fresh in-memory cluster.
    async fn with_calls<T>(writes_allowed: Writes, f: impl AsyncFnOnce(Calls<'_>) -> T) -> T {
        let manifest = manifest();
        let cluster: Arc<dyn ClusterAccess> = Arc::new(MemoryCluster::new());
        let namespace = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "team-a"}});
        cluster.create(namespace).await.expect("namespace");
        let budgets = GuestBudgets::new(
            &manifest,
            &CpuGovernor::new(),
            &crate::guest::MemoryPool::unlimited(),
        );
        let calls = Calls {
            manifest: &manifest,
            cluster: &cluster,
            request: "team-a/x",
            writes: &budgets.writes,
            deadline: std::time::Instant::now() + std::time::Duration::from_secs(5),
            writes_allowed,
        };
        f(calls).await
    }

    fn config_map(namespace: &str) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"x","namespace":"{namespace}"}}}}"#
        )
    }

    #[tokio::test]
    async fn calls_should_be_checked_against_the_manifest_before_they_reach_the_cluster() {
        let cm = Gvk::new("", "v1", "ConfigMap");
        with_calls(Writes::Allowed, async |calls| {
            assert!(calls.authorize(Verb::Get, &cm, Some("team-a")).is_ok());
            let err = calls
                .authorize(Verb::Delete, &cm, Some("team-a"))
                .expect_err("no delete");
            let message = err.to_string();
            assert!(
                matches!(err, CallError::Forbidden(_))
                    && message.contains("\"g\"")
                    && message.contains("delete")
                    && message.contains("/guests/g.yaml"),
                "names the guest, the verb and the manifest: {message}"
            );
            let elsewhere = calls.authorize(Verb::Get, &cm, Some("team-b"));
            assert!(
                matches!(elsewhere, Err(CallError::Forbidden(ref m)) if m.contains("team-b")),
                "{elsewhere:?}"
            );
            let written = calls
                .write(&config_map("team-a"), Verb::Create)
                .await
                .expect("create in team-a");
            assert!(written.contains("resourceVersion"), "{written}");
            let refused = calls.write(&config_map("team-b"), Verb::Create).await;
            assert!(
                matches!(refused, Err(CallError::Forbidden(_))),
                "{refused:?}"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn bad_objects_should_be_refused_as_invalid_with_the_reason() {
        with_calls(Writes::Allowed, async |calls| {
            let not_json = calls.write("{", Verb::Create).await;
            assert!(
                matches!(not_json, Err(CallError::Invalid(ref m)) if m.contains("not valid JSON")),
                "{not_json:?}"
            );
            let huge = format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"x","namespace":"team-a"}},"data":{{"a":"{}"}}}}"#,
                "x".repeat(MAX_OBJECT_BYTES)
            );
            let too_large = calls.write(&huge, Verb::Create).await;
            assert!(
                matches!(too_large, Err(CallError::Invalid(ref m)) if m.contains("byte limit")),
                "{too_large:?}"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn a_map_should_read_and_not_write_saying_why() {
        let cm = Gvk::new("", "v1", "ConfigMap");
        with_calls(Writes::RefusedInMap, async |calls| {
            assert!(calls.authorize(Verb::List, &cm, Some("team-a")).is_ok());
            let write = calls.write(&config_map("team-a"), Verb::Create).await;
            assert!(
                matches!(write, Err(CallError::Forbidden(ref m)) if m.contains("while mapping an event")),
                "{write:?}"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn an_admission_review_should_not_write() {
        let cm = Gvk::new("", "v1", "ConfigMap");
        with_calls(Writes::RefusedInReview, async |calls| {
            assert!(calls.authorize(Verb::Get, &cm, Some("team-a")).is_ok());
            let write = calls.write(&config_map("team-a"), Verb::Create).await;
            assert!(
                matches!(write, Err(CallError::Forbidden(ref m)) if m.contains("admission review")),
                "{write:?}"
            );
        })
        .await;
    }
}
