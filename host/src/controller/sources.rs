//! A controller's sources besides watch events: its tickers and resync period, the replay of
//! every key each time its gate opens, and the guest's `map` export for `mapByGuest` watches.

use std::sync::Arc;

use super::queue::{Cause, Trigger};
use super::{Controller, Request};
use crate::guest::ReconcileError;
use krec_core::Gvk;

impl Controller {
    /// Start the task that queues every key each time the gate opens after being closed.
    pub(super) fn start_opener(self: &Arc<Self>) {
        let mut opener = self.opener.lock().unwrap_or_else(|e| e.into_inner());
        if opener.is_some() {
            return;
        }
        let this = Arc::downgrade(self);
        let mut gate = self.gate.clone();
        // Open now: the informers' initial events have queued every key already. Closed now:
        // they were dropped, and the first opening resyncs (read here, not at the task's first
        // poll, so that an opening in between is not missed).
        let mut closed = !*gate.borrow_and_update();
        *opener = Some(tokio::spawn(async move {
            loop {
                if !closed && gate.wait_for(|open| !*open).await.is_err() {
                    return;
                }
                closed = false;
                if gate.wait_for(|open| *open).await.is_err() {
                    return;
                }
                match this.upgrade() {
                    Some(controller) => controller.resync_all(),
                    None => return,
                }
            }
        }));
    }

    /// Start the task that runs the guest's `map` export for the objects of `mapByGuest`
    /// watches, one call per state in the [backlog](super::map_backlog::MapBacklog) (which coalesces a burst of
    /// events on one object), and enqueues what it returns. Its failures are logged and
    /// counted (`krec_guest_map_calls_total{result="error"|"trap"}`); that state's requests are
    /// lost, as when a controller-runtime map function returns none.
    pub(super) fn start_mapper(self: &Arc<Self>) {
        let mut mapper = self.mapper.lock().unwrap_or_else(|e| e.into_inner());
        if mapper.is_some() {
            return;
        }
        let this = Arc::downgrade(self);
        let backlog = self.map_backlog.clone();
        *mapper = Some(self.spawn_guest(async move {
            loop {
                let job = backlog.next().await;
                let Some(controller) = this.upgrade() else {
                    return;
                };
                for object in job.objects {
                    controller.map(&job.gvk, object).await;
                }
                backlog.finished();
            }
        }));
    }

    async fn map(&self, gvk: &Gvk, object: Arc<str>) {
        let version = self.version.load_full();
        // A version swapped in meanwhile may not map this kind any more.
        if !version.handlers.maps_by_guest(gvk) {
            return;
        }
        let kind = crate::guest::bindings::WitGvk {
            group: gvk.group.clone(),
            version: gvk.version.clone(),
            kind: gvk.kind.clone(),
        };
        let result = version
            .module
            .map(&version.cluster, Some(self.metrics.clone()), kind, object)
            .await;
        self.series
            .map_call(
                matches!(result, Err(ReconcileError::Trap { .. })),
                result.is_err(),
            )
            .inc();
        match result {
            Ok(requests) => {
                for request in requests {
                    match Request::checked(request.namespace.as_deref(), &request.name) {
                        Ok(request) if !version.handlers.admits(&request) => tracing::warn!(
                            target: "krec::reconcile",
                            guest = %self.name,
                            kind = %gvk,
                            "map returned {request}, outside the guest's namespace: dropped"
                        ),
                        Ok(request) => self.queue.add_caused(request, Cause::of(Trigger::Map)),
                        Err(problem) => tracing::warn!(
                            target: "krec::reconcile",
                            guest = %self.name,
                            kind = %gvk,
                            "map returned an unusable request, dropped: {problem}"
                        ),
                    }
                }
            }
            Err(err) => {
                tracing::warn!(target: "krec::reconcile", guest = %self.name, kind = %gvk, "{err}; the event's requests are dropped");
            }
        }
    }

    /// Queue every key the guest would see: every cached object of every kind it watches goes
    /// through its handlers again (as a create, as to a new subscriber: `for` objects, owners,
    /// mapped targets, `mapByGuest` calls alike), and each ticker's request is queued. What a
    /// replica that takes a guest over does first (sharded hosts, a new leader), so that no
    /// change the previous owner had queued is lost.
    pub fn resync_all(&self) {
        let informers = self
            .informers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for informer in &informers {
            informer.replay(self);
        }
        for ticker in &self.version.load().module.manifest().spec.tickers {
            let request = &ticker.request;
            self.queue.add_caused(
                Request::new(request.namespace.as_deref(), &request.name),
                Cause::of(Trigger::Ticker),
            );
        }
    }

    /// (Re)start the tickers and the resync of the current manifest.
    pub(super) fn restart_sources(&self) {
        let spec = self.version.load().module.manifest().spec.clone();
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        for task in sources.drain(..) {
            task.abort();
        }
        for ticker in &spec.tickers {
            let request = Request::new(ticker.request.namespace.as_deref(), &ticker.request.name);
            let queue = self.queue.clone();
            let every = ticker.every;
            // A ticker fires when the guest starts, then every period.
            sources.push(tokio::spawn(async move {
                let mut interval = tokio::time::interval(every);
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    interval.tick().await;
                    queue.add_caused(request.clone(), Cause::of(Trigger::Ticker));
                }
            }));
        }
        if let Some(period) = spec.resync_period {
            let queue = self.queue.clone();
            let for_informers = self
                .for_informers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            sources.push(tokio::spawn(async move {
                let start = tokio::time::Instant::now() + period;
                let mut interval = tokio::time::interval_at(start, period);
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    interval.tick().await;
                    for informer in &for_informers {
                        for key in informer.keys() {
                            queue.add_caused(key, Cause::of(Trigger::Resync));
                        }
                    }
                }
            }));
        }
    }
}
