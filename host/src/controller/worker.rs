//! A controller's workers: each takes a key from the queue, reconciles it in the guest on the
//! current version, counts what happened and acts on the result (the table in the
//! [module docs](super)), quarantining keys that keep trapping.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use prometheus_client::metrics::histogram::Histogram;

use super::stats::Outcome;
use super::{
    Controller, GROWN_INSTANCE_IDLE, QUARANTINE_AFTER, QUARANTINE_DELAY, Request, action_after,
};
use crate::guest::{Action, GuestModule, GuestWorker, ReconcileError};
use crate::rollout::worker::{Running, VersionWorkers};

/// What a worker's wait for a key ended with.
enum Taken {
    /// A key, and when the watch event that caused it was received (if one did).
    Key(Request, crate::controller::queue::Origin),
    /// No key: idle instances were given back, or the gate closed.
    Nothing,
    /// The queue shut down.
    Shutdown,
}

impl Controller {
    /// Worker `index`: take a key, reconcile it on the current version, act on the result;
    /// give back an instance a burst grew once idle for [`GROWN_INSTANCE_IDLE`], and any
    /// instance once idle for the controller's [`instance_idle`](Controller::instance_idle);
    /// until shutdown, or until fewer workers are wanted.
    pub(super) async fn work(self: Arc<Self>, index: usize) {
        let mut guests = VersionWorkers::new(self.metrics.clone());
        let mut gate = self.gate.clone();
        while index < self.workers_wanted.load(Ordering::SeqCst) {
            // Only the leader (the guest's owner) reconciles.
            if gate.wait_for(|open| *open).await.is_err() {
                break;
            }
            let (request, origin) = match self.take(&mut gate, &mut guests).await {
                Taken::Key(request, origin) => (request, origin),
                Taken::Nothing => continue,
                Taken::Shutdown => break,
            };
            let taken = Instant::now();
            let version = self.version.load_full();
            let running = Running {
                module: &version.module,
                cluster: &version.cluster,
                rollout: version.rollout.as_ref(),
            };
            let mut started = Instant::now();
            let entering = || {
                self.stats.begin(&request);
                self.series.active_workers().inc();
                started = Instant::now();
                let _ = version.first_reconcile.set(started);
            };
            let (namespace, name) = (request.namespace.as_deref(), request.name.as_str());
            let sink = version.rollouts.recording().sink();
            let (result, guest) = guests
                .reconcile(running, sink, namespace, name, entering)
                .await;
            self.series.active_workers().dec();
            self.stats.end(&request);
            self.count_budgets(guest.module());
            if let Some(usage) = guest.last_usage() {
                self.count_usage(origin, taken, &usage);
            }
            self.finish(&request, result, started.elapsed());
            self.queue.done(&request);
        }
    }

