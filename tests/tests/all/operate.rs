//! Operating the host: metrics with controller-runtime's names, probes, the manual trigger and
//! its token, leader election state and graceful shutdown, in process.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use krec::runtime::HostOptions;
use krec::runtime::admin::{Admin, AdminError};
use krec::runtime::leader::LeaderConfig;
use krec_tests::{Live, rs_gvk, sample_manifest};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 request; the status code and body.
async fn http(addr: SocketAddr, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let authorization = token.map(|t| format!("Bearer {t}"));
    http_auth(addr, method, path, authorization.as_deref()).await
}

/// One HTTP/1.1 request with this `Authorization` header, if any; the status code and body.
async fn http_auth(
    addr: SocketAddr,
    method: &str,
    path: &str,
    authorization: Option<&str>,
) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The value of the series `name{labels}` (labels as written, in order), if present.
fn series(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
}

fn replicaset() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_should_carry_controller_runtimes_series_with_plausible_values() {
    let live = Live::start(vec![sample_manifest("pod-counter")], vec![replicaset()]).await;
    live.eventually("pod-count labelled", || async {
        let rs = live.get(&rs_gvk(), Some("default"), "web").await?;
        rs.pointer("/metadata/labels/pod-count").map(drop)
    })
    .await;
    // The label is visible as soon as the guest's update lands, before its reconcile returns.
    let controller = live.controller("pod-counter");
    // Its own update triggers another reconcile: wait until that one has finished too, so
    // that no worker is active when the series are read.
    live.eventually("the guest to be idle after its reconciles", || async {
        (controller.stats().done() >= 1 && controller.is_idle()).then_some(())
    })
    .await;
    let admin = Admin::start("127.0.0.1:0".parse().expect("addr"), None)
        .await
        .expect("admin");
    admin.set_manager(live.manager.clone());
    let c = r#"{controller="pod-counter"}"#;
    let n = r#"{name="pod-counter"}"#;
    // An event can wake the guest again between the check above and a scrape (the tests of
    // this binary share the machine): scrape until one shows it idle, and check that one.
    let addr = admin.addr();
    let (workers, depth) = (
        format!("controller_runtime_active_workers{c}"),
        format!("workqueue_depth{n}"),
    );
    let text = live
        .eventually("a scrape with the guest idle", || async {
            let (status, text) = http(addr, "GET", "/metrics", None).await;
            assert_eq!(status, 200, "{text}");
            let idle = series(&text, &workers) == Some(0.0) && series(&text, &depth) == Some(0.0);
            idle.then_some(text)
        })
        .await;
    let success = series(
        &text,
        r#"controller_runtime_reconcile_total{controller="pod-counter",result="success"}"#,
    );
    assert!(success.is_some_and(|v| v >= 1.0), "{text}");
    assert_eq!(
        series(
            &text,
            &format!("controller_runtime_max_concurrent_reconciles{c}")
        ),
        Some(2.0)
    );
    assert_eq!(
        series(&text, &format!("controller_runtime_active_workers{c}")),
        Some(0.0)
    );
    assert!(
        series(
            &text,
            &format!("controller_runtime_reconcile_time_seconds_count{c}")
        )
        .is_some_and(|v| v >= 1.0)
    );
    assert!(
        series(&text, &format!("workqueue_adds_total{n}")).is_some_and(|v| v >= 1.0),
        "{text}"
    );
    assert_eq!(series(&text, &format!("workqueue_depth{n}")), Some(0.0));
    assert!(
        series(&text, &format!("workqueue_queue_duration_seconds_count{n}"))
            .is_some_and(|v| v >= 1.0)
    );
    assert!(
        series(&text, &format!("workqueue_work_duration_seconds_count{n}"))
            .is_some_and(|v| v >= 1.0)
    );
    assert_eq!(
        series(&text, &format!("workqueue_unfinished_work_seconds{n}")),
        Some(0.0)
    );
    assert_eq!(
        series(
            &text,
            &format!("workqueue_longest_running_processor_seconds{n}")
        ),
        Some(0.0)
    );
    assert_eq!(
        series(&text, &format!("workqueue_retries_total{n}")),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        series(
            &text,
            &format!("controller_runtime_reconcile_errors_total{c}")
        ),
        Some(0.0)
    );
    // Each stage inside the host, for the reconciles so far: pod-counter lists Pods in every
    // reconcile, so each reaches its first host call too.
    let reconciles = series(
        &text,
        &format!("controller_runtime_reconcile_time_seconds_count{c}"),
    )
    .unwrap_or_default();
    for stage in krec::process::metrics::STAGES {
        let count = series(
            &text,
            &format!(
                r#"krec_event_stage_seconds_count{{controller="pod-counter",stage="{stage}"}}"#
            ),
        );
        assert!(count.is_some_and(|v| v >= 1.0), "stage {stage}: {text}");
        let sum = series(
            &text,
            &format!(r#"krec_event_stage_seconds_sum{{controller="pod-counter",stage="{stage}"}}"#),
        );
        assert!(
            sum.is_some_and(|v| (0.0..10.0).contains(&v)),
            "stage {stage}: {text}"
        );
        if matches!(stage, "start" | "first_call" | "guest") {
            // Observed before the reconcile's time is, and scraped after it.
            assert!(
                count.is_some_and(|v| v >= reconciles),
                "stage {stage}: one per reconcile ({reconciles}): {text}"
            );
        }
    }
    let g = r#"{guest="pod-counter"}"#;
    assert!(
        series(&text, &format!("krec_guest_cpu_seconds_total{g}"))
            .is_some_and(|v| v > 0.0 && v < 10.0)
    );
    assert!(
        series(&text, &format!("krec_guest_memory_peak_bytes{g}")).is_some_and(|v| v >= 65536.0)
    );
    assert!(
        series(
            &text,
            r#"krec_host_calls_total{guest="pod-counter",verb="list",result="ok"}"#
        )
        .is_some_and(|v| v >= 1.0),
        "{text}"
    );
    let digest = live.controller("pod-counter").module().digest().to_owned();
    assert_eq!(
        series(
            &text,
            &format!(
                r#"krec_guest_module_info{{guest="pod-counter",version="1",digest="{digest}"}}"#
            )
        ),
        Some(1.0),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"));
    assert_eq!(http(admin.addr(), "GET", "/healthz", None).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_trigger_leadership_and_shutdown_through_the_runtime() {
    let cluster = krec_apiserver::Server::builder()
        .start()
        .await
        .expect("server");
    let client = krec::cluster::connect::client_from_kubeconfig(cluster.kubeconfig())
        .await
        .expect("client");
    let store = cluster.store().clone();
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = sample_manifest("cleanup-ticker");
    // A free port, so the test can poll /readyz before the host is ready.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let mut leader = LeaderConfig::new("krec-test", "default");
    leader.lease_duration = Duration::from_secs(2);
    leader.renew_deadline = Duration::from_millis(1500);
    leader.retry_period = Duration::from_millis(200);
    let options = HostOptions {
        admin_addr: Some(addr),
        leader: Some(leader),
        ..Default::default()
    };
    let manifests_dir = manifest.path.parent().expect("dir").to_owned();
    let starting = tokio::spawn(async move {
        krec::runtime::Runtime::builder(client, &manifests_dir, vec![manifest])
            .options(options)
            .start()
            .await
    });
    // Not ready while the guest compiles and the election is undecided, then ready.
    let mut saw_unready = false;
    loop {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(_) => {}
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        }
        match http(addr, "GET", "/readyz", None).await.0 {
            503 => saw_unready = true,
            200 => break,
            other => panic!("/readyz answered {other}"),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(saw_unready, "/readyz was 503 before the host was ready");
    let runtime = starting.await.expect("task").expect("started");
    let manager = runtime.manager().clone();
    let (_, text) = http(addr, "GET", "/metrics", None).await;
    assert_eq!(
        series(&text, r#"leader_election_master_status{name="krec-test"}"#),
        Some(1.0),
        "{text}"
    );

    // The manual trigger enqueues a reconcile the guest runs.
    let controller = manager.controller("cleanup-ticker").expect("guest");
    // The ticker's first tick reconciles at start-up: let it finish, so that only the trigger
    // can account for the next reconcile.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while controller.stats().total() == 0 || !controller.is_idle() {
        assert!(
            std::time::Instant::now() < deadline,
            "the first tick never ran"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = controller.stats().total();
    let (status, body) = http(
        addr,
        "POST",
        "/reconcile/cleanup-ticker/_/expired-configmaps",
        None,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while controller.stats().total() <= before {
        assert!(
            std::time::Instant::now() < deadline,
            "the triggered reconcile never ran"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        http(addr, "POST", "/reconcile/nobody/default/x", None)
            .await
            .0,
        404
    );

    // Graceful stop: the runtime shuts down, the Lease is released.
    runtime.shutdown().await;
    let leases = store
        .registry()
        .by_plural("coordination.k8s.io", "v1", "leases")
        .expect("leases");
    let lease = store
        .get(&leases, Some("default"), "krec-test")
        .expect("lease");
    assert!(
        lease
            .pointer("/spec/holderIdentity")
            .is_none_or(Value::is_null),
        "released: {lease}"
    );
    assert_eq!(controller.stats().overlaps.load(Ordering::Relaxed), 0);
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trigger_beyond_loopback_should_require_the_token() {
    let open: SocketAddr = "0.0.0.0:0".parse().expect("addr");
    match Admin::start(open, None).await {
        Err(AdminError::TokenRequired(_)) => {}
        other => panic!("expected a refusal without a token, got {other:?}"),
    }
    let live = Live::start(vec![sample_manifest("pod-counter")], vec![replicaset()]).await;
    let admin = Admin::start(open, Some("s3cret".into()))
        .await
        .expect("admin");
    admin.set_manager(live.manager.clone());
    let local: SocketAddr = format!("127.0.0.1:{}", admin.addr().port())
        .parse()
        .expect("addr");
    let path = "/reconcile/pod-counter/default/web";
    assert_eq!(http(local, "POST", path, None).await.0, 401);
    assert_eq!(http(local, "POST", path, Some("wrong")).await.0, 401);
    assert_eq!(http(local, "POST", path, Some("s3cret")).await.0, 202);
    // The scheme is case-insensitive (RFC 7235).
    assert_eq!(
        http_auth(local, "POST", path, Some("bearer s3cret"))
            .await
            .0,
        202
    );
    // Names that could forge a log line, or no object could have, are refused.
    for bad in [
        "/reconcile/pod-counter/default/web%0Aforged%20line",
        "/reconcile/pod-counter/Not_A_Namespace/web",
        &format!("/reconcile/pod-counter/default/{}", "x".repeat(300)),
    ] {
        let (code, body) = http(local, "POST", bad, Some("s3cret")).await;
        assert_eq!(code, 400, "{bad}: {body}");
    }
    // The guests' overview names objects and errors: guarded too.
    assert_eq!(http(local, "GET", "/guests", None).await.0, 401);
    let (code, body) = http(local, "GET", "/guests", Some("s3cret")).await;
    assert_eq!(code, 200, "{body}");
    // Probes and metrics stay open for kubelets and scrapers.
    assert_eq!(http(local, "GET", "/healthz", None).await.0, 200);
    assert_eq!(http(local, "GET", "/metrics", None).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_failed_to_start_should_have_no_module_info() {
    let (_cluster, _client, api) = krec_tests::local_cluster().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("widgets.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: widgets}}\nspec:\n  module: {}\n  for: {{apiVersion: example.com/v1, kind: Widget}}\n",
            krec_tests::built_module("misbehave.wasm").display()
        ),
    )
    .expect("write");
    let manifest = krec::manifest::Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let manager = krec::guests::Manager::start_with(api, vec![manifest], Default::default())
        .await
        .expect("manager starts");
    assert_eq!(manager.skipped().len(), 1, "the Widget kind is not served");
    let text = manager.metrics().encode();
    assert!(
        !text.contains("krec_guest_module_info{guest=\"widgets\""),
        "a guest that never ran is not loaded: {text}"
    );
    manager.cache().stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guests_overview_should_show_state_figures_errors_and_recent_reconciles() {
    let mut manifest = krec_tests::misbehave_manifest();
    // Room for its 20 MB error.
    manifest.spec.limits.memory = 64 << 20;
    let live = Live::start(vec![manifest], Vec::new()).await;
    let controller = live.controller("misbehave");
    // A reconcile that ends well, one whose error is 20 MB, one that traps.
    for name in ["ok", "huge-error", "panic"] {
        controller.trigger(krec::controller::Request::new(None, name));
    }
    live.eventually("the three reconciles to end", || async {
        let stats = controller.stats();
        (stats.done() >= 1 && stats.errors() >= 1 && stats.traps() >= 1).then_some(())
    })
    .await;
    let admin = Admin::start("127.0.0.1:0".parse().expect("addr"), None)
        .await
        .expect("admin");
    admin.set_manager(live.manager.clone());
    let (code, body) = http(admin.addr(), "GET", "/guests", None).await;
    assert_eq!(code, 200, "{body}");
    let overview: Value = serde_json::from_str(&body).expect("JSON");
    let guests = overview["guests"].as_array().expect("guests");
    assert_eq!(guests.len(), 1, "{overview:#}");
    let guest = &guests[0];
    assert_eq!(guest["name"], "misbehave");
    assert_eq!(guest["state"], "Running");
    let running = &guest["running"];
    assert_eq!(running["version"], 1);
    let total = running["reconciles"]["total"].as_u64().expect("total");
    assert!(total >= 3, "{running:#}");
    // Every reconcile is in one duration bucket.
    let bounds = overview["durationBounds"].as_array().expect("bounds").len();
    let durations: Vec<u64> = running["durations"]
        .as_array()
        .expect("durations")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(durations.len(), bounds + 1);
    assert_eq!(durations.iter().sum::<u64>(), total, "{running:#}");
    // The recent reconciles, newest first: each result, the errors' messages bounded.
    let recent = running["recent"].as_array().expect("recent");
    let result = |key: &str| {
        recent
            .iter()
            .find(|r| r["key"] == key)
            .unwrap_or_else(|| panic!("no reconcile of {key} in {recent:?}"))
    };
    assert_eq!(result("ok")["result"], "done");
    assert!(result("ok").get("message").is_none());
    let huge = result("huge-error");
    assert_eq!(huge["result"], "error");
    let message = huge["message"].as_str().expect("message");
    assert!(message.len() <= 1100, "{} bytes kept", message.len());
    let panicked = result("panic");
    assert_eq!(panicked["result"], "trap");
    assert!(
        panicked["message"]
            .as_str()
            .is_some_and(|m| m.contains("panic")),
        "{panicked}"
    );
    let ended: Vec<u64> = recent
        .iter()
        .filter_map(|r| r["endedUnixMs"].as_u64())
        .collect();
    assert!(
        ended.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {ended:?}"
    );
    assert!(running["lastError"]["message"].is_string(), "{running:#}");

    // A manifest refused at the next reload is listed with why.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("widgets.yaml"),
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: widgets}}\nspec:\n  module: {}\n  for: {{apiVersion: example.com/v1, kind: Widget}}\n",
            krec_tests::built_module("misbehave.wasm").display()
        ),
    )
    .expect("write");
    let report = live.manager.reload(dir.path()).await.expect("reload");
    assert_eq!(report.rejected.len(), 1, "{report:?}");
    let overview = live.manager.overview();
    let widgets = overview
        .guests
        .iter()
        .find(|g| g.name == "widgets")
        .expect("the refused guest is listed");
    assert_eq!(widgets.state, "Refused");
    assert!(
        widgets
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("Widget")),
        "{widgets:?}"
    );
}
