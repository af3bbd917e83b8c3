//! The embedded API server's bounds, each attacked as it was before it had them (issue 35):
//! deeply nested YAML, oversized objects, connections that say nothing, oversized headers, a
//! mutating webhook's copy bomb and a flood of warnings. Each test failed before its fix.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::ConfigMap;
use krec_apiserver::Server;
use krec_net::connections::Limits;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::raw::{self, client_for, raw_exchange, tls_connection};

/// A ConfigMap create sent as YAML, raw; the API's answer (its status code and text).
async fn create_yaml(client: &Client, body: String) -> (u16, String) {
    let request = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/yaml")
        .body(body.into_bytes())
        .expect("request");
    match client.request_text(request).await {
        Ok(text) => (201, text),
        Err(kube::Error::Api(status)) => (status.code, status.message),
        Err(other) => panic!("the request failed: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_yaml_should_be_refused_at_once_and_leave_other_requests_alone() {
    let cluster = Server::builder().start().await.expect("start");
    let client = client_for(&cluster).await;
    // 160 KB of nesting: 15 s of one core per body before the depth check.
    let depth = 80_000;
    let body = || {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: deep}}\ndata: {}{}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        )
    };
    let started = Instant::now();
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "default");
    let params = Default::default();
    let (a, b, listed) = tokio::join!(
        create_yaml(&client, body()),
        create_yaml(&client, body()),
        cms.list(&params),
    );
    let took = started.elapsed();
    for (code, message) in [a, b] {
        assert_eq!(code, 400, "{message}");
        assert!(
            message.contains("exceeded max depth of 128"),
            "refused by the depth check, not by serde's recursion limit after the scan: {message}"
        );
    }
    listed.expect("a list beside the attack is answered");
    println!("two 160 KB nested YAML bodies and a list answered in {took:?}");

    // A legitimate YAML body, flow style and all, is still decoded.
    let (code, text) = create_yaml(
        &client,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: flow, labels: {a: b}}\ndata: {k: '[not a list'}\n".into(),
    )
    .await;
    assert_eq!(code, 201, "{text}");
}

#[tokio::test]
async fn an_object_over_the_size_limit_should_be_refused_as_etcd_refuses_it() {
    let cluster = Server::builder().start().await.expect("start");
    let client = client_for(&cluster).await;
    // A ControllerRevision's `data` is free-form: no validation bounds it (a ConfigMap's 1 MiB
    // rule would refuse first).
    let revisions: Api<ControllerRevision> = Api::namespaced(client, "default");
    let with_data = |name: &str, bytes: usize| -> ControllerRevision {
        serde_json::from_value(json!({"metadata": {"name": name}, "revision": 1,
            "data": {"blob": "x".repeat(bytes)}}))
        .expect("revision")
    };
    // 2 MB: under the 3 MiB request limit, over etcd's 1.5 MiB.
    let err = revisions
        .create(&PostParams::default(), &with_data("big", 2_000_000))
        .await
        .expect_err("an object over 1.5 MiB is not stored");
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err:?}");
    };
    assert_eq!(status.code, 413, "{status:?}");
    assert!(
        status.message.contains("request is too large"),
        "{status:?}"
    );

    // Grown by patches, each small enough: refused when the result is too large, and the
    // stored object is left as it was.
    revisions
        .create(&PostParams::default(), &with_data("grown", 1_000_000))
        .await
        .expect("1 MB fits");
    let patch = json!({"data": {"more": "y".repeat(1_000_000)}});
    let err = revisions
        .patch("grown", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect_err("the patched object would be 2 MB");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 413),
        "{err:?}"
    );
    let stored = revisions.get("grown").await.expect("still there");
    assert!(stored.data.is_some_and(|d| d.0.get("more").is_none()));
}

/// A server whose connections are bounded tightly enough to test in a second.
async fn tight_server() -> Server {
    Server::builder()
        .connection_limits(Limits {
            max_connections: 40,
            max_per_peer: 40,
            first_request_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(600),
            ..Limits::default()
        })
        .start()
        .await
        .expect("start")
}

