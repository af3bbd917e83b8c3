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
    pub metrics: Option<Arc<crate::process::metrics::Metrics>>,
    /// The guest's budgets (log, CPU, writes), shared by all its workers and instances.
    pub budgets: Arc<super::budget::GuestBudgets>,
    /// Time the current reconcile was held back for its CPU budget.
    pub cpu_paused: std::time::Duration,
    /// Whether writes (`client` writes, Events) are allowed: not in a review or a map.
    pub writes_allowed: Writes,
    /// The current reconcile's trace, when traces are on: each host call is noted in it.
    pub trace: Option<Arc<crate::telemetry::Trace>>,
    /// A dev build's source folder under `krec dev` (see [`super::dev_source`]).
    pub dev_source: Option<std::path::PathBuf>,
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
}

/// Whether a guest's call may write: in a reconcile, yes; while it answers an admission review
/// or maps an event, no (those only read), and the refusal says which.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Writes {
    /// A reconcile.
    #[default]
    Allowed,
    /// An admission review (validate, mutate, convert).
    RefusedInReview,
    /// A `map` of an event.
    RefusedInMap,
}

impl HostState {
    /// The guest's name.
    pub fn guest(&self) -> &str {
        &self.manifest.name
    }

    /// Charge the guest's CPU account with the CPU its call used since the last charge
    /// (`cpu_clock`: the thread's CPU time while the call is polled); how
    /// long the guest must now be held back, if at all — and it is, for that long, counted so.
    pub fn charge_cpu(&mut self) -> Option<std::time::Duration> {
        let used = super::cpu_clock::take_since_mark();
        let pause = self.budgets.cpu.charge(used)?;
        // The pause is not the guest's time.
        self.budgets.cpu.held_back(pause);
        self.cpu_paused += pause;
        Some(pause)
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
