//! [`EmptyCluster`]: the cluster `krec check` starts a guest against in a host built without
//! the embedded API server — nothing to read, nowhere to write.

use async_trait::async_trait;

use super::{ClusterAccess, Reply, Request};
use krec_core::CallError;

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

#[async_trait]
impl ClusterAccess for EmptyCluster {
    async fn call(&self, request: Request<'_>) -> Result<Reply, CallError> {
        match request {
            Request::Get(target) => Err(CallError::NotFound(format!(
                "{} {:?} not found",
                target.gvk.kind, target.name
            ))),
            Request::List { .. } => Ok(Reply::Objects(Vec::new())),
            Request::Namespaced(gvk) => Ok(Reply::Namespaced(
                !krec_core::kinds::is_builtin_cluster_scoped(&gvk.group, &gvk.kind),
            )),
            Request::Event(_) => Ok(Reply::Done),
            Request::Write { .. } | Request::Patch { .. } | Request::Delete { .. } => {
                Err(CallError::Unavailable(
                    "no cluster: this krec was built without the embedded API server (feature \
                     `embedded-apiserver`), so `krec check` has nowhere to write"
                        .into(),
                ))
            }
        }
    }
}
