//! Layers: a [`ClusterAccess`] that wraps another and answers the same [`Request`]s, doing its
//! one thing on the way — here the write [`Fenced`] of a sharded guest and the [`Logged`]
//! writes `krec dev` shows; elsewhere the rollout's `Tap` (takes a reconcile's calls down) and
//! `Replay` (answers them from a recording, over a fallback). A guest's live access is
//! `Logged(Fenced(LiveCluster))` — `Fenced` for a sharded guest, `Logged` when `krec::client`'s
//! lines are on; a shadow candidate's is `Replay` over that.
//!
//! A layer is a plain struct holding `Arc<dyn ClusterAccess>`, not tower's `Service`/`Layer`:
//! a guest's access is one shared handle called concurrently by every instance of the guest
//! (`&self`, not tower's `&mut self` with `poll_ready` and a clone per call), no layer applies
//! backpressure (the queue and the write throttle do, before the call), and a cached read's
//! answer must stay the `Arc<str>` the cache holds, which tower's combinators would not add
//! anything to. The read set (read-your-own-writes) stays inside
//! [`LiveCluster`](super::live::LiveCluster): what it waits for is an informer of the cache
//! the backend reads, and whether to read the API server instead is the backend's decision.

use std::sync::Arc;

use async_trait::async_trait;

use super::fence::Fence;
use super::{ClusterAccess, Reply, Request};
use krec_core::{CallError, WriteKind};

/// Sends a sharded guest's writes only while this replica holds its Lease (see [`Fence`]);
/// reads pass.
pub struct Fenced {
    inner: Arc<dyn ClusterAccess>,
    fence: Arc<Fence>,
}

impl Fenced {
    /// `inner`'s writes within `fence`.
    pub fn new(inner: Arc<dyn ClusterAccess>, fence: Arc<Fence>) -> Self {
        Fenced { inner, fence }
    }
}

#[async_trait]
impl ClusterAccess for Fenced {
    async fn call(&self, request: Request<'_>) -> Result<Reply, CallError> {
        if request.is_write() {
            self.fence.write(self.inner.call(request)).await
        } else {
            self.inner.call(request).await
        }
    }
}

/// Logs each write a guest makes (target `krec::client`): at debug when it succeeds — what
/// `krec dev` shows — and at trace when it fails, since the failure reaches the guest and the
/// reconcile's own error line says it when the guest passes it on (at debug it would be said
/// twice per retry).
pub struct Logged {
    inner: Arc<dyn ClusterAccess>,
    guest: String,
}

impl Logged {
    /// Whether the layer would say anything: `krec::client`'s lines at debug (trace, which
    /// adds the failures, includes it).
    pub fn wanted() -> bool {
        tracing::enabled!(target: "krec::client", tracing::Level::DEBUG)
    }

    /// `guest`'s writes through `inner`, logged.
    pub fn new(inner: Arc<dyn ClusterAccess>, guest: &str) -> Self {
        Logged {
            inner,
            guest: guest.to_owned(),
        }
    }
}

/// What a log line says a write did: `created ConfigMap default/a`.
fn what(request: &Request<'_>) -> Option<String> {
    Some(match request {
        Request::Get(_) | Request::List { .. } | Request::Namespaced(_) => return None,
        Request::Write { kind, head, .. } => {
            let verb = match kind {
                WriteKind::Create => "created",
                WriteKind::Update => "updated",
                WriteKind::UpdateStatus => "updated the status of",
            };
            let target = super::Target {
                gvk: &head.gvk,
                namespace: head.namespace.as_deref(),
                name: head.name.as_deref().unwrap_or("(generated name)"),
            };
            format!("{verb} {target}")
        }
        Request::Patch { target, status, .. } => {
            let verb = if *status {
                "patched the status of"
            } else {
                "patched"
            };
            format!("{verb} {target}")
        }
        Request::Delete { target, .. } => format!("deleted {target}"),
        Request::Event(event) => {
            let r = &event.regarding;
            let target = super::Target {
                gvk: &r.gvk,
                namespace: r.namespace.as_deref(),
                name: &r.name,
            };
            format!(
                "recorded {} Event {} on {target}: {}",
                event.event_type.as_str(),
                event.reason,
                event.message
            )
        }
    })
}

#[async_trait]
impl ClusterAccess for Logged {
    async fn call(&self, request: Request<'_>) -> Result<Reply, CallError> {
        // Failures go to trace, a level below debug: with debug off, nothing is said.
        let said = tracing::enabled!(target: "krec::client", tracing::Level::DEBUG);
        let Some(what) = said.then(|| what(&request)).flatten() else {
            return self.inner.call(request).await;
        };
        let result = self.inner.call(request).await;
        match &result {
            Ok(_) => tracing::debug!(target: "krec::client", "{}: {what}", self.guest),
            Err(err) => {
                tracing::trace!(target: "krec::client", "{}: {what} failed: {err}", self.guest)
            }
        }
        result
    }
}

#[cfg(all(test, feature = "embedded-apiserver"))]
mod tests {
    use serde_json::json;
    use tokio::time::{Duration, Instant};

    use super::*;
    use crate::cluster::{ClusterCalls, MemoryCluster};
    use krec_core::Gvk;

    #[tokio::test]
    async fn a_closed_fence_should_stop_writes_and_let_reads_pass() {
        let fence = Arc::new(Fence::closed("g"));
        let memory: Arc<dyn ClusterAccess> = Arc::new(MemoryCluster::new());
        let fenced = Fenced::new(memory.clone(), fence.clone());
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "default"}});
        let err = fenced.create(cm.clone()).await.expect_err("fence closed");
        assert!(matches!(err, CallError::Unavailable(_)), "{err}");
        let gvk = Gvk::new("", "v1", "ConfigMap");
        assert!(
            memory.get(&gvk, Some("default"), "a").await.is_err(),
            "nothing written"
        );
        assert!(fenced.namespaced(&gvk).await.expect("a read passes"));
        fence.extend(Instant::now() + Duration::from_secs(60));
        fenced.create(cm).await.expect("fence open");
        assert!(memory.get(&gvk, Some("default"), "a").await.is_ok());
    }
}