/// Whether the server has closed `stream` (it reads end-of-file or an error).
async fn closed_by_server(stream: &mut tokio::net::TcpStream) -> bool {
    let mut buf = [0u8; 16];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_should_be_closed_and_never_keep_a_request_out() {
    let cluster = tight_server().await;
    let client = client_for(&cluster).await;
    // Five times the cap, saying nothing: not even a TLS handshake.
    let mut silent = Vec::new();
    for _ in 0..200 {
        silent.push(
            tokio::net::TcpStream::connect(cluster.addr())
                .await
                .expect("connect"),
        );
    }
    // A client with something to ask gets in: the idlest connections make room.
    let started = Instant::now();
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .list(&Default::default())
        .await
        .expect("a list beside 200 silent connections is answered");
    println!(
        "list answered in {:?} beside 200 silent connections",
        started.elapsed()
    );
    // And every silent one is closed: evicted, or at its first-request timeout.
    for stream in &mut silent {
        assert!(
            closed_by_server(stream).await,
            "a silent connection was kept open"
        );
    }
}

/// A client that starts a request's headers and never ends them (curl 7.88 stalls so after
/// 128 KB of a large header over TLS) is closed at the header timeout, as Go's
/// `ReadHeaderTimeout` closes kube-apiserver's; it held the connection for good before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_that_never_ends_should_be_closed_at_the_header_timeout() {
    let cluster = tight_server().await;
    let mut tls = tls_connection(&cluster).await;
    let head = format!(
        "GET /api HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}",
        "a".repeat(128 << 10)
    );
    tls.write_all(head.as_bytes())
        .await
        .expect("a partial head");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut rest)).await;
    assert!(
        read.is_ok(),
        "a connection with a head that never ends was still open after 5 s (header timeout 300 ms)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_should_be_closed_but_a_long_watch_kept() {
    let cluster = tight_server().await;
    let mut tls = tls_connection(&cluster).await;
    let request = raw::authorized(
        &cluster,
        b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    tls.write_all(&request).await.expect("request");
    let mut buf = vec![0u8; 64 << 10];
    let n = tls.read(&mut buf).await.expect("answer");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // Kept alive, then idle past the idle timeout: closed.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut rest)).await;
    assert!(
        read.is_ok(),
        "the idle connection was not closed within 5 s"
    );

    // A watch is a request in flight for as long as it lasts: never idle.
    let client = client_for(&cluster).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut events = Box::pin(
        cms.watch(&kube::api::WatchParams::default().timeout(30), "0")
            .await
            .expect("watch"),
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "late"}})).expect("configmap");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    use futures::StreamExt as _;
    let event = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("the watch is still open past the idle timeout");
    assert!(event.is_some());
}

