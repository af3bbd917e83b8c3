//! [`HostState`]: what a guest's store holds — the guest's identity and permissions, the cluster
//! it reaches through the host, its WASI context and its resource limits.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::limits::GuestLimiter;
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
    /// When the current reconcile's first host call started, if it made one.
    pub first_call: Option<Instant>,
    /// Where host calls are counted, if anywhere.
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    /// The guest's budgets (log, CPU, writes), shared by all its workers and instances.
    pub budgets: Arc<super::budget::GuestBudgets>,
    /// When guest code was last charged to its CPU account.
    pub cpu_mark: Instant,
    /// `host_time` when guest code was last charged.
    pub host_time_mark: std::time::Duration,
    /// Time the current reconcile was held back for its CPU budget.
    pub cpu_paused: std::time::Duration,
    /// Serving an admission review: every write (`client` writes, Events) is refused.
    pub read_only: bool,
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
}

impl HostState {
    /// The guest's name.
    pub fn guest(&self) -> &str {
        &self.manifest.name
    }

    /// Start counting the guest's CPU from now (entering guest code).
    pub fn start_cpu(&mut self) {
        self.cpu_mark = Instant::now();
        self.host_time_mark = self.host_time;
    }

    /// Charge the guest's CPU account with the time since the last charge, less the time spent
    /// in host calls; how long the guest must now be held back, if at all. With `hold`, the
    /// caller holds it back for that long (and it is counted so); without, the debt is paid
    /// before the next reconcile.
    pub fn charge_cpu(&mut self, hold: bool) -> Option<std::time::Duration> {
        let now = Instant::now();
        let wall = now.saturating_duration_since(self.cpu_mark);
        let in_host = self.host_time.saturating_sub(self.host_time_mark);
        let pause = self
            .budgets
            .cpu
            .charge(wall.saturating_sub(in_host))
            .filter(|_| hold);
        if let Some(pause) = pause {
            // The pause is not the guest's time.
            self.budgets.cpu.held_back(pause);
            self.cpu_paused += pause;
        }
        self.cpu_mark = now + pause.unwrap_or_default();
        self.host_time_mark = self.host_time;
        pause
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
