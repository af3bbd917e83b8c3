//! A [`GuestWorker`]: one guest's instances, each in a store under the manifest's limits, kept
//! between calls and replaced after a trap.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::WasiCtxBuilder;

use super::cpu_clock::Metered;
use super::limits::GuestLimiter;
use super::trap::{DeadlineExceeded, classify, deadline_after};
use super::{
    Action, Body, ConfigRefused, GuestModule, GuestOutput, HOST_CALL_GRACE, HostState,
    ReconcileError, RunnerCall, TrapCause, bounded_error, one_line,
};
use crate::cluster::ClusterAccess;
use crate::guest::bindings::{Reconciler, WitAction, WitRequest};
use crate::manifest::Isolation;

/// The random bytes a replay's guest reads, in a cycle: fixed, and without a short period (an
/// xorshift sequence), so that a guest seeding from them sees no pattern.
pub(super) fn replay_random_bytes() -> Vec<u8> {
    let mut state: u64 = 0x6b72_6563_7265_706c;
    (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

/// A store for one of `module`'s instances: no WASI files (but a dev build's sources under
/// `krec dev`), sockets or environment (clocks and random allowed), the manifest's memory
/// limit, and an epoch callback that traps past the deadline and otherwise yields (held back
/// for the CPU budget when it is spent).
pub(super) fn new_store(
    module: &GuestModule,
    engine: &Engine,
    cluster: &Arc<dyn ClusterAccess>,
    metrics: Option<Arc<crate::process::metrics::Metrics>>,
    clock: Option<&SetClock>,
) -> Store<HostState> {
    let manifest = &module.manifest;
    let name = manifest.name.as_str();
    let mut wasi = WasiCtxBuilder::new();
    let version = manifest.version_role();
    wasi.stdout(GuestOutput::new(
        name,
        "stdout",
        version,
        module.budgets.clone(),
    ))
    .stderr(GuestOutput::new(
        name,
        "stderr",
        version,
        module.budgets.clone(),
    ))
    // WASI's argv: the guest's name as the program's name (Go's `os.Args[0]`, which k8s.io/klog
    // reads at start-up; a guest is never given arguments).
    .args(&[name])
    .allow_tcp(false)
    .allow_udp(false)
    .allow_ip_name_lookup(false);
    // A dev build under `krec dev`: its sources, read-only (see `dev_source`).
    if let Some(source) = module.dev_source()
        && let Err(err) = wasi.preopened_dir(
            &source.dir,
            super::dev_source::MOUNT,
            wasmtime_wasi::FsPerms::ReadOnly,
        )
    {
        tracing::warn!(
            "guest {name}: cannot mount its sources {}: {err}",
            source.dir.display()
        );
    }
    if let Some(clock) = clock {
        // A replay's run: the recorded clock, and every source of randomness fixed — the seed
        // Rust's `HashMap`s take their order from, and the "secure" random bytes Go's runtime
        // seeds its map iteration and `math/rand` from — so that the same inputs give the same
        // writes.
        wasi.wall_clock(clock.clone())
            .insecure_random_seed(0x6b72_6563)
            .secure_random(wasmtime_wasi::Deterministic::new(replay_random_bytes()))
            .insecure_random(wasmtime_wasi::Deterministic::new(replay_random_bytes()));
    }
    let wasi = wasi.build();
    let limits = GuestLimiter::new(
        usize::try_from(manifest.spec.limits.memory).unwrap_or(usize::MAX),
        module.budgets.memory.clone(),
    );
    let state = HostState {
        manifest: manifest.clone(),
        cluster: cluster.clone(),
        request: String::new(),
        deadline: deadline_after(manifest.spec.limits.timeout),
        limits,
        host_time: Duration::ZERO,
        first_call: None,
        trace: None,
        metrics,
        budgets: module.budgets.clone(),
        cpu_paused: Duration::ZERO,
        writes_allowed: super::imports::Writes::Allowed,
        dev_source: module.dev_source().map(|source| source.dir.clone()),
        wasi,
        table: ResourceTable::new(),
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limits);
    let timeout = manifest.spec.limits.timeout;
    store.epoch_deadline_callback(move |mut ctx| {
        let state = ctx.data_mut();
        if Instant::now() >= state.deadline {
            return Err(DeadlineExceeded(timeout).into());
        }
        Ok(match state.charge_cpu() {
            Some(pause) => UpdateDeadline::YieldCustom(1, Box::pin(tokio::time::sleep(pause))),
            None => UpdateDeadline::Yield(1),
        })
    });
    store.set_epoch_deadline(1);
    store
}

/// A wall clock a worker's guests read instead of the host's: set to a recorded time, so that
/// a replayed reconcile sees the clock it first ran at.
#[derive(Clone, Debug, Default)]
pub struct SetClock(Arc<std::sync::atomic::AtomicU64>);

impl SetClock {
    /// Set the time, in milliseconds since the Unix epoch.
    pub fn set_ms(&self, ms: u64) {
        self.0.store(ms, std::sync::atomic::Ordering::Relaxed);
    }
}

impl wasmtime_wasi::HostWallClock for SetClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        Duration::from_millis(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// A live instance: its store and the typed handle to its exports.
struct Instance {
    store: Store<HostState>,
    bindings: Reconciler,
}

/// One worker's handle on a guest: runs reconciles, keeping or discarding its instance as the
/// isolation policy and traps dictate.
pub struct GuestWorker {
    module: Arc<GuestModule>,
    cluster: Arc<dyn ClusterAccess>,
    metrics: Option<Arc<crate::process::metrics::Metrics>>,
    instance: Option<Instance>,
    last_usage: Option<Usage>,
    clock: Option<SetClock>,
}

/// What the last reconcile used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// Time running guest code: the reconcile's duration less the time spent in host calls.
    pub guest_time: Duration,
    /// The instance's largest linear memory so far, in bytes.
    pub memory_peak: usize,
    /// When the guest's reconcile was entered (its instance ready, the request passed).
    pub entered: Instant,
    /// When its first host call started, if it made one.
    pub first_call: Option<Instant>,
}

impl GuestWorker {
    /// A worker for `module` whose host calls go to `cluster`. No instance is created until the
    /// first reconcile.
    pub fn new(module: Arc<GuestModule>, cluster: Arc<dyn ClusterAccess>) -> Self {
        GuestWorker {
            module,
            cluster,
            metrics: None,
            instance: None,
            last_usage: None,
            clock: None,
        }
    }

    /// Give this worker's guests `clock` as their wall clock (a replay's).
    pub fn with_clock(mut self, clock: SetClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Count this worker's host calls in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::process::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// What the last reconcile that ran to its end (or returned an error) used.
    pub fn last_usage(&self) -> Option<Usage> {
        self.last_usage
    }

    /// The module this worker runs.
    pub fn module(&self) -> &Arc<GuestModule> {
        &self.module
    }

    /// Whether the worker holds a live instance (it does between reconciles unless the last one
    /// trapped or isolation is per-reconcile).
    pub fn has_instance(&self) -> bool {
        self.instance.is_some()
    }

    /// Whether the instance it keeps has grown more than [`IDLE_GROWTH_ALLOWANCE`](super::limits::IDLE_GROWTH_ALLOWANCE) past its
    /// size when new: one to give back once the worker has been idle a while
    /// ([`release_grown_instance`](Self::release_grown_instance)).
    pub fn holds_grown_instance(&self) -> bool {
        self.instance
            .as_ref()
            .is_some_and(|i| !i.store.data().limits.worth_keeping())
    }

    /// Drop a kept instance that has grown past the allowance, giving its memory back (the
    /// next reconcile starts a fresh one). A busy worker keeps its grown instance — growing it
    /// again every time would cost page faults — and an idle one gives it back.
    pub fn release_grown_instance(&mut self) {
        if self.holds_grown_instance() {
            self.instance = None;
        }
    }

    /// Drop the kept instance, if any, giving back its memory and stack; the next reconcile
    /// starts a fresh one. For a worker idle for [`IDLE_INSTANCE`](crate::controller::IDLE_INSTANCE).
    pub fn release_instance(&mut self) {
        self.instance = None;
    }

    async fn instantiate(
        module: &GuestModule,
        cluster: &Arc<dyn ClusterAccess>,
        metrics: Option<Arc<crate::process::metrics::Metrics>>,
        clock: Option<&SetClock>,
    ) -> wasmtime::Result<Instance> {
        let Body::Wasm(wasm) = &module.body else {
            return Err(wasmtime::format_err!(
                "guest {} runs compiled-in code: it has no instance",
                module.manifest.name
            ));
        };
        let mut store = new_store(module, wasm.pre.engine(), cluster, metrics, clock);
        let instance = module.start_instance(&mut store).await?;
        let bindings = wasm.reconciler.load(&mut store, &instance)?;
        store.data_mut().limits.mark_ready();
        Ok(Instance { store, bindings })
    }

    /// Create the instance now rather than at the first reconcile. This runs the component's
    /// start functions, so a module that traps on load is caught before it is swapped in.
    ///
    /// # Errors
    ///
    /// [`ReconcileError::Trap`] with the cause (`instantiate` for a failing start function).
    pub async fn warm_up(&mut self) -> Result<(), ReconcileError> {
        if self.instance.is_some() || matches!(self.module.body, Body::Runner(..)) {
            return Ok(());
        }
        let (module, cluster) = (self.module.clone(), self.cluster.clone());
        // `init` runs under the reconcile's limits: epochs stop a loop; a guest blocked in a
        // host call (sleeping through WASI, a hung API server) is abandoned at the outer bound,
        // so it cannot hold up `krec check`, the host's start or a reload.
        let timeout = module.manifest.spec.limits.timeout;
        let started = tokio::time::timeout(
            timeout.saturating_add(HOST_CALL_GRACE),
            Metered::new(
                module.budgets.cpu.clone(),
                Self::instantiate(&module, &cluster, self.metrics.clone(), self.clock.as_ref()),
            ),
        )
        .await
        .unwrap_or_else(|_| {
            Err(wasmtime::Error::from(DeadlineExceeded(timeout))
                .context("init blocked in a host call"))
        });
        match started {
            Ok(instance) => {
                if module.manifest.spec.isolation == Isolation::Reuse {
                    self.instance = Some(instance);
                }
                Ok(())
            }
            Err(err) => Err(match err.downcast_ref::<ConfigRefused>() {
                Some(refused) => ReconcileError::Config {
                    guest: module.manifest.name.clone(),
                    path: module.manifest.path.display().to_string(),
                    message: refused.0.clone(),
                },
                None => ReconcileError::Trap {
                    guest: module.manifest.name.clone(),
                    request: "(instantiation)".into(),
                    cause: match classify(&err) {
                        TrapCause::Other => TrapCause::Instantiate,
                        cause => cause,
                    },
                    message: one_line(&err),
                },
            }),
        }
    }

    /// Run one reconcile of `request` (`namespace`, `name`).
    ///
    /// # Errors
    ///
    /// [`ReconcileError::Guest`] when the guest returns an error; [`ReconcileError::Trap`] when it
    /// traps or breaks a limit, after which the instance is discarded.
    pub async fn reconcile(
        &mut self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Action, ReconcileError> {
        // A reconcile that traps reports no usage (not the previous one's).
        self.last_usage = None;
        if let Body::Runner(runner) = &self.module.body {
            let call = RunnerCall {
                manifest: &self.module.manifest,
                cluster: &self.cluster,
                metrics: self.metrics.clone(),
                budgets: self.module.budgets.clone(),
            };
            let (result, usage) = runner.reconcile(call, namespace, name).await;
            self.last_usage = Some(usage);
            return result;
        }
        let request = krec_core::KeyRef { namespace, name }.to_string();
        let guest = self.module.manifest.name.clone();
        let trap = |cause, err: &wasmtime::Error| ReconcileError::Trap {
            guest: guest.clone(),
            request: request.clone(),
            cause,
            message: one_line(err),
        };
        let timeout = self.module.manifest.spec.limits.timeout;
        // Epoch interruption stops guest code at its deadline; the outer timeout also bounds time
        // spent blocked in host calls (a guest sleeping through WASI, a hung API server).
        let outer = timeout.saturating_add(HOST_CALL_GRACE);
        // A guest over its CPU budget waits before it starts: short reconciles never meet an
        // epoch tick, so this is where a flood of them is held back.
        while let Some(pause) = self.module.budgets.cpu.debt() {
            self.module.budgets.cpu.held_back(pause);
            tokio::time::sleep(pause).await;
        }
        // The future owns what it uses (a `&self` held across awaits would need the store to be
        // `Sync`, which WASI's context is not).
        let kept = self.instance.take();
        let (module, cluster) = (self.module.clone(), self.cluster.clone());
        let metrics = self.metrics.clone();
        let clock = self.clock.clone();
        let request_text = request.clone();
        let trace = crate::telemetry::current();
        let run = async move {
            let mut instance = match kept {
                Some(instance) => instance,
                None => Self::instantiate(&module, &cluster, metrics, clock.as_ref())
                    .await
                    .map_err(|err| {
                        let cause = match classify(&err) {
                            TrapCause::Other => TrapCause::Instantiate,
                            cause => cause,
                        };
                        (cause, err)
                    })?,
            };
            let state = instance.store.data_mut();
            state.request = request_text;
            state.host_time = Duration::ZERO;
            state.first_call = None;
            state.trace = trace;
            state.cpu_paused = Duration::ZERO;
            state.deadline = deadline_after(timeout);
            instance.store.set_epoch_deadline(1);
            let wit_request = WitRequest {
                namespace: namespace.map(str::to_owned),
                name: name.to_owned(),
            };
            let started = Instant::now();
            let outcome = instance
                .bindings
                .call_reconcile(&mut instance.store, &wit_request)
                .await;
            let state = instance.store.data_mut();
            // A kept instance must not hold the reconcile's trace past it.
            state.trace = None;
            let state = instance.store.data();
            let usage = Usage {
                guest_time: started
                    .elapsed()
                    .saturating_sub(state.host_time)
                    .saturating_sub(state.cpu_paused),
                memory_peak: state.limits.memory_peak(),
                entered: started,
                first_call: state.first_call,
            };
            match outcome {
                Ok(result) => Ok((instance, result, usage)),
                // The instance may be mid-way through anything: it is dropped, never run again.
                Err(err) => Err((classify(&err), err)),
            }
        };
        let run = Metered::new(self.module.budgets.cpu.clone(), run);
        let (instance, result, usage) = match tokio::time::timeout(outer, run).await {
            Ok(Ok(done)) => done,
            Ok(Err((cause, err))) => return Err(trap(cause, &err)),
            Err(_) => {
                let err = wasmtime::Error::from(DeadlineExceeded(timeout))
                    .context("blocked in a host call");
                return Err(trap(TrapCause::Timeout, &err));
            }
        };
        self.last_usage = Some(usage);
        if self.module.manifest.spec.isolation == Isolation::Reuse {
            self.instance = Some(instance);
        }
        match result {
            Ok(WitAction::Done) => Ok(Action::Done),
            Ok(WitAction::Requeue) => Ok(Action::Requeue),
            Ok(WitAction::RequeueAfter(ms)) => Ok(Action::RequeueAfter(Duration::from_millis(ms))),
            Err(error) => Err(ReconcileError::Guest {
                guest,
                request,
                error: bounded_error(error.into()),
            }),
        }
    }
}
