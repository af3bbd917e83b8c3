//! Cases checked by hand against apimachinery's `strategicpatch` (`StrategicMergeMapPatch`).

use serde_json::json;

use super::*;

fn pod() -> PatchMeta {
    PatchMeta::of_kind("", "v1", "Pod")
}

fn merged(meta: PatchMeta, mut object: Value, patch: Value) -> Value {
    strategic_merge(&mut object, &patch, meta).expect("patch applies");
    object
}

fn names(object: &Value, list: &str) -> Vec<String> {
    object
        .pointer(list)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| c["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn containers(list: &[&str]) -> Value {
    json!({"spec": {"containers": list.iter().map(|n| json!({"name": n, "image": "i"})).collect::<Vec<_>>()}})
}

#[test]
fn keyed_lists_should_merge_by_key_and_honour_deletions() {
    let live = json!({"metadata": {"labels": {"a": "1"}, "finalizers": ["x"]},
        "spec": {"containers": [{"name": "web", "image": "nginx:1"}, {"name": "side", "image": "busybox"}]}});
    let patch = json!({"metadata": {"labels": {"b": "2", "a": null}, "finalizers": ["y"]},
        "spec": {"$setElementOrder/containers": [{"name": "web"}],
                 "containers": [{"name": "web", "image": "nginx:2"}, {"name": "side", "$patch": "delete"}]}});
    assert_eq!(
        merged(pod(), live, patch),
        // Items the patch names come first where the live order cannot place them.
        json!({"metadata": {"labels": {"b": "2"}, "finalizers": ["y", "x"]},
            "spec": {"containers": [{"name": "web", "image": "nginx:2"}]}})
    );
}

#[test]
fn new_items_should_be_ordered_as_apimachinery_orders_them() {
    // `kubectl patch` adding a sidecar: it goes first, the others keep their order.
    let out = merged(pod(), containers(&["web", "log"]), containers(&["proxy"]));
    assert_eq!(names(&out, "/spec/containers"), ["proxy", "web", "log"]);
    // The patch's own order wins for the items it names; the others stay where they were.
    let out = merged(pod(), containers(&["a", "b", "c"]), containers(&["c", "a"]));
    assert_eq!(names(&out, "/spec/containers"), ["b", "c", "a"]);
    // `$setElementOrder` alone reorders (what kubectl apply sends when a file reorders).
    let order = json!({"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}]}});
    let out = merged(pod(), containers(&["a", "b", "c"]), order);
    assert_eq!(names(&out, "/spec/containers"), ["c", "a", "b"]);
    // A three-way patch from kubectl apply: one changed, one added, the order set.
    let patch = json!({"spec": {"$setElementOrder/containers": [{"name": "a"}, {"name": "n"}, {"name": "c"}],
        "containers": [{"name": "n", "image": "new"}, {"name": "c", "image": "c2"}]}});
    let out = merged(pod(), containers(&["a", "b", "c"]), patch);
    assert_eq!(names(&out, "/spec/containers"), ["a", "n", "b", "c"]);
    assert_eq!(out["spec"]["containers"][3]["image"], "c2");
}

#[test]
fn lists_without_a_merge_strategy_and_replaced_maps_should_be_replaced() {
    let live = json!({"spec": {"containers": [{"name": "web", "image": "i", "args": ["a", "b"]}],
        "nodeSelector": {"x": "1", "y": "2"}}});
    let patch = json!({"spec": {"containers": [{"name": "web", "args": ["c"]}],
        "nodeSelector": {"$patch": "replace", "z": "3"}}});
    assert_eq!(
        merged(pod(), live, patch),
        json!({"spec": {"containers": [{"name": "web", "image": "i", "args": ["c"]}],
            "nodeSelector": {"z": "3"}}})
    );
    let out = merged(
        pod(),
        containers(&["a", "b"]),
        json!({"spec": {"containers": [{"name": "z", "image": "i"}, {"$patch": "replace"}]}}),
    );
    assert_eq!(names(&out, "/spec/containers"), ["z"]);
}

#[test]
fn primitive_lists_should_merge_as_sets_and_delete_by_parallel_list() {
    let live = json!({"metadata": {"finalizers": ["a", "b", "c"]}});
    let out = merged(
        pod(),
        live.clone(),
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
    );
    assert_eq!(out["metadata"]["finalizers"], json!(["a", "c"]));
    let out = merged(pod(), live, json!({"metadata": {"finalizers": ["b", "d"]}}));
    assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "d", "c"]));
}

