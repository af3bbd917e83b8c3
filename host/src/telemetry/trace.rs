//! One reconcile's trace: what happened, noted as it happens, made spans when it ends.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use opentelemetry::trace::{
    Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{
    IdGenerator as _, RandomIdGenerator, SpanData, SpanEvents, SpanLinks,
};

use super::Telemetry;

tokio::task_local! {
    /// The trace of the reconcile this task is running, if traces are on.
    static CURRENT: Arc<Trace>;
}

/// The trace of the reconcile the calling task runs, if traces are on.
pub fn current() -> Option<Arc<Trace>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// Run `future` with `trace` as the [`current`] one (none: as it is).
pub async fn in_trace<F: std::future::Future>(trace: Option<Arc<Trace>>, future: F) -> F::Output {
    match trace {
        Some(trace) => CURRENT.scope(trace, future).await,
        None => future.await,
    }
}

/// A span noted, made a [`SpanData`] if the trace is kept.
#[derive(Debug)]
struct Noted {
    id: SpanId,
    parent: SpanId,
    name: Cow<'static, str>,
    kind: SpanKind,
    start: Instant,
    end: Instant,
    attributes: Vec<KeyValue>,
    status: Status,
}

/// A host call's span, begun; [`end`](CallSpan::end) notes it.
#[derive(Debug)]
pub struct CallSpan {
    trace: Arc<Trace>,
    name: &'static str,
    start: Instant,
    attributes: Vec<KeyValue>,
}

impl CallSpan {
    /// Add an attribute.
    pub fn with(mut self, key: &'static str, value: impl Into<Value>) -> Self {
        self.attributes.push(KeyValue::new(key, value));
        self
    }

    /// Note the call as ended now with `error` (`None`: it succeeded); an error's kind is its
    /// `error.type`, and its message the span's status. A `not_found` is an answer, not a
    /// failure.
    pub fn end(mut self, error: Option<&krec_core::CallError>) {
        let status = match error {
            None => Status::Unset,
            Some(err) => {
                self.attributes
                    .push(KeyValue::new("error.type", err.reason()));
                if matches!(err, krec_core::CallError::NotFound(_)) {
                    Status::Unset
                } else {
                    Status::error(err.to_string())
                }
            }
        };
        let parent = self.trace.guest_span;
        self.trace.note(Noted {
            id: self.trace.new_span_id(),
            parent,
            name: Cow::Borrowed(self.name),
            kind: SpanKind::Client,
            start: self.start,
            end: Instant::now(),
            attributes: std::mem::take(&mut self.attributes),
            status,
        });
    }
}

/// One reconcile's (or admission review's) trace: its ids, and the spans noted so far.
#[derive(Debug)]
pub struct Trace {
    telemetry: Arc<Telemetry>,
    trace_id: TraceId,
    root: SpanId,
    /// The span of the guest's call, parent of the host calls.
    guest_span: SpanId,
    /// A wall-clock time and the instant it was read at: spans' instants are placed by it.
    wall: (SystemTime, Instant),
    noted: Mutex<Vec<Noted>>,
    /// What the root links to: the context of the write that caused the reconcile.
    links: Mutex<Vec<Link>>,
    /// Attributes of the root noted before it ends.
    root_attributes: Mutex<Vec<KeyValue>>,
    /// The remote span the root is a child of (an admission review's caller, by its
    /// `traceparent` header), if any.
    parent: Option<SpanContext>,
}

impl Trace {
    /// A new trace on `telemetry`, its root and guest spans' ids chosen.
    pub fn start(telemetry: Arc<Telemetry>) -> Arc<Self> {
        Self::start_in(telemetry, None)
    }

    /// A new trace on `telemetry` whose root is a child of the remote span `parent` (from a
    /// caller's `traceparent`), if one: it is kept as the caller decided (or when it fails).
    pub fn start_in(telemetry: Arc<Telemetry>, parent: Option<SpanContext>) -> Arc<Self> {
        let ids = RandomIdGenerator::default();
        Arc::new(Trace {
            telemetry,
            parent: parent.clone(),
            trace_id: parent.map_or_else(|| ids.new_trace_id(), |p| p.trace_id()),
            root: ids.new_span_id(),
            guest_span: ids.new_span_id(),
            wall: (SystemTime::now(), Instant::now()),
            noted: Mutex::new(Vec::with_capacity(8)),
            links: Mutex::new(Vec::new()),
            root_attributes: Mutex::new(Vec::new()),
        })
    }

    /// Note an attribute of the root, before it ends.
    pub fn root_attribute(&self, key: &'static str, value: impl Into<Value>) {
        self.root_attributes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(KeyValue::new(key, value));
    }

