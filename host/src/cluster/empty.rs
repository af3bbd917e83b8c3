//! [`EmptyCluster`]: the cluster `krec check` starts a guest against in a host built without
//! the embedded API server — nothing to read, nowhere to write.

use async_trait::async_trait;
use serde_json::Value;

use super::ClusterAccess;
use krec_core::{CallError, EventRecord, Gvk, ListOptions, PatchType, Preconditions};

/// A cluster with no objects: reads find nothing, writes fail as `unavailable` (an `init` that
/// writes is checked by the default build, whose in-memory cluster keeps what it is given).
/// Scope answers come from the built-in kinds' facts; other kinds count as namespaced.
#[derive(Debug, Default)]
pub struct EmptyCluster;

impl EmptyCluster {
    /// The empty cluster.
    pub fn new() -> Self {
        EmptyCluster
    }
}

fn nowhere() -> CallError {
    CallError::Unavailable(
        "no cluster: this krec was built without the embedded API server (feature \
         `embedded-apiserver`), so `krec check` has nowhere to write"
            .into(),
    )
}

#[async_trait]
impl ClusterAccess for EmptyCluster {
    async fn get(&self, gvk: &Gvk, _: Option<&str>, name: &str) -> Result<Value, CallError> {
        Err(CallError::NotFound(format!(
            "{} {name:?} not found",
            gvk.kind
        )))
    }

    async fn list(&self, _: &Gvk, _: &ListOptions) -> Result<Vec<Value>, CallError> {
        Ok(Vec::new())
    }

    async fn namespaced(&self, gvk: &Gvk) -> Result<bool, CallError> {
        Ok(!krec_core::kinds::is_builtin_cluster_scoped(
            &gvk.group, &gvk.kind,
        ))
    }

    async fn create(&self, _: Value) -> Result<Value, CallError> {
        Err(nowhere())
    }

    async fn update(&self, _: Value, _: bool) -> Result<Value, CallError> {
        Err(nowhere())
    }

    async fn patch(
        &self,
        _: &Gvk,
        _: Option<&str>,
        _: &str,
        _: PatchType,
        _: Value,
        _: bool,
    ) -> Result<Value, CallError> {
        Err(nowhere())
    }

    async fn delete(
        &self,
        _: &Gvk,
        _: Option<&str>,
        _: &str,
        _: Option<&Preconditions>,
    ) -> Result<(), CallError> {
        Err(nowhere())
    }

    async fn record_event(&self, _: EventRecord) -> Result<(), CallError> {
        Ok(())
    }
}
