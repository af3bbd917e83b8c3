//! Traces from `krec dev` in Jaeger (v2, built from the Go module proxy by `make tools`), as an
//! operator finds them: configured by the standard environment, one trace per reconcile with
//! its host calls, and — with `KREC_TRACE_OBJECTS=true` — the reconcile a write caused in
//! another guest linked to the reconcile that wrote.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use krec_testkit::http::encoded;
use serde_json::Value;

use crate::common::{self, stop, until};

/// Jaeger running all in one on loopback (memory storage): its OTLP/HTTP receiver and its
/// query API.
struct Jaeger {
    _process: common::Stopped,
    /// `http://127.0.0.1:PORT`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    otlp: String,
    query: SocketAddr,
}

impl Jaeger {
    /// Start it with its configuration in `dir`, every port on loopback; returns once its
    /// query API answers.
    fn start(dir: &std::path::Path) -> Jaeger {
        let binary = krec_testkit::tool("jaeger/jaeger", "KREC_TEST_JAEGER");
        let [otlp, http, grpc] = [(); 3].map(|()| krec_testkit::free_port());
        let config = dir.join("jaeger.yaml");
        std::fs::write(
            &config,
            format!(
                "service:\n\
                 \x20 extensions: [jaeger_storage, jaeger_query]\n\
                 \x20 pipelines:\n\
                 \x20   traces: {{receivers: [otlp], processors: [batch], exporters: [jaeger_storage_exporter]}}\n\
                 \x20 telemetry: {{metrics: {{level: none}}, logs: {{level: warn}}}}\n\
                 extensions:\n\
                 \x20 jaeger_storage: {{backends: {{mem: {{memory: {{max_traces: 10000}}}}}}}}\n\
                 \x20 jaeger_query:\n\
                 \x20   storage: {{traces: mem}}\n\
                 \x20   http: {{endpoint: \"127.0.0.1:{http}\"}}\n\
                 \x20   grpc: {{endpoint: \"127.0.0.1:{grpc}\"}}\n\
                 receivers:\n\
                 \x20 otlp: {{protocols: {{http: {{endpoint: \"127.0.0.1:{otlp}\"}}}}}}\n\
                 processors:\n\
                 \x20 batch: {{timeout: 100ms}}\n\
                 exporters:\n\
                 \x20 jaeger_storage_exporter: {{trace_storage: mem}}\n"
            ),
        )
        .expect("write jaeger.yaml");
        let child = Command::new(&binary)
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start jaeger");
        let jaeger = Jaeger {
            _process: common::Stopped(child),
            otlp: format!("http://127.0.0.1:{otlp}"),
            query: SocketAddr::from(([127, 0, 0, 1], http)),
        };
        until("Jaeger's query API", Duration::from_secs(60), || {
            jaeger.api("/api/services").map(drop)
        });
        jaeger
    }

    /// The `data` of Jaeger's answer to `path` (its JSON API).
    fn api(&self, path: &str) -> Result<Value, String> {
        let answer = common::get_json(self.query, path)?;
        match answer["errors"].as_array() {
            Some(errors) if !errors.is_empty() => Err(format!("{path}: {answer}")),
            _ => Ok(answer["data"].clone()),
        }
    }

    /// The traces of service `krec` whose spans named `operation` carry `tags`.
    fn traces(&self, operation: &str, tags: &Value) -> Result<Vec<Value>, String> {
        let path = format!(
            "/api/traces?service=krec&lookback=1h&limit=200&operation={}&tags={}",
            encoded(operation),
            encoded(&tags.to_string())
        );
        Ok(self.api(&path)?.as_array().cloned().unwrap_or_default())
    }

    /// The trace `id`.
    fn trace(&self, id: &str) -> Result<Value, String> {
        let data = self.api(&format!("/api/traces/{id}"))?;
        data.as_array()
            .and_then(|traces| traces.first())
            .cloned()
            .ok_or_else(|| format!("no trace {id}"))
    }
}

/// The value of tag `key` of a span of Jaeger's API, as text.
fn tag(span: &Value, key: &str) -> Option<String> {
    let value = &span["tags"].as_array()?.iter().find(|t| t["key"] == key)?["value"];
    Some(match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    })
}

/// The spans of `trace`.
fn spans(trace: &Value) -> Vec<&Value> {
    trace["spans"].as_array().into_iter().flatten().collect()
}

/// The span `span` is a child of, if any.
fn parent(span: &Value) -> Option<&str> {
    span["references"]
        .as_array()?
        .iter()
        .find(|r| r["refType"] == "CHILD_OF")?["spanID"]
        .as_str()
}

/// The span named `name` whose tag `key` is `value`, in `trace`.
fn find<'a>(trace: &'a Value, name: &str, key: &str, value: &str) -> Option<&'a Value> {
    spans(trace)
        .into_iter()
        .find(|s| s["operationName"] == name && tag(s, key).as_deref() == Some(value))
}

