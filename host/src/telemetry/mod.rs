//! Traces: OpenTelemetry spans of each reconcile — its trigger, its wait in the queue, the guest
//! call and each host call the guest made — exported over OTLP, configured the standard way
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_TRACES_SAMPLER`, …; see [`Telemetry::from_env`]).
//!
//! Spans are not made while a reconcile runs: its [`Trace`] notes what happened as plain
//! records (an instant pair and a few attributes each), and only when the reconcile ends is the
//! trace kept — by the sampler's ratio, or always when the reconcile failed or trapped — and its
//! spans built and handed to the SDK's batch processor, which exports them from a thread of its
//! own. Off (no endpoint configured), nothing is recorded: one load of a static per reconcile.

mod trace;

pub use trace::{CallSpan, Trace, current, in_trace};

/// The annotation an object a traced reconcile creates carries its context in (W3C
/// `traceparent`), when `KREC_TRACE_OBJECTS=true` — the carrier KEP-5915 proposes; a reconcile
/// of an object carrying it links to that context.
pub const TRACEPARENT_ANNOTATION: &str = "tracing.k8s.io/traceparent";

/// `builder` with the current reconcile's `traceparent` header, when it is traced: the API
/// server's own spans (kube-apiserver's `APIServerTracing`) join the reconcile's trace.
pub fn with_traceparent(builder: http::request::Builder) -> http::request::Builder {
    match current() {
        Some(trace) => builder.header("traceparent", trace.traceparent()),
        None => builder,
    }
}

/// The span context a W3C `traceparent` value names (version `00`), as a remote one; `None`
/// when it is not one.
pub fn parse_traceparent(value: &str) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceState};
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00"
        || parts.next().is_some()
        || trace.len() != 32
        || span.len() != 16
        || flags.len() != 2
    {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;

use opentelemetry::InstrumentationScope;
use opentelemetry::trace::TraceId;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SpanData, SpanProcessor};

/// The process's telemetry, once [`install`]ed.
static INSTALLED: ArcSwapOption<Telemetry> = ArcSwapOption::const_empty();

/// Where spans go and which traces are kept.
pub struct Telemetry {
    processor: Box<dyn SpanProcessor>,
    sampler: Sampler,
    scope: InstrumentationScope,
    /// Whether the objects traced reconciles create carry their context in [`TRACEPARENT_ANNOTATION`].
    on_objects: bool,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("sampler", &self.sampler)
            .finish_non_exhaustive()
    }
}

/// Which traces are kept: a trace of a failed or trapped reconcile always is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampler {
    /// Every trace (`always_on`, `parentbased_always_on`).
    Always,
    /// Only failed ones (`always_off`, `parentbased_always_off`).
    Never,
    /// This fraction, decided by the trace id as the SDK's `traceidratio` decides it.
    Ratio(f64),
}

impl Sampler {
    /// The sampler `OTEL_TRACES_SAMPLER` (and `OTEL_TRACES_SAMPLER_ARG`) name; the default is
    /// `parentbased_always_on`, as the specification's.
    ///
    /// # Errors
    ///
    /// A sampler krec does not know (`jaeger_remote`, `xray`), or a ratio that is not a number
    /// from 0 to 1, named.
    pub fn parse(name: Option<&str>, arg: Option<&str>) -> Result<Self, String> {
        let ratio = || -> Result<f64, String> {
            let Some(arg) = arg else { return Ok(1.0) };
            match arg.trim().parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
                _ => Err(format!(
                    "OTEL_TRACES_SAMPLER_ARG={arg:?} is not a ratio from 0 to 1"
                )),
            }
        };
        match name.map(str::trim).unwrap_or("parentbased_always_on") {
            "" | "always_on" | "parentbased_always_on" => Ok(Sampler::Always),
            "always_off" | "parentbased_always_off" => Ok(Sampler::Never),
            "traceidratio" | "parentbased_traceidratio" => Ok(Sampler::Ratio(ratio()?)),
            other => Err(format!(
                "OTEL_TRACES_SAMPLER={other:?} is not one krec supports (always_on, always_off, traceidratio, and their parentbased_ forms)"
            )),
        }
    }

    /// Whether a trace of `trace_id` that did not fail is kept.
    pub fn keeps(self, trace_id: TraceId) -> bool {
        match self {
            Sampler::Always => true,
            Sampler::Never => false,
            Sampler::Ratio(ratio) => {
                // The low 64 bits below ratio × 2^63, as the SDK's TraceIdRatioBased.
                let bytes = trace_id.to_bytes();
                let mut low = [0u8; 8];
                low.copy_from_slice(&bytes[8..]);
                let bound = (ratio * (1u64 << 63) as f64) as u64;
                (u64::from_be_bytes(low) >> 1) < bound
            }
        }
    }
}

impl Telemetry {
    /// Telemetry handing kept spans to `processor`.
    pub fn new(processor: Box<dyn SpanProcessor>, sampler: Sampler) -> Self {
        Telemetry {
            processor,
            sampler,
            scope: InstrumentationScope::builder("krec")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            on_objects: false,
        }
    }

    /// Have the objects traced reconciles create carry their context (see
    /// [`TRACEPARENT_ANNOTATION`]). Off by default: it writes an annotation the guest did not
    /// ask for. Creates only: an update or patch carrying a new context each reconcile would
    /// change an object its guest meant to leave as it was.
    pub fn with_context_on_objects(mut self, on: bool) -> Self {
        self.on_objects = on;
        self
    }

    /// Whether the objects traced reconciles create carry their context.
    pub fn context_on_objects(&self) -> bool {
        self.on_objects
    }

    /// The telemetry the environment configures, as OpenTelemetry's SDKs read it; `None` when
    /// traces are off: no OTLP endpoint set (`OTEL_EXPORTER_OTLP_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) and `OTEL_TRACES_EXPORTER` not `otlp`, or
    /// `OTEL_SDK_DISABLED=true`, or `OTEL_TRACES_EXPORTER=none`. Spans go over OTLP/HTTP
    /// (protobuf) to the endpoint (`/v1/traces` appended to the generic one); the batch
    /// processor's `OTEL_BSP_*`, `OTEL_SERVICE_NAME` (default `krec`) and
    /// `OTEL_RESOURCE_ATTRIBUTES` apply. `KREC_TRACE_OBJECTS=true` has the objects traced
    /// reconciles create carry their context (see [`TRACEPARENT_ANNOTATION`]).
    ///
    /// # Errors
    ///
    /// A setting krec cannot follow (gRPC, an unknown exporter or sampler), named.
    pub fn from_env() -> Result<Option<Self>, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"));
        match var("OTEL_TRACES_EXPORTER").as_deref().map(str::trim) {
            Some("none") => return Ok(None),
            Some("otlp") => {}
            None if endpoint.is_some() => {}
            None => return Ok(None),
            Some(other) => {
                return Err(format!(
                    "OTEL_TRACES_EXPORTER={other:?}: krec exports traces over OTLP only (otlp, or none)"
                ));
            }
        }
        let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"));
        if let Some(protocol) = protocol
            && protocol.trim() != "http/protobuf"
        {
            return Err(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={protocol:?}: krec exports OTLP over HTTP with protobuf (http/protobuf) only; point it at the collector's HTTP port (4318)"
            ));
        }
        let sampler = Sampler::parse(
            var("OTEL_TRACES_SAMPLER").as_deref(),
            var("OTEL_TRACES_SAMPLER_ARG").as_deref(),
        )?;
        use opentelemetry_otlp::WithExportConfig as _;
        // The exporter's reqwest has no TLS crypto of its own (an https endpoint): ring, as
        // the process's other clients use; harmless when installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build()
            .map_err(|e| format!("the OTLP exporter: {e}"))?;
        let mut resource = Resource::builder();
        let named_in_attributes = var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
            attributes
                .split(',')
                .any(|pair| pair.trim_start().starts_with("service.name="))
        });
        if var("OTEL_SERVICE_NAME").is_none() && !named_in_attributes {
            resource = resource.with_service_name("krec");
        }
        let mut processor = BatchSpanProcessor::builder(exporter).build();
        processor.set_resource(&resource.build());
        let on_objects = match var("KREC_TRACE_OBJECTS").as_deref().map(str::trim) {
            None | Some("false" | "0") => false,
            Some("true" | "1") => true,
            Some(other) => {
                return Err(format!("KREC_TRACE_OBJECTS={other:?} is not true or false"));
            }
        };
        Ok(Some(
            Telemetry::new(Box::new(processor), sampler).with_context_on_objects(on_objects),
        ))
    }

    /// Telemetry exporting over OTLP/HTTP to `endpoint` (a collector's traces URL, as
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` gives it) with the SDK's batch processor, keeping
    /// traces as `sampler` says: what [`from_env`](Self::from_env) builds, for a caller that
    /// configures it in code (a benchmark).
    ///
    /// # Errors
    ///
    /// When the exporter cannot be built, named.
    pub fn otlp_http(endpoint: &str, sampler: Sampler) -> Result<Self, String> {
        use opentelemetry_otlp::WithExportConfig as _;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .build()
            .map_err(|e| format!("the OTLP exporter: {e}"))?;
        let mut processor = BatchSpanProcessor::builder(exporter).build();
        processor.set_resource(&Resource::builder().with_service_name("krec").build());
        Ok(Telemetry::new(Box::new(processor), sampler))
    }

    /// The sampler.
    pub fn sampler(&self) -> Sampler {
        self.sampler
    }

    /// Hand a kept trace's spans to the processor.
    fn export(&self, spans: Vec<SpanData>) {
        for span in spans {
            self.processor.on_end(span);
        }
    }

    /// Export what is held, waiting at most `timeout` (the processor's own bound).
    fn flush(&self) {
        if let Err(err) = self.processor.force_flush() {
            tracing::warn!("exporting the last spans failed: {err}");
        }
    }

    /// Stop the processor, exporting what it holds within `timeout`.
    fn shutdown(&self, timeout: Duration) {
        if let Err(err) = self.processor.shutdown_with_timeout(timeout) {
            tracing::warn!("stopping the span exporter: {err}");
        }
    }
}

/// Make `telemetry` the process's; false when one already is (the first stays).
pub fn install(telemetry: Telemetry) -> bool {
    let installed = INSTALLED.compare_and_swap(&None::<Arc<Telemetry>>, Some(Arc::new(telemetry)));
    installed.is_none()
}

/// Make `telemetry` the process's whatever was (`None`: traces off), and hand back the one it
/// replaces — for benchmarks comparing tracing off and on in one process. Traces already
/// started finish on the telemetry they started with.
pub fn replace(telemetry: Option<Telemetry>) -> Option<Arc<Telemetry>> {
    INSTALLED.swap(telemetry.map(Arc::new))
}

/// The process's telemetry, if traces are on.
#[inline]
pub fn installed() -> Option<Arc<Telemetry>> {
    INSTALLED.load_full()
}

/// Install the telemetry the environment configures (see [`Telemetry::from_env`]); whether
/// traces are on.
///
/// # Errors
///
/// A setting krec cannot follow, named.
pub fn install_from_env() -> Result<bool, String> {
    match Telemetry::from_env()? {
        Some(telemetry) => {
            let sampler = telemetry.sampler();
            install(telemetry);
            tracing::info!(
                "traces on: exported over OTLP/HTTP, sampler {sampler:?} (failed reconciles always kept)"
            );
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Export the spans held, before the process exits (within the processor's export timeout).
pub fn flush() {
    if let Some(telemetry) = installed() {
        telemetry.flush();
    }
}

/// Export the spans held and stop exporting: the process is about to exit.
pub fn shutdown() {
    if let Some(telemetry) = installed() {
        telemetry.shutdown(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samplers_should_be_read_as_the_specification_names_them() {
        assert_eq!(Sampler::parse(None, None), Ok(Sampler::Always));
        assert_eq!(
            Sampler::parse(Some("parentbased_traceidratio"), Some("0.01")),
            Ok(Sampler::Ratio(0.01))
        );
        assert_eq!(
            Sampler::parse(Some("traceidratio"), None),
            Ok(Sampler::Ratio(1.0))
        );
        assert_eq!(Sampler::parse(Some("always_off"), None), Ok(Sampler::Never));
        let err = Sampler::parse(Some("traceidratio"), Some("2")).expect_err("out of range");
        assert!(err.contains("OTEL_TRACES_SAMPLER_ARG"), "{err}");
        let err = Sampler::parse(Some("xray"), None).expect_err("unknown");
        assert!(err.contains("xray"), "{err}");
    }

    /// Keeps every span it is handed.
    #[derive(Debug, Clone, Default)]
    struct Kept(std::sync::Arc<std::sync::Mutex<Vec<SpanData>>>);

    impl SpanProcessor for Kept {
        fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}

        fn on_end(&self, span: SpanData) {
            self.0.lock().expect("kept").push(span);
        }

        fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
            Ok(())
        }

        fn shutdown_with_timeout(&self, _: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
            Ok(())
        }
    }

    fn telemetry(sampler: Sampler) -> (Arc<Telemetry>, Kept) {
        let kept = Kept::default();
        let telemetry = Arc::new(Telemetry::new(Box::new(kept.clone()), sampler));
        (telemetry, kept)
    }

    #[test]
    fn a_kept_trace_should_be_spans_under_one_root_placed_on_the_wall_clock() {
        use opentelemetry::trace::{SpanId, SpanKind, Status};
        use std::time::{Instant, SystemTime};
        let (telemetry, kept) = telemetry(Sampler::Always);
        let before = SystemTime::now();
        let event = Instant::now();
        let trace = Trace::start(telemetry.clone());
        let taken = Instant::now();
        trace.stage("queue", event, taken, Vec::new());
        let entered = Instant::now();
        let call = trace
            .call("get", Instant::now())
            .with("k8s.resource.kind", "Pod");
        call.end(Some(&krec_core::CallError::NotFound(
            "pods \"a\" not found".into(),
        )));
        let call = trace.call("update", Instant::now());
        call.end(Some(&krec_core::CallError::Conflict("changed".into())));
        trace.guest(entered, Instant::now(), Vec::new(), Status::Unset);
        trace.finish(
            "reconcile",
            SpanKind::Consumer,
            event,
            Vec::new(),
            Status::Unset,
        );
        let after = SystemTime::now();

        let spans = kept.0.lock().expect("kept").clone();
        let names: Vec<&str> = spans.iter().map(|s| &*s.name).collect();
        assert_eq!(names, ["queue", "get", "update", "guest", "reconcile"]);
        let root = &spans[4];
        assert_eq!(root.parent_span_id, SpanId::INVALID);
        let guest = &spans[3];
        assert_eq!(spans[0].parent_span_id, root.span_context.span_id());
        assert_eq!(guest.parent_span_id, root.span_context.span_id());
        for call in &spans[1..3] {
            assert_eq!(call.parent_span_id, guest.span_context.span_id());
        }
        // Instants are placed by one wall-clock reading and the instant read beside it: the
        // two reads are some nanoseconds apart, so a span may land that much outside.
        let slack = Duration::from_millis(1);
        for span in &spans {
            assert_eq!(span.span_context.trace_id(), trace.trace_id());
            assert!(before - slack <= span.start_time && span.start_time <= span.end_time);
            assert!(span.end_time <= after + slack);
        }
        // A not-found is an answer; a conflict is an error, named.
        assert_eq!(spans[1].status, Status::Unset);
        assert!(matches!(spans[2].status, Status::Error { .. }));
        let error_type = spans[2]
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == "error.type");
        assert_eq!(
            error_type
                .map(|kv| kv.value.as_str().into_owned())
                .as_deref(),
            Some("Conflict")
        );
        assert!(
            trace
                .traceparent()
                .starts_with(&format!("00-{}-", trace.trace_id()))
        );
        assert!(trace.traceparent().ends_with("-01"));
    }

    #[test]
    fn host_calls_of_an_abandoned_call_should_hang_from_the_root() {
        use opentelemetry::trace::{SpanKind, Status};
        use std::time::Instant;
        let (telemetry, kept) = telemetry(Sampler::Always);
        let trace = Trace::start(telemetry);
        trace.call("get", Instant::now()).end(None);
        // No guest span: the review was abandoned at its deadline.
        trace.finish(
            "admission validate",
            SpanKind::Server,
            Instant::now(),
            Vec::new(),
            Status::error("504"),
        );
        let spans = kept.0.lock().expect("kept").clone();
        assert_eq!(spans.len(), 2);
        assert_eq!(spans[0].parent_span_id, spans[1].span_context.span_id());
    }

    #[test]
    fn a_failed_reconcile_should_be_kept_whatever_the_ratio() {
        use opentelemetry::trace::{SpanKind, Status};
        use std::time::Instant;
        let (telemetry, kept) = telemetry(Sampler::Never);
        let ok = Trace::start(telemetry.clone());
        ok.finish(
            "reconcile",
            SpanKind::Consumer,
            Instant::now(),
            Vec::new(),
            Status::Unset,
        );
        assert!(kept.0.lock().expect("kept").is_empty(), "not sampled");
        assert!(ok.traceparent().ends_with("-00"));
        let failed = Trace::start(telemetry.clone());
        failed.guest(
            Instant::now(),
            Instant::now(),
            Vec::new(),
            Status::error("trap"),
        );
        failed.finish(
            "reconcile",
            SpanKind::Consumer,
            Instant::now(),
            Vec::new(),
            Status::error("trap"),
        );
        assert_eq!(kept.0.lock().expect("kept").len(), 2, "kept: it failed");
    }

    #[test]
    fn traceparents_should_be_read_as_w3c_writes_them_and_odd_ones_refused() {
        let context = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            .expect("valid");
        assert_eq!(
            context.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(context.span_id().to_string(), "b7ad6b7169203331");
        assert!(context.is_sampled() && context.is_remote());
        for odd in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-zzf7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ] {
            assert!(parse_traceparent(odd).is_none(), "{odd:?}");
        }
        // What a trace writes, it reads back.
        let (telemetry, _) = telemetry(Sampler::Always);
        let trace = Trace::start(telemetry.clone());
        let read = parse_traceparent(&trace.traceparent()).expect("its own");
        assert_eq!(read.trace_id(), trace.trace_id());
    }

    #[test]
    fn a_ratio_should_keep_about_that_fraction_of_trace_ids() {
        use opentelemetry_sdk::trace::{IdGenerator as _, RandomIdGenerator};
        let ids = RandomIdGenerator::default();
        let kept = (0..20_000)
            .filter(|_| Sampler::Ratio(0.1).keeps(ids.new_trace_id()))
            .count();
        assert!((1_600..2_400).contains(&kept), "{kept} of 20000 at 10 %");
        assert!(Sampler::Ratio(1.0).keeps(ids.new_trace_id()));
        assert!(!Sampler::Ratio(0.0).keeps(ids.new_trace_id()));
    }
}
