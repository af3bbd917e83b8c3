//! One controller worker's guests, as a rollout sees them: the live version's worker, whose
//! calls go through a [`Tap`] (taped while a shadow compares or a recording runs), and a
//! canary candidate's worker for the keys the canary takes. [`VersionWorkers::reconcile`]
//! chooses which runs a key, tapes it when asked, and hands the tape to the shadow and the
//! recording — so the controller's worker only takes keys and acts on results.

use std::sync::Arc;

use super::Rollout;
use super::recording::Sink;
use super::tape::{self, Outcome, Reconcile, Tap};
use crate::cluster::ClusterAccess;
use crate::guest::{Action, GuestModule, GuestWorker, ReconcileError};
use crate::process::metrics::Metrics;

/// A worker's live and canary guests (see the module's docs).
pub struct VersionWorkers {
    metrics: Arc<Metrics>,
    /// The live version's worker and the tap its calls go through.
    live: Option<(GuestWorker, Arc<Tap>)>,
    /// A canary candidate's worker.
    canary: Option<GuestWorker>,
}

/// What the version running a key is: its module, its cluster access and its rollout, if one
/// is under way.
#[derive(Clone, Copy)]
pub struct Running<'a> {
    /// The live version's module.
    pub module: &'a Arc<GuestModule>,
    /// Its access to the cluster.
    pub cluster: &'a Arc<dyn ClusterAccess>,
    /// Its rollout.
    pub rollout: Option<&'a Arc<Rollout>>,
}

