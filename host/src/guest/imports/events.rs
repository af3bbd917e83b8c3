//! Host side of `krec:reconciler/events`: Kubernetes Events recorded on the guest's behalf.

use super::Calls;
use super::{MAX_EVENT_MESSAGE_BYTES, MAX_EVENT_REASON_BYTES};
use crate::cluster::ClusterCalls;
use crate::guest::bindings::WitError;
use crate::guest::bindings::krec::reconciler::events::{EventType, Host, ObjectReference};
use crate::guest::state::HostState;
use crate::manifest::Verb;
use krec_core::{CallError, EventRecord, Gvk};

/// `text` cut to at most `max` bytes on a character boundary.
fn truncate(mut text: String, max: usize) -> String {
    krec_core::cut(&mut text, max);
    text
}

impl Calls<'_> {
    pub(crate) async fn record_event(
        &self,
        regarding: ObjectReference,
        event_type: EventType,
        reason: String,
        message: String,
    ) -> Result<(), CallError> {
        let namespace = regarding.namespace.as_deref();
        let core = Gvk::new("", "v1", "Event");
        let events = Gvk::new("events.k8s.io", "v1", "Event");
        if !self.manifest.allows(Verb::Create, &core, namespace) {
            self.authorize(Verb::Create, &events, namespace)?;
        }
        if reason.is_empty() {
            return Err(CallError::Invalid("an Event needs a reason".into()));
        }
        let event = EventRecord {
            regarding: krec_core::ObjectReference {
                gvk: regarding.kind.into(),
                namespace: regarding.namespace,
                name: regarding.name,
                uid: regarding.uid,
            },
            event_type: match event_type {
                EventType::Normal => krec_core::EventType::Normal,
                EventType::Warning => krec_core::EventType::Warning,
            },
            reason: truncate(reason, MAX_EVENT_REASON_BYTES),
            message: truncate(message, MAX_EVENT_MESSAGE_BYTES),
            reporter: self.guest().to_owned(),
        };
        self.throttle_write().await?;
        self.cluster.record_event(event).await
    }
}

impl Host for HostState {
    async fn record(
        &mut self,
        regarding: ObjectReference,
        event_type: EventType,
        reason: String,
        message: String,
    ) -> wasmtime::Result<Result<(), WitError>> {
        let started = std::time::Instant::now();
        let taken = reason.len() + message.len();
        let span = self.trace.as_ref().map(|trace| {
            trace
                .call("event", started)
                .with("k8s.event.reason", reason.clone())
        });
        let calls = self.calls();
        let call = calls.record_event(regarding, event_type, reason, message);
        let result = self.budgets.ledger.time(call).await;
        Ok(self.host_call("event", started, taken, result, span))
    }
}