#[tokio::test]
async fn oversized_headers_should_be_answered_431() {
    let cluster = Server::builder().start().await.expect("start");
    let mut request = b"GET /api HTTP/1.1\r\nHost: x\r\n".to_vec();
    // 1.5 MB of headers, past kube-apiserver's 1 MiB: many, or one.
    for i in 0..1500 {
        request.extend_from_slice(format!("X-Pad-{i}: {}\r\n", "p".repeat(1000)).as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    let one = format!(
        "GET /api HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(3 << 20)
    );
    for request in [request, one.into_bytes()] {
        let (status, _) = raw_exchange(&cluster, &request)
            .await
            .expect("an answer, not a reset");
        assert!(status.starts_with("HTTP/1.1 431"), "{status}");
    }
    // Headers within the limit are served.
    let (status, _) = raw_exchange(
        &cluster,
        b"GET /api HTTP/1.1\r\nHost: x\r\nX-Pad: p\r\n\r\n",
    )
    .await
    .expect("answer");
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_should_be_answered_413_over_http2() {
    let cluster = Server::builder().start().await.expect("start");
    let tls = raw::tls_connection_speaking(&cluster, b"h2").await;
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .expect("HTTP/2");
    tokio::spawn(connection);
    // 70 MiB, streamed without a Content-Length, as a client copying a file does.
    let chunks = (0..70).map(|_| Ok::<_, std::io::Error>(bytes_of(1 << 20)));
    let request = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {}", cluster.token()))
        .body(axum::body::Body::from_stream(futures::stream::iter(chunks)))
        .expect("request");
    let response = sender
        .send_request(request)
        .await
        .expect("an answer, not a reset stream");
    assert_eq!(response.status(), 413);
}

fn bytes_of(len: usize) -> axum::body::Bytes {
    axum::body::Bytes::from(vec![b' '; len])
}

/// A view-only ServiceAccount's watches past the per-user cap are answered 429 with
/// `Retry-After`, as kube's priority and fairness sheds a request, while the admin and other
/// users keep watching; one ending makes room. Before the cap 11 000 were all served (422 MB,
/// 10 018 file descriptors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_watches_past_its_cap_should_be_shed_and_no_one_elses() {
    use futures::StreamExt as _;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::RoleBinding;
    use kube::api::WatchParams;
    let cluster = Server::builder()
        .max_watches_per_user(3)
        .start()
        .await
        .expect("start");
    let admin = client_for(&cluster).await;
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "reader"}})).expect("account");
    Api::<ServiceAccount>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &account)
        .await
        .expect("the account");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}],
    }))
    .expect("binding");
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &binding)
        .await
        .expect("the binding");
    let request = http::Request::post("/api/v1/namespaces/default/serviceaccounts/reader/token")
        .header("content-type", "application/json")
        .body(
            br#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}"#
                .to_vec(),
        )
        .expect("request");
    let answer: serde_json::Value = admin.request(request).await.expect("a token");
    let token = answer["status"]["token"]
        .as_str()
        .expect("token")
        .to_owned();
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(cluster.kubeconfig()).expect("kubeconfig parses");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kube config");
    config.auth_info.token = Some(token.clone().into());
    let reader = Client::try_from(config).expect("client");

    let cms = Api::<ConfigMap>::namespaced(reader.clone(), "default");
    let params = WatchParams::default().timeout(60);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(Box::pin(
            cms.watch(&params, "0")
                .await
                .expect("a watch within the cap"),
        ));
    }
    // Raw: kube-rs retries a 429 itself (as client-go's reflector backs off).
    let mut tls = tls_connection(&cluster).await;
    let fourth = format!(
        "GET /api/v1/namespaces/default/configmaps?watch=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    tls.write_all(fourth.as_bytes())
        .await
        .expect("the fourth watch");
    let mut buf = vec![0u8; 4096];
    let n = tls.read(&mut buf).await.expect("an answer");
    let answer = String::from_utf8_lossy(&buf[..n]).to_lowercase();
    assert!(answer.starts_with("http/1.1 429"), "{answer}");
    assert!(answer.contains("retry-after: 1\r\n"), "{answer}");
    assert!(
        answer.ends_with("too many requests, please try again later.\n"),
        "{answer}"
    );
    // The admin is not counted, and lists are not watches.
    let admin_cms = Api::<ConfigMap>::namespaced(admin.clone(), "default");
    let _admin_watches: Vec<_> =
        futures::future::join_all((0..5).map(|_| admin_cms.watch(&params, "0")))
            .await
            .into_iter()
            .map(|watch| watch.expect("the admin's watch"))
            .collect();
    cms.list(&Default::default())
        .await
        .expect("the reader's list");
    // One ends: room for another.
    drop(held.pop());
    let mut again = None;
    for _ in 0..50 {
        match cms.watch(&params, "0").await {
            Ok(watch) => {
                again = Some(Box::pin(watch));
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let mut again = again.expect("a watch once one of the three ended");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "seen"}})).expect("configmap");
    admin_cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let event = tokio::time::timeout(Duration::from_secs(5), again.next()).await;
    assert!(matches!(event, Ok(Some(Ok(_)))), "{event:?}");
}
