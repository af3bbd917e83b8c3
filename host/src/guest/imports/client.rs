//! Host side of `krec:reconciler/client`: permission-checked reads and writes.
//!
//! [`Calls`] carries each call out (bounds, permission check, JSON in and out); the WIT host
//! trait below and the native host (`crate::guest::native`) both go through it.

use serde_json::Value;

use super::{Calls, MAX_LIST_BYTES, MAX_OBJECT_BYTES};
use crate::cluster::{ClusterAccess, ClusterCalls};
use crate::guest::bindings::krec::reconciler::client::{
    Host, ListOptions, PatchType, Preconditions,
};
use crate::guest::bindings::{WitError, WitGvk};
use crate::guest::state::HostState;
use crate::manifest::Verb;
use krec_core::{CallError, Gvk, ObjectHead, WriteKind};
use std::sync::Arc;

type CallResult<T> = wasmtime::Result<Result<T, WitError>>;

/// Where the namespace of a call came from: a cluster-scoped kind given one as an argument is a
/// mistake worth saying so; in an object's body it is ignored, as kube-apiserver clears it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NamespaceFrom {
    Argument,
    Body,
}

impl Calls<'_> {
    /// Authorize `verb` on `gvk` in the namespace the call acts in, and hand back the cluster
    /// handle to await on with that namespace: the one given for a namespaced kind, none for a
    /// cluster-scoped kind (whose URL has no namespace, so a namespace-limited permission must
    /// not grant it).
    async fn cluster_for<'n>(
        &self,
        verb: Verb,
        gvk: &Gvk,
        namespace: Option<&'n str>,
        from: NamespaceFrom,
    ) -> Result<(&Arc<dyn ClusterAccess>, Option<&'n str>), CallError> {
        let namespaced = match self.cluster.namespaced(gvk).await {
            Ok(namespaced) => namespaced,
            Err(err) => {
                // A kind that is not served: say so only to a guest that may use it.
                self.authorize(verb, gvk, namespace)?;
                return Err(err);
            }
        };
        let namespace = match namespace {
            Some(ns) if !namespaced => {
                if from == NamespaceFrom::Argument {
                    self.authorize(verb, gvk, None)?;
                    return Err(CallError::Invalid(format!(
                        "{gvk} is cluster-scoped: call it without a namespace (got {ns:?})"
                    )));
                }
                None
            }
            other => other,
        };
        self.authorize(verb, gvk, namespace)?;
        Ok((self.cluster, namespace))
    }

    /// The head (kind, namespace, name) of an object to write, checked as one must be: within
    /// [`MAX_OBJECT_BYTES`], JSON with a kind. The text goes to the API server as it is.
    pub(crate) fn write_head(json: &str) -> Result<ObjectHead, CallError> {
        if json.len() > MAX_OBJECT_BYTES {
            return Err(CallError::Invalid(format!(
                "object of {} bytes exceeds the {MAX_OBJECT_BYTES}-byte limit",
                json.len()
            )));
        }
        ObjectHead::parse(json)
    }

    /// Write `json` as `verb` says: its head read, the call checked, the text sent as it is.
    #[cfg(any(test, feature = "native"))]
    pub(crate) async fn write(&self, json: &str, verb: Verb) -> Result<String, CallError> {
        self.write_as(json, Self::write_head(json)?, verb).await
    }

    /// Write `json` as `verb` says, its [`write_head`](Self::write_head) read already.
    pub(crate) async fn write_as(
        &self,
        json: &str,
        head: ObjectHead,
        verb: Verb,
    ) -> Result<String, CallError> {
        let (cluster, _) = self
            .cluster_for(
                verb,
                &head.gvk,
                head.namespace.as_deref(),
                NamespaceFrom::Body,
            )
            .await?;
        self.throttle_write().await?;
        let kind = match verb {
            Verb::Create => WriteKind::Create,
            Verb::Update => WriteKind::Update,
            _ => WriteKind::UpdateStatus,
        };
        // Only a create carries the context: it is a change of its own, never repeated (an
        // update or patch carrying a new context each reconcile would change an object its
        // guest meant to leave as it was, and wake the guest's own watch again and again).
        if kind == WriteKind::Create
            && let Some(traceparent) = traceparent_for_objects()
        {
            let mut object: Value = serde_json::from_str(json)
                .map_err(|e| CallError::Invalid(format!("object is not valid JSON: {e}")))?;
            annotate(&mut object, &traceparent);
            let json = object.to_string();
            return cluster.write_json(kind, &head, &json).await;
        }
        cluster.write_json(kind, &head, json).await
    }

    pub(crate) async fn get_json(
        &self,
        gvk: Gvk,
        namespace: Option<String>,
        name: String,
    ) -> Result<String, CallError> {
        let (cluster, namespace) = self
            .cluster_for(
                Verb::Get,
                &gvk,
                namespace.as_deref(),
                NamespaceFrom::Argument,
            )
            .await?;
        let json = cluster.get_json(&gvk, namespace, &name).await?;
        Ok(String::from(&*json))
    }

    pub(crate) async fn list_json(
        &self,
        gvk: Gvk,
        mut options: krec_core::ListOptions,
    ) -> Result<Vec<String>, CallError> {
        let (cluster, namespace) = self
            .cluster_for(
                Verb::List,
                &gvk,
                options.namespace.as_deref(),
                NamespaceFrom::Argument,
            )
            .await?;
        options.namespace = namespace.map(str::to_owned);
        let items = cluster.list_json(&gvk, &options).await?;
        let mut total = 0;
        let mut out = Vec::with_capacity(items.len());
        for item in &items {
            let json = String::from(&**item);
            total += json.len();
            if total > MAX_LIST_BYTES {
                return Err(CallError::Invalid(format!(
                    "list of {gvk} exceeds the {MAX_LIST_BYTES}-byte response limit; narrow it with a namespace or selector"
                )));
            }
            out.push(json);
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn patch_json(
        &self,
        gvk: Gvk,
        namespace: Option<String>,
        name: String,
        how: PatchType,
        body: &str,
        status: bool,
    ) -> Result<String, CallError> {
        let verb = if status {
            Verb::PatchStatus
        } else {
            Verb::Patch
        };
        let (cluster, namespace) = self
            .cluster_for(verb, &gvk, namespace.as_deref(), NamespaceFrom::Argument)
            .await?;
        if body.len() > MAX_OBJECT_BYTES {
            return Err(CallError::Invalid(format!(
                "patch of {} bytes exceeds the {MAX_OBJECT_BYTES}-byte limit",
                body.len()
            )));
        }
        let body: Value = serde_json::from_str(body)
            .map_err(|e| CallError::Invalid(format!("patch is not valid JSON: {e}")))?;
        self.throttle_write().await?;
        cluster
            .patch_json(&gvk, namespace, &name, how.into(), body, status)
            .await
    }

    pub(crate) async fn delete_object(
        &self,
        gvk: Gvk,
        namespace: Option<String>,
        name: String,
        preconditions: Option<Preconditions>,
    ) -> Result<(), CallError> {
        let (cluster, namespace) = self
            .cluster_for(
                Verb::Delete,
                &gvk,
                namespace.as_deref(),
                NamespaceFrom::Argument,
            )
            .await?;
        self.throttle_write().await?;
        let pre = preconditions.map(|p| krec_core::Preconditions {
            uid: p.uid,
            resource_version: p.resource_version,
        });
        cluster.delete(&gvk, namespace, &name, pre.as_ref()).await
    }
}

/// The current reconcile's `traceparent`, when the objects it creates carry it
/// (`KREC_TRACE_OBJECTS=true`).
fn traceparent_for_objects() -> Option<String> {
    let trace = crate::telemetry::current()?;
    trace.context_on_objects().then(|| trace.traceparent())
}

/// Set `object`'s trace context annotation to `traceparent`.
fn annotate(object: &mut Value, traceparent: &str) {
    let Some(object) = object.as_object_mut() else {
        return;
    };
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(metadata) = metadata.as_object_mut() else {
        return;
    };
    let annotations = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(Default::default()));
    if annotations.is_null() {
        *annotations = Value::Object(Default::default());
    }
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(
            crate::telemetry::TRACEPARENT_ANNOTATION.to_owned(),
            Value::from(traceparent),
        );
    }
}

