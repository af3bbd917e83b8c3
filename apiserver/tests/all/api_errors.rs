//! Bad requests get the `Status` errors kube-apiserver returns; watches end and bookmark as asked.
//! (`krec cluster` itself is tested in `host/tests/all/cluster_cli.rs`.)

use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use krec_apiserver::{Builder, Server};
use kube::api::{Api, WatchEvent, WatchParams};
use kube::{Client, Config};

async fn start(config: Builder) -> (Server, Client) {
    let cluster = config.start().await.expect("start");
    let kubeconfig = kube::config::Kubeconfig::from_yaml(cluster.kubeconfig()).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    let client = Client::try_from(config).expect("client");
    (cluster, client)
}

/// Send a raw request; return the error Status code and reason (or 200 and "").
async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, String) {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(body)
        .expect("request");
    match client.request_text(request).await {
        Ok(_) => (200, String::new()),
        Err(kube::Error::Api(status)) => (status.code, status.reason.clone()),
        Err(other) => panic!("{method} {path}: {other:?}"),
    }
}

#[tokio::test]
async fn bad_requests_should_get_kubernetes_status_errors() {
    let (_cluster, client) = start(Server::builder()).await;
    let cms = "/api/v1/namespaces/default/configmaps";
    let json = "application/json";
    // (method, path, content type, body, expected (code, reason))
    type Case<'a> = (&'a str, String, &'a str, Vec<u8>, (u16, &'a str));
    let cases: Vec<Case> = vec![
        (
            "POST",
            cms.into(),
            json,
            b"{not json".to_vec(),
            (400, "BadRequest"),
        ),
        (
            "POST",
            cms.into(),
            json,
            b"[1, 2]".to_vec(),
            (400, "BadRequest"),
        ),
        (
            "POST",
            cms.into(),
            json,
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"UPPER"}}"#.to_vec(),
            (422, "Invalid"),
        ),
        (
            "POST",
            cms.into(),
            json,
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}"#.to_vec(),
            (422, "Invalid"),
        ),
        (
            "POST",
            cms.into(),
            json,
            br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}"#.to_vec(),
            (400, "BadRequest"),
        ),
        (
            "POST",
            cms.into(),
            "application/vnd.kubernetes.protobuf",
            b"k8s\0".to_vec(),
            (415, "UnsupportedMediaType"),
        ),
        (
            "POST",
            cms.into(),
            json,
            vec![b' '; 4 << 20],
            (413, "RequestEntityTooLarge"),
        ),
        // Far beyond the limit: still a Status, not a reset stream (the rest is drained).
        (
            "POST",
            cms.into(),
            json,
            vec![b' '; 16 << 20],
            (413, "RequestEntityTooLarge"),
        ),
        // A ConfigMap's data holds strings only, as kube-apiserver's decoder insists.
        (
            "POST",
            cms.into(),
            json,
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"},"data":{"a":1}}"#
                .to_vec(),
            (400, "BadRequest"),
        ),
        (
            "POST",
            "/api/v1/namespaces/default/secrets".into(),
            json,
            br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"n"},"stringData":{"a":true}}"#
                .to_vec(),
            (400, "BadRequest"),
        ),
        // A group nothing serves: kube-apiserver's plain-text `404 page not found`, which
        // kube-rs cannot parse as a Status (client-go makes its NotFound of it).
        (
            "GET",
            "/apis/example.com/v1/widgets".into(),
            json,
            vec![],
            (404, "Failed to parse error data"),
        ),
        (
            "GET",
            "/api/v1/namespaces/default/widgets".into(),
            json,
            vec![],
            (404, "NotFound"),
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps/missing".into(),
            json,
            vec![],
            (404, "NotFound"),
        ),
        (
            "GET",
            format!("{cms}?labelSelector=a%20in%20(x"),
            json,
            vec![],
            (400, "BadRequest"),
        ),
        (
            "GET",
            format!("{cms}?fieldSelector=spec.nodeName%3Dx"),
            json,
            vec![],
            (400, "BadRequest"),
        ),
        (
            "GET",
            format!("{cms}?limit=many"),
            json,
            vec![],
            (400, "BadRequest"),
        ),
        (
            "PUT",
            cms.into(),
            json,
            b"{}".to_vec(),
            (405, "MethodNotAllowed"),
        ),
        (
            "PATCH",
            format!("{cms}/missing"),
            "text/plain",
            b"{}".to_vec(),
            (415, "UnsupportedMediaType"),
        ),
        (
            "PATCH",
            format!("{cms}/missing"),
            "application/merge-patch+json",
            b"{}".to_vec(),
            (404, "NotFound"),
        ),
        (
            "POST",
            "/api".into(),
            json,
            b"{}".to_vec(),
            (405, "MethodNotAllowed"),
        ),
    ];
    for (method, path, content_type, body, expected) in cases {
        let (code, reason) = raw(&client, method, &path, content_type, body).await;
        assert_eq!(
            (code, reason.as_str()),
            expected,
            "{method} {path} {content_type}"
        );
    }
}

#[tokio::test]
async fn watches_should_bookmark_and_end_at_their_timeout() {
    let config = Server::builder().bookmark_interval(Duration::from_millis(100));
    let (_cluster, client) = start(config).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let params = WatchParams::default().timeout(1); // bookmarks are on by default
    let mut stream = Box::pin(cms.watch(&params, "0").await.expect("watch"));
    let mut bookmarks = 0;
    // timeoutSeconds=1: the server ends the stream; the loop ends with it.
    while let Some(event) = stream.try_next().await.expect("event") {
        if let WatchEvent::Bookmark(b) = event {
            assert!(!b.metadata.resource_version.is_empty());
            bookmarks += 1;
        }
    }
    assert!(
        bookmarks >= 2,
        "bookmarks every 100ms over 1s, got {bookmarks}"
    );
}

#[tokio::test]
async fn a_watch_from_a_resource_version_not_reached_should_be_too_large() {
    let cluster = Server::builder().start().await.expect("start");
    let kubeconfig = kube::config::Kubeconfig::from_yaml(cluster.kubeconfig()).expect("kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    // kube retries a 504 (as it should): turned off, to see the answer itself.
    config.default_retry = false;
    let client = Client::try_from(config).expect("client");
    // kube-apiserver waits a few seconds for the version, then answers 504 with a retry hint.
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let err = cms
        .watch(&WatchParams::default().timeout(5), "99999999")
        .await
        .err()
        .expect("refused");
    match err {
        kube::Error::Api(status) => {
            assert_eq!((status.code, status.reason.as_str()), (504, "Timeout"));
            assert!(
                status
                    .message
                    .starts_with("Too large resource version: 99999999, current: "),
                "{}",
                status.message
            );
        }
        other => panic!("expected a Status, got {other:?}"),
    }
}

/// A path no group serves (a deleted CRD's group, say) is answered as kube-apiserver's
/// `NotFoundHandler` answers it, in plain text: client-go and kubectl then say `the server could
/// not find the requested resource (get foos.example.com x)` as with a real cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_nothing_serves_should_get_the_plain_404_page() {
    let (cluster, _client) = start(Builder::default()).await;
    let token = cluster.token().to_owned();
    for path in [
        "/apis/example.com/v1/namespaces/default/foos/x",
        "/apis/example.com/v1",
        "/apis/example.com",
        "/nothing/here",
    ] {
        let head = format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        );
        let (code, body) = crate::support::raw::exchange(&cluster, &head).await;
        assert_eq!(
            (code, body.as_str()),
            (404, "404 page not found\n"),
            "{path}"
        );
    }
    cluster.shutdown().await;
}