#[test]
fn retain_keys_should_clear_what_the_patch_does_not_list() {
    let deployment = PatchMeta::of_kind("apps", "v1", "Deployment");
    let live =
        json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
    let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
    assert_eq!(
        merged(deployment, live.clone(), patch),
        json!({"spec": {"strategy": {"type": "Recreate"}}})
    );
    let bad = json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}});
    let err = strategic_merge(&mut live.clone(), &bad, deployment).expect_err("refused");
    assert_eq!(
        (err.code, err.message.as_str()),
        (400, "invalid patch format of retainKeys")
    );
}

#[test]
fn other_keys_and_kinds_should_merge_by_their_own_keys() {
    // Container ports by containerPort, Service ports by port.
    let live = json!({"spec": {"containers": [{"name": "web", "image": "i",
        "ports": [{"containerPort": 80, "name": "http"}]}]}});
    let patch = json!({"spec": {"containers": [{"name": "web", "ports": [{"containerPort": 443, "name": "https"}]}]}});
    let out = merged(pod(), live, patch);
    assert_eq!(
        out["spec"]["containers"][0]["ports"],
        json!([{"containerPort": 443, "name": "https"}, {"containerPort": 80, "name": "http"}])
    );
    let service = PatchMeta::of_kind("", "v1", "Service");
    let out = merged(
        service,
        json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}]}}),
        json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
    );
    assert_eq!(
        out["spec"]["ports"],
        json!([{"port": 80, "targetPort": 9090}])
    );
    // Conditions of a status merge by type.
    let out = merged(
        pod(),
        json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    assert_eq!(
        out["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}])
    );
}

#[test]
fn malformed_patches_should_be_refused_with_apimachinerys_messages() {
    let err = strategic_merge(
        &mut containers(&["a"]),
        &json!({"spec": {"containers": [{"image": "x"}]}}),
        pod(),
    )
    .expect_err("no merge key");
    assert_eq!(err.code, 400);
    assert!(
        err.message
            .contains("does not contain declared merge key: name"),
        "{err:?}"
    );
    let err = strategic_merge(
        &mut json!({"metadata": {"finalizers": ["a"]}}),
        &json!({"metadata": {"finalizers": [["a"]]}}),
        pod(),
    )
    .expect_err("list of lists");
    assert_eq!(
        (err.code, err.message.as_str()),
        (422, "lists of lists are not supported")
    );
    let err = strategic_merge(
        &mut json!({"spec": {"restartPolicy": "Always"}}),
        &json!({"spec": {"$patch": "explode"}}),
        pod(),
    )
    .expect_err("bad directive");
    assert_eq!(err.code, 400);
    // Without metadata (parts no definition describes) maps merge and lists are replaced.
    let out = merged(
        PatchMeta::default(),
        json!({"a": {"b": 1}, "l": [1, 2]}),
        json!({"a": {"c": 2}, "l": [3]}),
    );
    assert_eq!(out, json!({"a": {"b": 1, "c": 2}, "l": [3]}));
}

/// JSON a strategic merge patch could hold: fields of a Pod, directives, and nonsense.
fn patch_value() -> impl proptest::strategy::Strategy<Value = Value> {
    krec_core::testing::json_with(
        &[
            "metadata",
            "spec",
            "status",
            "labels",
            "finalizers",
            "ownerReferences",
            "uid",
            "containers",
            "name",
            "image",
            "ports",
            "containerPort",
            "args",
            "env",
            "value",
            "conditions",
            "type",
            "nodeSelector",
            "$patch",
            "$retainKeys",
            "$setElementOrder/containers",
            "$setElementOrder/finalizers",
            "$deleteFromPrimitiveList/finalizers",
            "x",
        ],
        &["a", "b", "web", "replace", "delete", "merge", "name"],
    )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]
    /// Any patch on a Pod is applied or refused with a 4xx, never a panic.
    #[test]
    fn arbitrary_strategic_patches_should_be_applied_or_refused(patch in patch_value(), live in patch_value()) {
        let mut object = json!({"metadata": {"name": "p", "finalizers": ["a"]},
            "spec": {"containers": [{"name": "web", "image": "i"}]}});
        if let (Some(object), Value::Object(extra)) = (object.as_object_mut(), live) {
            object.extend(extra);
        }
        if let Err(err) = strategic_merge(&mut object, &json!({"spec": patch.clone(), "metadata": patch}), pod()) {
            proptest::prop_assert!((400..500).contains(&err.code), "{err:?}");
        }
    }
}