    /// The next key from the queue, with the time its watch event was received; or nothing,
    /// having given back idle instances or seen the gate close; or the queue's shutdown.
    async fn take(
        &self,
        gate: &mut tokio::sync::watch::Receiver<bool>,
        guests: &mut VersionWorkers,
    ) -> Taken {
        let closing = async {
            // A gate whose sender is gone never closes (and must not spin).
            if gate.wait_for(|open| !*open).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        // An instance a burst grew is given back once the worker has been idle a while, any
        // other after a longer while.
        let instance_idle = self.instance_idle();
        // How long to wait for a key, and whether every kept instance goes after that.
        let (patience, release_all) =
            if guests.holds_grown_instance() && GROWN_INSTANCE_IDLE < instance_idle {
                (Some(GROWN_INSTANCE_IDLE), false)
            } else if guests.holds_instance() {
                (Some(instance_idle), true)
            } else {
                (None, false)
            };
        let idle = async {
            match patience {
                Some(patience) => tokio::time::sleep(patience).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            request = self.queue.get_caused() => match request {
                Some((request, origin)) => Taken::Key(request, origin),
                None => Taken::Shutdown,
            },
            // `get` is cancel-safe: a key is only taken in the poll that returns it.
            // A closed gate (leadership or the guest's lease lost) may stay closed for long:
            // the instances go now rather than wait for it.
            () = closing => {
                self.release_instances(guests.guests_mut());
                Taken::Nothing
            }
            () = idle => {
                if release_all {
                    self.release_instances(guests.guests_mut());
                } else {
                    guests.release_grown_instance();
                }
                Taken::Nothing
            }
        }
    }

    /// Count a reconcile's `usage` (its stages, CPU and memory peak), its key taken at `taken`
    /// and its watch event received at `origin`.
    fn count_usage(
        &self,
        origin: crate::controller::queue::Origin,
        taken: Instant,
        usage: &crate::guest::Usage,
    ) {
        self.observe_stages(origin, taken, usage);
        self.series.cpu().inc_by(usage.guest_time.as_secs_f64());
        let peak = i64::try_from(usage.memory_peak).unwrap_or(i64::MAX);
        let gauge = self.series.memory_peak();
        if gauge.get() < peak {
            gauge.set(peak);
        }
    }

    /// Give back the instances `workers` keep, counting each.
    fn release_instances(&self, workers: [Option<&mut GuestWorker>; 2]) {
        for guest in workers.into_iter().flatten() {
            if guest.has_instance() {
                guest.release_instance();
                self.stats.instance_released();
            }
        }
    }

    /// The stages of one reconcile in `krec_event_stage_seconds`: from `taken` (a worker took
    /// the key) to the guest entered, to its first host call, to its return (now); and from
    /// `origin` (the watch event that caused it was received, if one did) to the guest entered.
    fn observe_stages(
        &self,
        origin: crate::controller::queue::Origin,
        taken: std::time::Instant,
        usage: &crate::guest::Usage,
    ) {
        let observe = |series: &Histogram, took: Duration| series.observe(took.as_secs_f64());
        let stages = &self.stages;
        if let Some(origin) = origin {
            observe(
                stages.event_to_guest(),
                usage.entered.saturating_duration_since(origin),
            );
        }
        observe(
            stages.start(),
            usage.entered.saturating_duration_since(taken),
        );
        if let Some(first_call) = usage.first_call {
            observe(
                stages.first_call(),
                first_call.saturating_duration_since(usage.entered),
            );
        }
        observe(stages.guest(), usage.entered.elapsed());
    }

    /// Add what the guest's budgets held back since the last reconcile to the metrics.
    fn count_budgets(&self, module: &GuestModule) {
        let budgets = module.budgets();
        let dropped = budgets.log.take_dropped();
        if dropped > 0 {
            self.series.log_dropped().inc_by(dropped);
        }
        let cpu = budgets.cpu.take_throttled();
        if !cpu.is_zero() {
            self.series.cpu_throttled().inc_by(cpu.as_secs_f64());
        }
        let writes = budgets.writes.take_waited();
        if !writes.is_zero() {
            self.series.write_throttled().inc_by(writes.as_secs_f64());
        }
    }

    /// Track `request`'s traps in a row; whether it is (now) quarantined. Entering quarantine
    /// is logged once and counted; leaving it is logged.
    fn trap_streak(&self, request: &Request, trapped: bool) -> bool {
        let mut streaks = self.trap_streaks.lock().unwrap_or_else(|e| e.into_inner());
        if !trapped {
            if streaks.remove(request).unwrap_or(0) >= QUARANTINE_AFTER {
                tracing::info!(guest = %self.name, key = %request, "key released from quarantine: its reconcile no longer traps");
            }
            return false;
        }
        let streak = streaks.entry(request.clone()).or_insert(0);
        *streak = streak.saturating_add(1);
        if *streak == QUARANTINE_AFTER {
            tracing::warn!(
                guest = %self.name,
                key = %request,
                "key quarantined after {QUARANTINE_AFTER} traps in a row: retried at most every {QUARANTINE_DELAY:?} until a reconcile of it does not trap"
            );
            self.series.quarantined().inc();
        }
        *streak >= QUARANTINE_AFTER
    }

    fn finish(&self, request: &Request, result: Result<Action, ReconcileError>, took: Duration) {
        let guest = self.name();
        let ms = took.as_secs_f64() * 1000.0;
        self.series.reconcile_time().observe(took.as_secs_f64());
        let trapped = matches!(result, Err(ReconcileError::Trap { .. }));
        let quarantined = self.trap_streak(request, trapped);
        match result.map(action_after) {
            Ok(Action::Done) => {
                self.stats.record(Outcome::Done);
                self.queue.forget(request);
                tracing::debug!(target: "krec::reconcile", guest = %guest, key = %request, result = %"done", duration_ms = %format_args!("{ms:.1}"), "reconciled");
            }
            Ok(Action::Requeue) => {
                self.stats.record(Outcome::Requeue);
                self.queue.add_rate_limited(request.clone());
                tracing::debug!(target: "krec::reconcile", guest = %guest, key = %request, result = %"requeue", duration_ms = %format_args!("{ms:.1}"), "reconciled");
            }
            Ok(Action::RequeueAfter(after)) => {
                self.stats.record(Outcome::RequeueAfter);
                self.queue.forget(request);
                self.queue.add_after(request.clone(), after);
                tracing::debug!(target: "krec::reconcile", guest = %guest, key = %request, result = %format_args!("requeue_after({after:?})"), duration_ms = %format_args!("{ms:.1}"), "reconciled");
            }
            Err(err) => {
                self.stats.record(match &err {
                    ReconcileError::Trap { cause, .. } => Outcome::Trap(*cause),
                    ReconcileError::Guest { .. } | ReconcileError::Config { .. } => Outcome::Error,
                });
                if quarantined {
                    self.queue
                        .add_rate_limited_at_least(request.clone(), QUARANTINE_DELAY);
                } else {
                    self.queue.add_rate_limited(request.clone());
                }
                let retries = self.queue.num_requeues(request);
                self.stats.failed(format!("{request}: {err}"));
                tracing::warn!(target: "krec::reconcile", guest = %guest, key = %request, result = %"error", duration_ms = %format_args!("{ms:.1}"), retries, "{err}; retrying with backoff");
            }
        }
    }
}