impl Host for HostState {
    async fn get(
        &mut self,
        kind: WitGvk,
        namespace: Option<String>,
        name: String,
    ) -> CallResult<String> {
        let started = std::time::Instant::now();
        let span = self.span("get", started, &kind, namespace.as_deref(), Some(&name));
        let calls = self.calls();
        let call = calls.get_json(kind.into(), namespace, name);
        let result = self.budgets.ledger.time(call).await;
        Ok(self.host_call("get", started, 0, result, span))
    }

    async fn list(&mut self, kind: WitGvk, options: ListOptions) -> CallResult<Vec<String>> {
        let options = krec_core::ListOptions {
            namespace: options.namespace,
            label_selector: options.label_selector,
            field_selector: options.field_selector,
            uncached: options.uncached,
        };
        let started = std::time::Instant::now();
        let span = self.span("list", started, &kind, options.namespace.as_deref(), None);
        let calls = self.calls();
        let call = calls.list_json(kind.into(), options);
        let result = self.budgets.ledger.time(call).await;
        Ok(self.host_call("list", started, 0, result, span))
    }

    async fn create(&mut self, object: String) -> CallResult<String> {
        self.write_call("create", Verb::Create, &object).await
    }

    async fn update(&mut self, object: String) -> CallResult<String> {
        self.write_call("update", Verb::Update, &object).await
    }

    async fn update_status(&mut self, object: String) -> CallResult<String> {
        self.write_call("update_status", Verb::UpdateStatus, &object)
            .await
    }