impl VersionWorkers {
    /// No guest yet: each is made when a key first needs it.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        VersionWorkers {
            metrics,
            live: None,
            canary: None,
        }
    }

    /// Whether either guest keeps an instance.
    pub fn holds_instance(&self) -> bool {
        self.live.as_ref().is_some_and(|(w, _)| w.has_instance())
            || self.canary.as_ref().is_some_and(GuestWorker::has_instance)
    }

    /// Whether the live guest keeps an instance a burst grew.
    pub fn holds_grown_instance(&self) -> bool {
        self.live
            .as_ref()
            .is_some_and(|(w, _)| w.holds_grown_instance())
    }

    /// Give back the live guest's instance if a burst grew it.
    pub fn release_grown_instance(&mut self) {
        if let Some((worker, _)) = &mut self.live {
            worker.release_grown_instance();
        }
    }

    /// The guests, to give back their instances.
    pub fn guests_mut(&mut self) -> [Option<&mut GuestWorker>; 2] {
        [self.live.as_mut().map(|(w, _)| w), self.canary.as_mut()]
    }

    /// Reconcile `namespace`/`name` on `running`: on the canary candidate if the rollout's
    /// canary takes the key, otherwise on the live version — taped when a shadow compares
    /// or `recording` records, and the tape offered to them. `entering` is called just before
    /// the guest is. The result, and the guest that ran (for its usage and budgets).
    pub async fn reconcile(
        &mut self,
        running: Running<'_>,
        recording: Option<Arc<Sink>>,
        namespace: Option<&str>,
        name: &str,
        entering: impl FnOnce(),
    ) -> (Result<Action, ReconcileError>, &GuestWorker) {
        if !self
            .live
            .as_ref()
            .is_some_and(|(w, _)| Arc::ptr_eq(w.module(), running.module))
        {
            // A new version: the old instance is dropped with the old worker.
            self.live = None;
        }
        let metrics = &self.metrics;
        let (live, tap) = self.live.get_or_insert_with(|| {
            let tap = Arc::new(Tap::new(running.cluster.clone()));
            let worker =
                GuestWorker::new(running.module.clone(), tap.clone()).with_metrics(metrics.clone());
            (worker, tap)
        });
        let tap = tap.clone();
        let rollout = running.rollout;
        let candidate = rollout.filter(|r| r.takes(namespace, name));
        if rollout.is_none() {
            // A rollout decided: its candidate's instance goes.
            self.canary = None;
        }
        if let Some(rollout) = candidate
            && !self
                .canary
                .as_ref()
                .is_some_and(|w| Arc::ptr_eq(w.module(), rollout.candidate()))
        {
            self.canary = Some(
                GuestWorker::new(rollout.candidate().clone(), running.cluster.clone())
                    .with_metrics(self.metrics.clone()),
            );
        }
        let guest = match (candidate, self.canary.as_mut()) {
            (Some(_), Some(canary)) => canary,
            _ => live,
        };
        let shadowing = candidate.is_none() && rollout.is_some_and(|r| r.wants_tape());
        let taping = shadowing || (candidate.is_none() && recording.is_some());
        tap.arm(taping);
        let clock_ms = if taping { tape::now_ms() } else { 0 };
        entering();
        let result = guest.reconcile(namespace, name).await;
        let outcome = Outcome::of(&result);
        if let Some(rollout) = rollout {
            if candidate.is_some() {
                rollout.canary_ended(&outcome);
            } else {
                rollout.live_ended(&outcome);
            }
        }
        if taping {
            let recording = recording.as_deref();
            if tap.is_cut() {
                // Cut short (too long a tape): neither compared nor recorded.
                if shadowing && let Some(rollout) = rollout {
                    rollout.skipped();
                }
                if let Some(sink) = recording {
                    sink.drop_one();
                }
            } else {
                let taped = Reconcile {
                    seq: rollout.map_or(0, |r| r.next_seq()),
                    namespace: namespace.map(str::to_owned),
                    name: name.to_owned(),
                    clock_ms,
                    tape: tap.take(),
                    outcome,
                };
                if let Some(sink) = recording {
                    sink.push(taped.clone());
                }
                if shadowing && let Some(rollout) = rollout {
                    rollout.offer(taped);
                }
            }
        }
        (result, guest)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::guest::script::Script;
    use crate::manifest::Manifest;

    fn module(name: &str) -> Arc<GuestModule> {
        let text = format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: {name}}}\nspec:\n  module: {name}.wasm\n  tickers: [{{every: 1h, request: {{name: tick}}}}]\n"
        );
        let manifest = Manifest::parse(Path::new("guest.yaml"), &text).expect("manifest");
        Arc::new(GuestModule::with_runner(
            Arc::new(manifest),
            Script::new(Vec::new()),
        ))
    }

    #[cfg(feature = "embedded-apiserver")]
    fn cluster() -> Arc<dyn ClusterAccess> {
        Arc::new(crate::cluster::MemoryCluster::new())
    }

    #[cfg(not(feature = "embedded-apiserver"))]
    fn cluster() -> Arc<dyn ClusterAccess> {
        Arc::new(crate::cluster::EmptyCluster::new())
    }

    #[tokio::test]
    async fn a_worker_should_run_the_current_version_and_tape_for_a_recording_only() {
        let cluster = cluster();
        let (first, second) = (module("first"), module("second"));
        let mut guests = VersionWorkers::new(Arc::default());
        let running = |module| Running {
            module,
            cluster: &cluster,
            rollout: None,
        };
        // Not recorded: nothing taped, the live version runs.
        let mut entered = false;
        let (result, guest) = guests
            .reconcile(running(&first), None, None, "a", || entered = true)
            .await;
        assert!(matches!(result, Ok(Action::Done)), "{result:?}");
        assert!(Arc::ptr_eq(guest.module(), &first));
        assert!(entered, "told before the guest was entered");
        // Recorded: each reconcile reaches the recording, numbered.
        let (sink, mut lines) = Sink::new(false);
        let (result, _) = guests
            .reconcile(running(&first), Some(sink.clone()), Some("ns"), "b", || {})
            .await;
        assert!(result.is_ok(), "{result:?}");
        let line = lines.try_recv().expect("a recorded reconcile");
        assert!(
            line.contains("\"name\":\"b\"") && line.contains("\"seq\":1"),
            "{line}"
        );
        assert!(lines.try_recv().is_err(), "one line per reconcile");
        // A new version: a new live guest, on its module.
        let (_, guest) = guests
            .reconcile(running(&second), None, None, "c", || {})
            .await;
        assert!(Arc::ptr_eq(guest.module(), &second));
        assert!(
            !guests.holds_instance(),
            "compiled-in code keeps no instance"
        );
    }
}
