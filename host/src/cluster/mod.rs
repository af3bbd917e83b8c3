//! Cluster access: the one seam between the guest plumbing and wherever objects live.
//!
//! The host side of the WIT `client` and `events` interfaces calls a [`ClusterAccess`] after
//! checking the guest's permissions. Its backends: `MemoryCluster` (an in-memory object set
//! for tests and `krec check`, on the embedded API server's store; without the
//! `embedded-apiserver` feature, `EmptyCluster` in its place) and [`live::LiveCluster`] (reads from the shared cache, writes to the
//! API server through [`crate::cluster::client::ApiClient`], each write within the guest's
//! [`fence`] when guests are sharded). The words they share are [`krec_core`]'s.

pub mod cache;
pub mod client;
pub mod connect;
#[cfg(not(feature = "embedded-apiserver"))]
mod empty;
pub mod fence;
pub mod live;
#[cfg(feature = "embedded-apiserver")]
mod memory;
pub mod permissions;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use krec_core::{
    CallError, EventRecord, Gvk, ListOptions, ObjectHead, PatchType, Preconditions, WriteKind,
    json_text,
};

#[cfg(not(feature = "embedded-apiserver"))]
pub use empty::EmptyCluster;
#[cfg(feature = "embedded-apiserver")]
pub use memory::{MAX_EVENTS, MemoryCluster, RecordedEvent};

/// Where guests' reads and writes go. Objects are JSON values with `apiVersion` and `kind`.
///
/// Implementations apply Kubernetes semantics: optimistic concurrency on `resourceVersion`,
/// `generateName`, the status subresource, finalizers. Permission checks happen before a call
/// reaches this trait.
#[async_trait]
pub trait ClusterAccess: Send + Sync + 'static {
    /// Get one object.
    async fn get(&self, gvk: &Gvk, namespace: Option<&str>, name: &str)
    -> Result<Value, CallError>;
    /// List objects.
    async fn list(&self, gvk: &Gvk, options: &ListOptions) -> Result<Vec<Value>, CallError>;
    /// Whether objects of `gvk` live in namespaces (`false`: cluster-scoped), as the API server
    /// serves the kind. Permission checks use it: a namespace given for a cluster-scoped kind
    /// grants nothing.
    ///
    /// # Errors
    ///
    /// `not-found` when the kind is not served.
    async fn namespaced(&self, gvk: &Gvk) -> Result<bool, CallError>;
    /// Get one object as JSON text, as a guest receives it. The default serializes what
    /// [`get`](Self::get) returns; a cache hands out the text it holds.
    async fn get_json(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<str>, CallError> {
        json_text(&self.get(gvk, namespace, name).await?)
    }
    /// List objects as JSON text. The default serializes what [`list`](Self::list) returns.
    async fn list_json(
        &self,
        gvk: &Gvk,
        options: &ListOptions,
    ) -> Result<Vec<Arc<str>>, CallError> {
        self.list(gvk, options)
            .await?
            .iter()
            .map(json_text)
            .collect()
    }
    /// Create an object; returns it as stored.
    async fn create(&self, object: Value) -> Result<Value, CallError>;
    /// Replace an object (or only its status when `status` is true); returns it as stored.
    async fn update(&self, object: Value, status: bool) -> Result<Value, CallError>;
    /// Patch an object (or its status); returns it as stored.
    async fn patch(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        body: Value,
        status: bool,
    ) -> Result<Value, CallError>;
    /// Delete an object.
    async fn delete(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        preconditions: Option<&Preconditions>,
    ) -> Result<(), CallError>;
    /// Record an Event.
    async fn record_event(&self, event: EventRecord) -> Result<(), CallError>;
    /// Write an object given as JSON text (`head` read from it) and return it as stored, as
    /// JSON text. The default parses the text and calls [`create`](Self::create) or
    /// [`update`](Self::update); a client of the API server sends the text as it is.
    async fn write_json(
        &self,
        kind: WriteKind,
        _head: &ObjectHead,
        json: &str,
    ) -> Result<String, CallError> {
        let object: Value = serde_json::from_str(json)
            .map_err(|e| CallError::Invalid(format!("object is not valid JSON: {e}")))?;
        let stored = match kind {
            WriteKind::Create => self.create(object).await?,
            WriteKind::Update => self.update(object, false).await?,
            WriteKind::UpdateStatus => self.update(object, true).await?,
        };
        serde_json::to_string(&stored)
            .map_err(|e| CallError::Other(format!("encoding object: {e}")))
    }
}
