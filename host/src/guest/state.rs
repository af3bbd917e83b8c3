//! [`HostState`]: what a guest's store holds — the guest's identity and permissions, the cluster
//! it reaches through the host, its WASI context and its resource limits.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::GuestLimiter;
use crate::cluster::ClusterAccess;
use crate::manifest::Manifest;

/// Per-store data of a guest instance.
pub struct HostState {
    /// The guest's manifest: its name and permissions.
    pub manifest: Arc<Manifest>,
    /// Where the guest's reads and writes go.
    pub cluster: Arc<dyn ClusterAccess>,
    /// The request being reconciled, for log lines (`ns/name`).
    pub request: String,
    /// When the current reconcile must end.
    pub deadline: Instant,
    /// Memory, table and instance limits.
    pub limits: GuestLimiter,
    /// Time spent in host calls during the current reconcile.
    pub host_time: std::time::Duration,
    /// Where host calls are counted, if anywhere.
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    /// The guest's log budget, shared by all its channels and instances.
    pub log_budget: Arc<super::LogBudget>,
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
}

impl HostState {
    /// The guest's name.
    pub fn guest(&self) -> &str {
        &self.manifest.name
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
