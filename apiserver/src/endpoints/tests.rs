//! The handlers in a router without a socket: bodies, timeouts, limits.

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt;

use super::*;
use crate::resources::ResourceTypes;
use crate::store::ensure_namespaces;

#[tokio::test(start_paused = true)]
async fn a_body_that_never_ends_should_time_out_rather_than_hold_its_connection() {
    let body = Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
    let request = Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .body(body)
        .expect("request");
    let response = app().oneshot(request).await.expect("answered");
    assert_eq!(response.status(), 504);
}

fn app() -> axum::Router {
    let store = Arc::new(Store::new(Arc::new(ResourceTypes::new())));
    ensure_namespaces(&store).expect("namespaces");
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let server = Arc::new(ApiServer {
        admission: Arc::new(crate::admission::Admission::new(store.clone())),
        metrics: Default::default(),
        store,
        address: "127.0.0.1:0".into(),
        stopped,
        bookmark_interval: BOOKMARK_INTERVAL,
        openapi: Default::default(),
        faults: Default::default(),
        audit: None,
        authenticator: crate::authentication::Authenticator::trusting(
            crate::authentication::Signer::generate().expect("key"),
        ),
        max_token_seconds: None,
        watchers: Default::default(),
    });
    axum::Router::new().fallback(handle).with_state(server)
}

const SEGMENTS: &[&str] = &[
    "api",
    "apis",
    "v1",
    "apps",
    "namespaces",
    "default",
    "configmaps",
    "pods",
    "status",
    "x",
    "deployments",
    "%00",
    "..",
    "apiextensions.k8s.io",
    "customresourcedefinitions",
    "",
];

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
    /// Whatever the path, method, content type and body, the server answers with a 2xx or a
    /// 4xx `Status` and never fails internally or panics.
    #[test]
    fn requests_should_never_fail_internally(
        path in proptest::collection::vec(proptest::sample::select(SEGMENTS), 0..7),
        method in proptest::sample::select(&["GET", "POST", "PUT", "PATCH", "DELETE"][..]),
        content_type in proptest::sample::select(&["application/json", "application/vnd.kubernetes.protobuf", "application/merge-patch+json",
            "application/json-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml", "text/plain"][..]),
        body in proptest::prop_oneof![
            proptest::collection::vec(proptest::num::u8::ANY, 0..64),
            proptest::strategy::Just(br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#.to_vec()),
            proptest::strategy::Just(br#"[{"op":"add","path":"/x","value":1}]"#.to_vec()),
            proptest::strategy::Just(br#"{"metadata":{"labels":{"a":"b"}}}"#.to_vec()),
        ],
        query in proptest::sample::select(&["", "?labelSelector=a%3Db", "?watch=1&timeoutSeconds=1&resourceVersion=1", "?limit=1", "?fieldSelector=x"][..]),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let uri = format!("/{}{query}", path.join("/"));
        let Ok(request) = Request::builder().method(method).uri(&uri).header("content-type", content_type).body(Body::from(body)) else {
            return Ok(());
        };
        let response = runtime.block_on(app().oneshot(request)).expect("infallible");
        let code = response.status().as_u16();
        proptest::prop_assert!(code < 500, "{method} {uri} -> {code}");
    }

    /// Arbitrary query parameters a client controls, on reads and writes of a real
    /// collection: never a failure of the server, never a panic.
    #[test]
    fn arbitrary_query_parameters_should_never_fail_internally(
        params in proptest::collection::vec((proptest::sample::select(QUERY_KEYS), ".{0,16}"), 0..5),
        method in proptest::sample::select(&["GET", "POST", "DELETE"][..]),
        collection in proptest::sample::select(&["/api/v1/namespaces/default/configmaps", "/api/v1/namespaces", "/apis/apps/v1/deployments"][..]),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let query: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(params.iter().map(|(k, v)| (*k, v.as_str())))
            .finish();
        let uri = format!("{collection}?{query}");
        let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#.to_vec();
        let Ok(request) = Request::builder().method(method).uri(&uri).header("content-type", "application/json").body(Body::from(body)) else {
            return Ok(());
        };
        let response = runtime.block_on(app().oneshot(request)).expect("infallible");
        let code = response.status().as_u16();
        proptest::prop_assert!(code < 500, "{method} {uri} -> {code}");
    }

    /// Arbitrary JSON patches (any operation, pointer and value) on a stored object: a
    /// 2xx or a 4xx, never a panic, and never larger than the copy budget allows.
    #[test]
    fn arbitrary_json_patches_should_be_applied_or_refused(ops in proptest::collection::vec(json_patch_op(), 0..24)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let app = app();
        let create = Request::builder().method("POST").uri("/api/v1/namespaces/default/configmaps")
            .header("content-type", "application/json")
            .body(Body::from(br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"p"},"data":{"a":"0123456789"}}"#.to_vec()))
            .expect("request");
        let created = runtime.block_on(app.clone().oneshot(create)).expect("infallible");
        proptest::prop_assert_eq!(created.status().as_u16(), 201);
        let body = serde_json::to_vec(&ops).expect("encode");
        let patch = Request::builder().method("PATCH").uri("/api/v1/namespaces/default/configmaps/p")
            .header("content-type", "application/json-patch+json")
            .body(Body::from(body)).expect("request");
        let response = runtime.block_on(app.oneshot(patch)).expect("infallible");
        let code = response.status().as_u16();
        proptest::prop_assert!(code < 500, "{ops:?} -> {code}");
    }
}

const QUERY_KEYS: &[&str] = &[
    "labelSelector",
    "fieldSelector",
    "resourceVersion",
    "resourceVersionMatch",
    "limit",
    "continue",
    "timeoutSeconds",
    "dryRun",
    "fieldManager",
    "fieldValidation",
    "propagationPolicy",
    "gracePeriodSeconds",
    "allowWatchBookmarks",
    "sendInitialEvents",
    "force",
    "pretty",
];

/// Any JSON value, a few levels deep.
fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z/~]{0,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// One RFC 6902 operation over pointers into a ConfigMap, or something almost like one.
fn json_patch_op() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let pointer = proptest::sample::select(
        &[
            "",
            "/",
            "/data",
            "/data/a",
            "/data/b",
            "/data/-",
            "/metadata",
            "/metadata/name",
            "/metadata/labels",
            "/x/0",
            "/x/-",
            "/a~1b",
            "/~2",
            "/data/a/0",
            "/kind",
        ][..],
    );
    let op =
        proptest::sample::select(&["add", "remove", "replace", "move", "copy", "test", "nope"][..]);
    (op, pointer.clone(), pointer, json_value()).prop_map(
        |(op, path, from, value)| json!({"op": op, "path": path, "from": from, "value": value}),
    )
}
