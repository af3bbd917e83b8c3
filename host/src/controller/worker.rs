//! A controller's workers: each takes a key from the queue, reconciles it in the guest on the
//! current version, counts what happened and acts on the result (the table in the
//! [module docs](super)), quarantining keys that keep trapping.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use prometheus_client::metrics::histogram::Histogram;

use super::queue::{Cause, Trigger};
use super::stats::Outcome;
use super::{
    Controller, GROWN_INSTANCE_IDLE, QUARANTINE_AFTER, QUARANTINE_DELAY, Request, action_after,
};
use crate::guest::{Action, GuestModule, GuestWorker, ReconcileError};
use crate::rollout::worker::{Running, VersionWorkers};

/// What a worker's wait for a key ended with.
enum Taken {
    /// A key, and what queued it.
    Key(Request, Cause),
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
            let (request, cause) = match self.take(&mut gate, &mut guests).await {
                Taken::Key(request, cause) => (request, cause),
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
            // Traces on: the reconcile's host calls are noted in its trace (see `telemetry`).
            let trace = crate::telemetry::installed().map(crate::telemetry::Trace::start);
            let reconcile = guests.reconcile(running, sink, namespace, name, entering);
            let (result, guest) = crate::telemetry::in_trace(trace.clone(), reconcile).await;
            self.series.active_workers().dec();
            self.stats.end(&request);
            self.count_budgets(guest.module());
            if let Some(usage) = guest.last_usage() {
                self.count_usage(cause.received, taken, &usage);
            }
            // A kept trace's status: the error, as the log line says it.
            let failure = match (&trace, &result) {
                (Some(_), Err(err)) => Some(err.to_string()),
                _ => None,
            };
            let outcome = self.finish(&request, result, started.elapsed());
            if let Some(trace) = trace {
                let times = (cause, taken, started);
                let usage = guest.last_usage();
                self.trace(
                    &trace,
                    guest.module(),
                    &request,
                    times,
                    usage,
                    outcome,
                    failure,
                );
            }
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
                Some((request, cause)) => Taken::Key(request, cause),
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
    fn count_usage(&self, origin: Option<Instant>, taken: Instant, usage: &crate::guest::Usage) {
        self.observe_stages(origin, taken, usage);
        self.series.cpu().inc_by(usage.guest_time.as_secs_f64());
        let peak = i64::try_from(usage.memory_peak).unwrap_or(i64::MAX);
        let gauge = self.series.memory_peak();
        if gauge.get() < peak {
            gauge.set(peak);
        }
    }

    /// End `trace`, of `request`'s reconcile on `module` that ended as `outcome` (`failure`:
    /// its error): its root from the watch event (or the key's taking) to now, the wait in the
    /// queue, the guest's call (its CPU and memory), the reconcile that created the object (a
    /// link); the host calls are already noted. A trace the sampler does not keep is dropped
    /// before any of it is built. Attributes carry controller-runtime's names (`controller`,
    /// `controllerGroup`, `controllerKind`, `namespace`, `name`).
    #[allow(clippy::too_many_arguments)]
    fn trace(
        &self,
        trace: &crate::telemetry::Trace,
        module: &GuestModule,
        request: &Request,
        (cause, taken, entered): (Cause, Instant, Instant),
        usage: Option<crate::guest::Usage>,
        outcome: Outcome,
        failure: Option<String>,
    ) {
        use opentelemetry::KeyValue;
        use opentelemetry::trace::{SpanKind, Status};
        if !trace.keeps(failure.is_some()) {
            return;
        }
        let now = Instant::now();
        self.link_cause(trace, request);
        let origin = cause.received;
        if let Some(origin) = origin {
            trace.stage("queue", origin, taken, Vec::new());
        }
        let status = match failure {
            None => Status::Unset,
            Some(mut message) => {
                krec_core::cut(&mut message, 1024);
                Status::error(message)
            }
        };
        let mut guest = vec![KeyValue::new("krec.guest", self.name.clone())];
        if let Some(usage) = usage {
            guest.push(KeyValue::new(
                "krec.cpu_seconds",
                usage.guest_time.as_secs_f64(),
            ));
            guest.push(KeyValue::new(
                "krec.memory_peak_bytes",
                i64::try_from(usage.memory_peak).unwrap_or(i64::MAX),
            ));
        }
        let start = usage.map_or(entered, |u| u.entered);
        trace.guest(start, now, guest, status.clone());
        let for_kind = module.manifest().spec.for_kind.as_ref().map(|k| k.gvk());
        let (group, kind) = for_kind.map(|g| (g.group, g.kind)).unwrap_or_default();
        let mut attributes = vec![
            KeyValue::new("controller", self.name.clone()),
            KeyValue::new("controllerGroup", group),
            KeyValue::new("controllerKind", kind),
            KeyValue::new("name", request.name.clone()),
            KeyValue::new("krec.trigger", cause.trigger.label()),
            KeyValue::new("krec.result", outcome.label()),
        ];
        if let Some(namespace) = &request.namespace {
            attributes.push(KeyValue::new("namespace", namespace.clone()));
            attributes.push(KeyValue::new("k8s.namespace.name", namespace.clone()));
        }
        let root_start = origin.unwrap_or(taken);
        trace.finish(
            "reconcile",
            SpanKind::Consumer,
            root_start,
            attributes,
            status,
        );
    }

    /// Link `trace` to the reconcile whose write left its context on `request`'s object (see
    /// [`crate::telemetry::TRACEPARENT_ANNOTATION`]), if the cache holds it.
    fn link_cause(&self, trace: &crate::telemetry::Trace, request: &Request) {
        let informers = self
            .for_informers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(object) = informers
            .iter()
            .find_map(|i| i.cached(request.namespace.as_deref(), &request.name))
        else {
            return;
        };
        let metadata = object.metadata();
        let cause = metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::telemetry::TRACEPARENT_ANNOTATION))
            .and_then(|v| crate::telemetry::parse_traceparent(v));
        if let Some(cause) = cause {
            trace.link(
                cause,
                vec![opentelemetry::KeyValue::new(
                    "krec.link",
                    crate::telemetry::TRACEPARENT_ANNOTATION,
                )],
            );
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
        origin: Option<Instant>,
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

    /// Count `outcome`, and note it for the guest's thread priority.
    fn record(&self, outcome: Outcome) {
        self.stats.record(outcome);
        self.note_outcome(outcome);
    }

    /// Count and act on a reconcile's `result` (requeue, forget, quarantine), log it; how it
    /// ended.
    fn finish(
        &self,
        request: &Request,
        result: Result<Action, ReconcileError>,
        took: Duration,
    ) -> Outcome {
        let guest = self.name();
        let ms = took.as_secs_f64() * 1000.0;
        self.series.reconcile_time().observe(took.as_secs_f64());
        let trapped = matches!(result, Err(ReconcileError::Trap { .. }));
        let quarantined = self.trap_streak(request, trapped);
        let outcome = match &result {
            Ok(action) => match action_after(*action) {
                Action::Done => Outcome::Done,
                Action::Requeue => Outcome::Requeue,
                Action::RequeueAfter(_) => Outcome::RequeueAfter,
            },
            Err(ReconcileError::Trap { cause, .. }) => Outcome::Trap(*cause),
            Err(ReconcileError::Guest { .. } | ReconcileError::Config { .. }) => Outcome::Error,
        };
        self.record(outcome);
        let message = result.as_ref().err().map(ToString::to_string);
        self.stats.remember(request, outcome, took, message);
        match result.map(action_after) {
            Ok(Action::Done) => {
                self.queue.forget(request);
                tracing::debug!(target: "krec::reconcile", guest = %guest, key = %request, result = %"done", duration_ms = %format_args!("{ms:.1}"), "reconciled");
            }
            Ok(Action::Requeue) => {
                self.queue
                    .add_rate_limited(request.clone(), Trigger::Requeue);
                tracing::debug!(target: "krec::reconcile", guest = %guest, key = %request, result = %"requeue", duration_ms = %format_args!("{ms:.1}"), "reconciled");
            }
            Ok(Action::RequeueAfter(after)) => {
                self.queue.forget(request);
                self.queue
                    .add_after(request.clone(), after, Trigger::RequeueAfter);
                tracing::debug!(target: "krec::reconcile", guest = %guest, key = %request, result = %format_args!("requeue_after({after:?})"), duration_ms = %format_args!("{ms:.1}"), "reconciled");
            }
            Err(err) => {
                if quarantined {
                    self.queue.add_rate_limited_at_least(
                        request.clone(),
                        QUARANTINE_DELAY,
                        Trigger::Retry,
                    );
                } else {
                    self.queue.add_rate_limited(request.clone(), Trigger::Retry);
                }
                let retries = self.queue.num_requeues(request);
                self.stats.failed(format!("{request}: {err}"));
                tracing::warn!(target: "krec::reconcile", guest = %guest, key = %request, result = %"error", duration_ms = %format_args!("{ms:.1}"), retries, "{err}; retrying with backoff");
            }
        }
        outcome
    }
}