    /// Link the root to `context`: the reconcile of a write that caused this one (read from
    /// the object it reconciles, see [`super::TRACEPARENT_ANNOTATION`]).
    pub fn link(&self, context: SpanContext, attributes: Vec<KeyValue>) {
        self.links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Link::new(context, attributes, 0));
    }

    /// Whether the objects this trace's reconcile creates carry its context.
    pub fn context_on_objects(&self) -> bool {
        self.telemetry.on_objects
    }

    /// The trace's id.
    pub fn trace_id(&self) -> TraceId {
        self.trace_id
    }

    /// The context of the root span, as a write it causes carries it on (W3C `traceparent`).
    pub fn traceparent(&self) -> String {
        let sampled = self.sampled();
        format!(
            "00-{}-{}-{}",
            self.trace_id,
            self.root,
            if sampled { "01" } else { "00" }
        )
    }

    /// Whether [`finish`](Self::finish) will export the trace, `failed` or not: a caller can
    /// skip building the root's attributes of one that will not be.
    pub fn keeps(&self, failed: bool) -> bool {
        failed || self.sampled()
    }

    /// Whether the trace is kept if it does not fail: as its remote parent was, else as the
    /// sampler says.
    fn sampled(&self) -> bool {
        match &self.parent {
            Some(parent) => parent.is_sampled(),
            None => self.telemetry.sampler.keeps(self.trace_id),
        }
    }

    fn new_span_id(&self) -> SpanId {
        RandomIdGenerator::default().new_span_id()
    }

    fn note(&self, noted: Noted) {
        self.noted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(noted);
    }

    /// Begin a host call's span named `name` (`get`, `list`, `create`, …), a child of the
    /// guest's call.
    pub fn call(self: &Arc<Self>, name: &'static str, start: Instant) -> CallSpan {
        CallSpan {
            trace: self.clone(),
            name,
            start,
            attributes: Vec::with_capacity(4),
        }
    }

    /// Note a child of the root: `name` from `start` to `end`.
    pub fn stage(
        &self,
        name: &'static str,
        start: Instant,
        end: Instant,
        attributes: Vec<KeyValue>,
    ) {
        self.note(Noted {
            id: self.new_span_id(),
            parent: self.root,
            name: Cow::Borrowed(name),
            kind: SpanKind::Internal,
            start,
            end,
            attributes,
            status: Status::Unset,
        });
    }

    /// Note the guest's call, from `start` to `end`, parent of the host calls.
    pub fn guest(&self, start: Instant, end: Instant, attributes: Vec<KeyValue>, status: Status) {
        self.note(Noted {
            id: self.guest_span,
            parent: self.root,
            name: Cow::Borrowed("guest"),
            kind: SpanKind::Internal,
            start,
            end,
            attributes,
            status,
        });
    }

    /// End the trace: its root span `name` from `start` to now, with `attributes` and
    /// `status`. The trace is exported when the sampler keeps it or the status is an error.
    pub fn finish(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        start: Instant,
        mut attributes: Vec<KeyValue>,
        status: Status,
    ) {
        let failed = matches!(status, Status::Error { .. });
        attributes.append(
            &mut self
                .root_attributes
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let mut noted = std::mem::take(&mut *self.noted.lock().unwrap_or_else(|e| e.into_inner()));
        if !self.keeps(failed) {
            return;
        }
        // A call abandoned mid-way (a review past its deadline) noted no guest span: its host
        // calls hang from the root instead.
        if !noted.iter().any(|n| n.id == self.guest_span) {
            for orphan in noted.iter_mut().filter(|n| n.parent == self.guest_span) {
                orphan.parent = self.root;
            }
        }
        noted.push(Noted {
            id: self.root,
            parent: self
                .parent
                .as_ref()
                .map_or(SpanId::INVALID, SpanContext::span_id),
            name: name.into(),
            kind,
            start,
            end: Instant::now(),
            attributes,
            status,
        });
        let links = std::mem::take(&mut *self.links.lock().unwrap_or_else(|e| e.into_inner()));
        let mut spans: Vec<SpanData> = noted.into_iter().map(|n| self.span_data(n)).collect();
        if let Some(root) = spans.last_mut() {
            root.links.links = links;
        }
        self.telemetry.export(spans);
    }

    /// `instant` on the wall clock.
    fn at(&self, instant: Instant) -> SystemTime {
        let (wall, then) = self.wall;
        if instant >= then {
            wall + (instant - then)
        } else {
            wall - (then - instant)
        }
    }

    fn span_data(&self, noted: Noted) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                self.trace_id,
                noted.id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_is_remote: noted.id == self.root && self.parent.is_some(),
            parent_span_id: noted.parent,
            span_kind: noted.kind,
            name: noted.name,
            start_time: self.at(noted.start),
            end_time: self.at(noted.end),
            attributes: noted.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: noted.status,
            instrumentation_scope: self.telemetry.scope.clone(),
        }
    }
}