    async fn patch(
        &mut self,
        kind: WitGvk,
        namespace: Option<String>,
        name: String,
        how: PatchType,
        body: String,
        status: bool,
    ) -> CallResult<String> {
        let started = std::time::Instant::now();
        let verb = if status { "patch_status" } else { "patch" };
        let span = self.span(verb, started, &kind, namespace.as_deref(), Some(&name));
        let calls = self.calls();
        let call = calls.patch_json(kind.into(), namespace, name, how, &body, status);
        let result = self.budgets.ledger.time(call).await;
        Ok(self.host_call("patch", started, body.len(), result, span))
    }

    async fn delete(
        &mut self,
        kind: WitGvk,
        namespace: Option<String>,
        name: String,
        preconditions: Option<Preconditions>,
    ) -> CallResult<()> {
        let started = std::time::Instant::now();
        let span = self.span("delete", started, &kind, namespace.as_deref(), Some(&name));
        let calls = self.calls();
        let call = calls.delete_object(kind.into(), namespace, name, preconditions);
        let result = self.budgets.ledger.time(call).await;
        Ok(self.host_call("delete", started, 0, result, span))
    }
}

impl HostState {
    /// The span of a host call `verb` on `kind` (`namespace`/`name`), when traces are on.
    fn span(
        &self,
        verb: &'static str,
        started: std::time::Instant,
        kind: &WitGvk,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Option<crate::telemetry::CallSpan> {
        let trace = self.trace.as_ref()?;
        let mut span = trace
            .call(verb, started)
            .with("k8s.resource.group", kind.group.clone())
            .with("k8s.resource.version", kind.version.clone())
            .with("k8s.resource.kind", kind.kind.clone());
        if let Some(namespace) = namespace {
            span = span.with("k8s.namespace.name", namespace.to_owned());
        }
        if let Some(name) = name {
            span = span.with("k8s.object.name", name.to_owned());
        }
        Some(span)
    }

    /// A create, update or update of the status, `verb`: the object's head read once, for the
    /// call and for its span.
    async fn write_call(
        &mut self,
        verb: &'static str,
        how: Verb,
        object: &str,
    ) -> CallResult<String> {
        let started = std::time::Instant::now();
        let head = Calls::write_head(object);
        let span = self.write_span(verb, started, head.as_ref().ok());
        let calls = self.calls();
        let call = async { calls.write_as(object, head?, how).await };
        let result = self.budgets.ledger.time(call).await;
        Ok(self.host_call(verb, started, object.len(), result, span))
    }

    /// The span of a write of the object with `head` (when it has one), when traces are on.
    fn write_span(
        &self,
        verb: &'static str,
        started: std::time::Instant,
        head: Option<&ObjectHead>,
    ) -> Option<crate::telemetry::CallSpan> {
        let trace = self.trace.as_ref()?;
        let mut span = trace.call(verb, started);
        if let Some(head) = head {
            span = span
                .with("k8s.resource.group", head.gvk.group.clone())
                .with("k8s.resource.version", head.gvk.version.clone())
                .with("k8s.resource.kind", head.gvk.kind.clone());
            if let Some(namespace) = &head.namespace {
                span = span.with("k8s.namespace.name", namespace.clone());
            }
            if let Some(name) = &head.name {
                span = span.with("k8s.object.name", name.clone());
            }
        }
        Some(span)
    }
}

/// The `reader` interface of admission guests: the same checked reads as `client`'s.
impl crate::guest::bindings::guest::krec::reconciler::reader::Host for HostState {
    async fn get(
        &mut self,
        kind: WitGvk,
        namespace: Option<String>,
        name: String,
    ) -> CallResult<String> {
        Host::get(self, kind, namespace, name).await
    }

    async fn list(&mut self, kind: WitGvk, options: ListOptions) -> CallResult<Vec<String>> {
        Host::list(self, kind, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_context_should_be_one_more_annotation_whatever_the_object_has() {
        let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let key = crate::telemetry::TRACEPARENT_ANNOTATION;
        for (mut object, kept) in [
            (serde_json::json!({"kind": "ConfigMap"}), None),
            (serde_json::json!({"metadata": {"name": "a"}}), None),
            (serde_json::json!({"metadata": {"annotations": null}}), None),
            (
                serde_json::json!({"metadata": {"annotations": {"team": "a", key: "old"}}}),
                Some("team"),
            ),
        ] {
            annotate(&mut object, traceparent);
            assert_eq!(
                object["metadata"]["annotations"][key], traceparent,
                "{object}"
            );
            if let Some(kept) = kept {
                assert_eq!(object["metadata"]["annotations"][kept], "a");
            }
        }
        let mut not_an_object = serde_json::json!([1]);
        annotate(&mut not_an_object, traceparent);
        assert_eq!(not_an_object, serde_json::json!([1]));
    }
}
