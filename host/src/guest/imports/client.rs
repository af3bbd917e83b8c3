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

    pub(crate) async fn write(&self, json: &str, verb: Verb) -> Result<String, CallError> {
        if json.len() > MAX_OBJECT_BYTES {
            return Err(CallError::Invalid(format!(
                "object of {} bytes exceeds the {MAX_OBJECT_BYTES}-byte limit",
                json.len()
            )));
        }
        // The text is checked and its head read, but it goes to the API server as it is.
        let head = ObjectHead::parse(json)?;
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

impl Host for HostState {
    async fn get(
        &mut self,
        kind: WitGvk,
        namespace: Option<String>,
        name: String,
    ) -> CallResult<String> {
        let started = std::time::Instant::now();
        let calls = self.calls();
        let call = calls.get_json(kind.into(), namespace, name);
        let result = self.budgets.ledger.time(call).await;
        Ok(self.host_call("get", started, 0, result))
    }

    async fn list(&mut self, kind: WitGvk, options: ListOptions) -> CallResult<Vec<String>> {
        let options = krec_core::ListOptions {
            namespace: options.namespace,
            label_selector: options.label_selector,
            field_selector: options.field_selector,
            uncached: options.uncached,
        };
        let started = std::time::Instant::now();
        let calls = self.calls();
        let call = calls.list_json(kind.into(), options);
        let result = self.budgets.ledger.time(call).await;
        Ok(self.host_call("list", started, 0, result))
    }

    async fn create(&mut self, object: String) -> CallResult<String> {
        let started = std::time::Instant::now();
        let calls = self.calls();
        let call = calls.write(&object, Verb::Create);
        let result = self.budgets.ledger.time(call).await;
        Ok(self.host_call("create", started, object.len(), result))
    }

    async fn update(&mut self, object: String) -> CallResult<String> {
        let started = std::time::Instant::now();
        let calls = self.calls();
        let call = calls.write(&object, Verb::Update);
        let result = self.budgets.ledger.time(call).await;
        Ok(self.host_call("update", started, object.len(), result))
    }

    async fn update_status(&mut self, object: String) -> CallResult<String> {
        let started = std::time::Instant::now();
        let calls = self.calls();
        let call = calls.write(&object, Verb::UpdateStatus);
        let result = self.budgets.ledger.time(call).await;
        Ok(self.host_call("update_status", started, object.len(), result))
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
        let calls = self.calls();
        let call = calls.patch_json(kind.into(), namespace, name, how, &body, status);
        let result = self.budgets.ledger.time(call).await;
        Ok(self.host_call("patch", started, body.len(), result))
    }

    async fn delete(
        &mut self,
        kind: WitGvk,
        namespace: Option<String>,
        name: String,
        preconditions: Option<Preconditions>,
    ) -> CallResult<()> {
        let started = std::time::Instant::now();
        let calls = self.calls();
        let call = calls.delete_object(kind.into(), namespace, name, preconditions);
        let result = self.budgets.ledger.time(call).await;
        Ok(self.host_call("delete", started, 0, result))
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