/// A pod-counter reconcile linked to a foo-controller reconcile that created a Deployment: the
/// pod-counter reconcile's trace and the foo-controller reconcile's.
fn linked(jaeger: &Jaeger) -> Result<(Value, Value), String> {
    let counters = jaeger.traces(
        "reconcile",
        &serde_json::json!({"controller": "pod-counter"}),
    )?;
    for counter in &counters {
        let Some(root) = find(counter, "reconcile", "controller", "pod-counter") else {
            continue;
        };
        let links = root["references"].as_array().into_iter().flatten();
        for link in links.filter(|r| r["refType"] == "FOLLOWS_FROM") {
            let id = link["traceID"].as_str().unwrap_or_default();
            let Ok(cause) = jaeger.trace(id) else {
                continue;
            };
            let from_foo = spans(&cause).into_iter().any(|s| {
                s["spanID"] == link["spanID"]
                    && s["operationName"] == "reconcile"
                    && tag(s, "controller").as_deref() == Some("foo-controller")
            });
            if from_foo && find(&cause, "create", "k8s.resource.kind", "Deployment").is_some() {
                return Ok((counter.clone(), cause));
            }
        }
    }
    Err(format!(
        "no pod-counter reconcile linked to a foo-controller reconcile that created a Deployment, in {} traces",
        counters.len()
    ))
}

/// `krec dev` on the samples, with `OTEL_EXPORTER_OTLP_ENDPOINT` (Jaeger's) and
/// `KREC_TRACE_OBJECTS=true`: Jaeger holds foo-controller's reconcile of the example Foo — its
/// guest call and the Deployment's `create` beneath it — and pod-counter's reconcile of the
/// ReplicaSet the Deployment made, with its host calls, linked to it through the context the
/// Deployment (and so its ReplicaSet) carries; kubectl sees that context on the Deployment; and
/// foo-validator's review of a bad Foo is a trace of its own.
#[test]
fn dev_should_export_reconciles_to_jaeger_and_link_a_write_to_the_reconcile_it_caused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let jaeger = Jaeger::start(dir.path());
    let (mut running, _admin, kubeconfig) = common::dev(
        dir.path(),
        &["foo-controller", "pod-counter", "foo-validator"],
        |command| {
            command
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", &jaeger.otlp)
                .env("OTEL_BSP_SCHEDULE_DELAY", "100")
                .env("KREC_TRACE_OBJECTS", "true")
                .env_remove("OTEL_SDK_DISABLED")
                .env_remove("OTEL_TRACES_EXPORTER")
                .env_remove("OTEL_TRACES_SAMPLER")
                .env_remove("OTEL_SERVICE_NAME");
        },
    );

    let (counter, cause) = until(
        "the linked reconciles in Jaeger",
        Duration::from_secs(60),
        || linked(&jaeger),
    );
    let foo = find(&cause, "reconcile", "controller", "foo-controller").expect("the root");
    assert!(parent(foo).is_none(), "a root: {foo}");
    assert_eq!(tag(foo, "controllerKind").as_deref(), Some("Foo"));
    assert_eq!(tag(foo, "name").as_deref(), Some("example-foo"));
    let guest = find(&cause, "guest", "krec.guest", "foo-controller").expect("the guest's call");
    assert_eq!(parent(guest), foo["spanID"].as_str());
    let create = find(&cause, "create", "k8s.resource.kind", "Deployment").expect("the create");
    assert_eq!(parent(create), guest["spanID"].as_str());
    assert_eq!(
        tag(create, "k8s.object.name").as_deref(),
        Some("example-foo")
    );
    let process = &cause["processes"][cause["spans"][0]["processID"].as_str().expect("processID")];
    assert_eq!(process["serviceName"], "krec", "{process}");
    // The reconcile it caused, with its host calls beneath its guest call.
    let root = find(&counter, "reconcile", "controller", "pod-counter").expect("the root");
    assert_eq!(tag(root, "controllerKind").as_deref(), Some("ReplicaSet"));
    let call = find(&counter, "guest", "krec.guest", "pod-counter").expect("the guest's call");
    let host_calls: Vec<&str> = spans(&counter)
        .into_iter()
        .filter(|s| parent(s) == call["spanID"].as_str())
        .filter_map(|s| s["operationName"].as_str())
        .collect();
    assert!(
        host_calls.contains(&"get") && host_calls.contains(&"list"),
        "pod-counter's host calls: {host_calls:?}"
    );

    // The Deployment carries the context of a foo-controller reconcile.
    let kubectl = common::Kubectl::new(&kubeconfig, &dir.path().join("kubectl-cache"));
    let carried = kubectl.until(
        &[
            "get",
            "deployment",
            "example-foo",
            "-o",
            "jsonpath={.metadata.annotations.tracing\\.k8s\\.io/traceparent}",
        ],
        |out| !out.is_empty(),
    );
    assert!(carried.starts_with("00-"), "{carried}");

    // An admission review is a trace too: foo-validator's denial of a bad Foo.
    kubectl.create_denied_foo(dir.path());
    let review = until(
        "the review's trace in Jaeger",
        Duration::from_secs(30),
        || {
            let tags = serde_json::json!({"krec.guest": "foo-validator", "name": "bad"});
            jaeger
                .traces("admission validate", &tags)?
                .into_iter()
                .next()
                .ok_or_else(|| "none yet".to_owned())
        },
    );
    let root = find(&review, "admission validate", "krec.guest", "foo-validator").expect("root");
    assert_eq!(
        tag(root, "krec.allowed").as_deref(),
        Some("false"),
        "{root}"
    );
    assert_eq!(tag(root, "k8s.operation").as_deref(), Some("CREATE"));
    let call = find(&review, "guest", "krec.guest", "foo-validator");
    assert!(
        call.is_some_and(|c| parent(c) == root["spanID"].as_str()),
        "the validator's call beneath the review: {review}"
    );
    let exit = stop(&mut running.0, "-INT");
    assert!(exit.success(), "{exit:?}");
}
