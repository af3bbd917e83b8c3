use super::*;

fn write(manager: &str) -> Write<'_> {
    Write {
        manager,
        api_version: "apps/v1",
        subresource: None,
        time: "2026-01-01T00:00:00Z",
    }
}

/// `manager` applies `config` to `live` (a Deployment named web).
fn apply_as(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
) -> Result<Value, ApiError> {
    apply(
        live,
        config,
        Schema::builtin("apps", "v1", "Deployment"),
        false,
        force,
        &write(manager),
        ("Deployment", "apps", "web"),
    )
}

fn deployment(replicas: i64, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"a": "b"}},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "web", "image": image}]}}}})
}

#[test]
fn field_sets_should_round_trip_through_fields_v1() {
    let set = fields_of(
        &deployment(1, "nginx"),
        Schema::builtin("apps", "v1", "Deployment"),
        false,
    );
    let text = set.to_fields_v1();
    assert_eq!(
        text,
        json!({"f:metadata": {"f:labels": {"f:a": {}}},
            "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}})
    );
    assert_eq!(FieldSet::from_fields_v1(&text), set);
}

/// List types as structured-merge-diff reads them from kube-apiserver's definitions: ports
/// keyed by port and protocol (defaulted when left out), arguments atomic, finalizers a set,
/// owner references keyed by uid and atomic, as are label selectors.
#[test]
fn list_types_should_come_from_the_kinds_definition() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "finalizers": ["x"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u1"}]},
        "spec": {"containers": [{"name": "web", "image": "i", "args": ["a"],
            "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]}]}});
    let text = fields_of(&pod, Schema::builtin("", "v1", "Pod"), false).to_fields_v1();
    assert_eq!(
        text,
        json!({"f:metadata": {"f:finalizers": {"v:\"x\"": {}},
                "f:ownerReferences": {"k:{\"uid\":\"u1\"}": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:args": {},
                "f:image": {}, "f:name": {}, "f:ports": {
                    "k:{\"containerPort\":53,\"protocol\":\"UDP\"}": {".": {}, "f:containerPort": {}, "f:protocol": {}},
                    "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}})
    );
    let deployment = json!({"spec": {"selector": {"matchLabels": {"app": "web"}}}});
    let text = fields_of(
        &deployment,
        Schema::builtin("apps", "v1", "Deployment"),
        false,
    );
    assert_eq!(text.to_fields_v1(), json!({"f:spec": {"f:selector": {}}}));
}

#[test]
fn an_apply_that_drops_a_field_should_remove_it_unless_another_manager_owns_it() {
    let first = apply_as(None, &deployment(3, "nginx"), "a", false).expect("create");
    let mut config = deployment(3, "nginx");
    config["metadata"]
        .as_object_mut()
        .map(|m| m.remove("labels"));
    let second = apply_as(Some(&first), &config, "a", false).expect("apply");
    assert!(second.pointer("/metadata/labels/a").is_none(), "{second}");

    // Labels another manager also set stay.
    let mut shared = first.clone();
    record_update(
        &first,
        &mut shared,
        Schema::builtin("apps", "v1", "Deployment"),
        &write("b"),
    );
    let mut labelled = shared.clone();
    labelled["metadata"]["labels"]["c"] = json!("d");
    record_update(
        &shared,
        &mut labelled,
        Schema::builtin("apps", "v1", "Deployment"),
        &write("b"),
    );
    let third = apply_as(Some(&labelled), &config, "a", false).expect("apply");
    assert_eq!(third.pointer("/metadata/labels/c"), Some(&json!("d")));
}

#[test]
fn two_appliers_should_conflict_and_force_should_take_over() {
    let first = apply_as(None, &deployment(3, "nginx"), "a", false).expect("create");
    let err = apply_as(Some(&first), &deployment(5, "nginx"), "b", false).expect_err("conflict");
    assert_eq!(err.code, 409);
    assert_eq!(
        err.message,
        "Apply failed with 1 conflict: conflict with \"a\" using apps/v1: .spec.replicas"
    );
    // The same value is shared, not a conflict.
    apply_as(Some(&first), &deployment(3, "nginx"), "b", false).expect("same values");
    let forced = apply_as(Some(&first), &deployment(5, "nginx"), "b", true).expect("forced");
    assert_eq!(forced["spec"]["replicas"], 5);
    let owners = entries(&forced);
    let a = owners.iter().find(|e| e.manager == "a").expect("a");
    let replicas = vec!["f:spec".to_owned(), "f:replicas".to_owned()];
    assert!(!a.fields.contains(&replicas), "a lost .spec.replicas");
    let b = owners.iter().find(|e| e.manager == "b").expect("b");
    assert!(b.fields.contains(&replicas));
}

#[test]
fn an_update_should_take_the_fields_it_changes() {
    let first = apply_as(None, &deployment(3, "nginx"), "a", false).expect("create");
    let mut scaled = first.clone();
    scaled["spec"]["replicas"] = json!(4);
    record_update(
        &first,
        &mut scaled,
        Schema::builtin("apps", "v1", "Deployment"),
        &write("kubectl-scale"),
    );
    let owners = entries(&scaled);
    let replicas = vec!["f:spec".to_owned(), "f:replicas".to_owned()];
    assert!(owners.iter().any(|e| e.manager == "kubectl-scale"
        && e.operation == "Update"
        && e.fields.contains(&replicas)));
    assert!(
        !owners
            .iter()
            .any(|e| e.manager == "a" && e.fields.contains(&replicas))
    );
    // Now `a` applying 3 again conflicts with kubectl-scale.
    let err = apply_as(Some(&scaled), &deployment(3, "nginx"), "a", false).expect_err("conflict");
    assert!(
        err.message.contains("conflict with \"kubectl-scale\""),
        "{}",
        err.message
    );
}

proptest::proptest! {
    /// Arbitrary JSON applied over arbitrary JSON never panics, and what comes out carries the
    /// applier's entry.
    #[test]
    fn arbitrary_applies_should_never_panic(
        live in proptest::collection::btree_map("[a-c]", proptest::prop_oneof![
            proptest::strategy::Just(json!(1)), proptest::strategy::Just(json!("x")),
            proptest::strategy::Just(json!([1, 2])), proptest::strategy::Just(json!({"a": [{"name": "n"}]})),
        ], 0..4),
        config in proptest::collection::btree_map("[a-c]", proptest::prop_oneof![
            proptest::strategy::Just(json!(2)), proptest::strategy::Just(json!({"b": 1})),
            proptest::strategy::Just(json!([{"name": "n", "v": 1}])), proptest::strategy::Just(json!(null)),
        ], 0..4),
        force in proptest::prelude::any::<bool>(),
    ) {
        let live = json!({"metadata": {"name": "x"}, "spec": live});
        let live = apply(None, &live, Schema::builtin("apps", "v1", "Deployment"), false, false, &write("one"), ("K", "", "x")).expect("create");
        let config = json!({"metadata": {"name": "x"}, "spec": config});
        if let Ok(merged) = apply(Some(&live), &config, Schema::builtin("apps", "v1", "Deployment"), false, force, &write("two"), ("K", "", "x")) {
            proptest::prop_assert!(entries(&merged).iter().any(|e| e.manager == "two"));
        }
    }
}

/// What an update changed and removed, leaf by leaf: an unchanged container contributes nothing,
/// a changed image its leaf, an added container itself and its fields, a dropped label its leaf.
#[test]
fn diff_should_name_exactly_the_changed_and_removed_leaves() {
    let old = json!({"metadata": {"name": "web", "labels": {"a": "1", "b": "2"}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "web", "image": "nginx:1"}, {"name": "log", "image": "busybox"}]}}}});
    let new = json!({"metadata": {"name": "web", "labels": {"a": "1"}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "web", "image": "nginx:2"}, {"name": "log", "image": "busybox"},
            {"name": "proxy", "image": "envoy"}]}}}});
    let (changed, removed) = diff(
        &old,
        &new,
        Schema::builtin("apps", "v1", "Deployment"),
        false,
    );
    assert_eq!(
        changed.to_fields_v1(),
        json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"proxy\"}": {".": {}, "f:image": {}, "f:name": {}},
            "k:{\"name\":\"web\"}": {"f:image": {}}}}}}})
    );
    assert_eq!(
        removed.to_fields_v1(),
        json!({"f:metadata": {"f:labels": {"f:b": {}}}})
    );
    let (changed, removed) = diff(
        &new,
        &new,
        Schema::builtin("apps", "v1", "Deployment"),
        false,
    );
    assert!(changed.is_empty() && removed.is_empty());
}

/// Field sets from up to eight paths of up to three elements over a small vocabulary, so that
/// two sets share paths, prefixes and `.` members.
fn field_set() -> impl proptest::strategy::Strategy<Value = FieldSet> {
    use proptest::prelude::*;
    let element = proptest::sample::select(vec!["f:a", "f:b", "k:{\"name\":\"n\"}", "v:1", "."]);
    proptest::collection::vec(proptest::collection::vec(element, 1..4), 0..8).prop_map(|paths| {
        let mut set = FieldSet::default();
        for path in paths {
            // `.` only ends a path: it marks the node above as a member.
            let path: Vec<String> = path
                .iter()
                .take_while(|e| **e != ".")
                .map(|e| (*e).to_owned())
                .collect();
            if !path.is_empty() {
                set.insert(&path);
            }
        }
        set
    })
}

/// A set's `FieldsV1` read back and written again: the form two equal sets share.
fn normal(fields: &Value) -> Value {
    FieldSet::from_fields_v1(fields).to_fields_v1()
}

/// `record_update` as it was before it worked in place: every entry decoded into a
/// [`FieldSet`], changed, and encoded again (the model the in-place version must match).
fn record_update_model(old: &Value, new: &mut Value, schema: Schema<'_>, write: &Write<'_>) {
    let mut list = entries(old);
    let (changed, removed) = diff(old, new, schema, false);
    for entry in &mut list {
        entry.fields.subtract(&removed);
        if entry.manager != write.manager || entry.operation != "Update" {
            entry.fields.subtract(&changed);
        }
    }
    let subresource = write.subresource.map(str::to_owned);
    match list.iter_mut().find(|e| {
        e.manager == write.manager && e.operation == "Update" && e.subresource == subresource
    }) {
        Some(entry) => {
            entry.fields.union(&changed);
            if !changed.is_empty() {
                entry.time = write.time.to_owned();
                entry.api_version = write.api_version.to_owned();
            }
        }
        None => list.push(Entry {
            manager: write.manager.to_owned(),
            operation: "Update".into(),
            api_version: write.api_version.to_owned(),
            time: write.time.to_owned(),
            subresource,
            fields: changed,
        }),
    }
    set_entries(new, &list);
}

/// The model's encoding: `entries` written into `object`'s metadata as the former code wrote
/// them, every entry encoded anew (empty ones dropped).
fn set_entries(object: &mut Value, entries: &[Entry]) {
    let kept: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            new_entry(
                &Write {
                    manager: &e.manager,
                    api_version: &e.api_version,
                    subresource: e.subresource.as_deref(),
                    time: &e.time,
                },
                &e.operation,
                e.fields.to_fields_v1(),
            )
        })
        .collect();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if kept.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(kept));
        }
    }
}

/// Each entry's manager, operation and normalised field set, in order.
fn owners(object: &Value) -> Vec<(String, String, Option<String>, Value)> {
    entries(object)
        .into_iter()
        .map(|e| {
            let fields = normal(&e.fields.to_fields_v1());
            (e.manager, e.operation, e.subresource, fields)
        })
        .collect()
}

proptest::proptest! {
    /// Subtracting from and adding to a set in its `FieldsV1` text gives the set that the
    /// same operation on the decoded set gives, "emptied" is reported exactly when the
    /// subtraction left nothing, and the text stays compact with its keys in order.
    #[test]
    fn fields_v1_text_operations_should_match_field_set_operations(a in field_set(), b in field_set()) {
        let parse = |text: &str| serde_json::from_str::<Value>(text).expect("valid JSON");
        let canonical = |text: &str| parse(text).to_string();
        let original = a.to_fields_v1().to_string();

        let mut expected = a.clone();
        expected.subtract(&b);
        let (rest, emptied) = text::subtract(&original, &b);
        let result = rest.clone().unwrap_or_else(|| original.clone());
        proptest::prop_assert_eq!(&result, &canonical(&result));
        proptest::prop_assert_eq!(normal(&parse(&result)), expected.to_fields_v1());
        let nothing_left = result == "{}";
        proptest::prop_assert_eq!(emptied, nothing_left && original != "{}");

        let mut expected = FieldSet::default();
        for path in b.paths() {
            proptest::prop_assert_eq!(text::contains(&original, &path), a.contains(&path), "{:?}", path);
            if a.contains(&path) {
                expected.insert(&path);
            }
        }
        let both = FieldSet { itself: false, ..text::members_in_both(&original, &b) };
        proptest::prop_assert_eq!(both.paths(), expected.paths());

        let mut expected = a.clone();
        expected.union(&b);
        let united = text::union(&original, &b, true);
        proptest::prop_assert_eq!(&united, &canonical(&united));
        proptest::prop_assert_eq!(normal(&parse(&united)), expected.to_fields_v1());
    }

    /// Three updates by two managers over arbitrary specs record the same owners, fields and
    /// times as decoding and re-encoding every entry did.
    #[test]
    fn in_place_updates_should_record_what_decoded_entries_did(
        specs in proptest::collection::vec(
            krec_core::testing::json_with(&["replicas", "paused", "template", "containers", "name", "image"], &["web", "x"]),
            3..4),
        managers in proptest::collection::vec(proptest::sample::select(vec!["one", "two"]), 3..4),
    ) {
        let schema = Schema::builtin("apps", "v1", "Deployment");
        let mut fast = Value::Null;
        let mut model = Value::Null;
        for (spec, manager) in specs.iter().zip(&managers) {
            let object = json!({"metadata": {"name": "web", "labels": {"spec": spec.is_object()}}, "spec": spec});
            let (mut next_fast, mut next_model) = (object.clone(), object);
            if let Some(entries) = fast.pointer("/metadata/managedFields") {
                next_fast["metadata"]["managedFields"] = entries.clone();
            }
            record_update(&fast, &mut next_fast, schema, &write(manager));
            record_update_model(&model, &mut next_model, schema, &write(manager));
            proptest::prop_assert_eq!(owners(&next_fast), owners(&next_model));
            fast = next_fast;
            model = next_model;
        }
    }
}

proptest::proptest! {
    /// The one-walk `FieldsV1` text of an object is what its field set encodes to.
    #[test]
    fn fields_v1_of_should_encode_fields_of(
        spec in krec_core::testing::json_with(
            &["replicas", "template", "spec", "containers", "ports", "finalizers", "selector", "name", "containerPort"],
            &["web", "x"]),
        finalizers in proptest::collection::vec(proptest::sample::select(vec!["a", "b"]), 0..3),
    ) {
        let object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "finalizers": finalizers, "labels": {"a": "b"}}, "spec": spec});
        let schema = Schema::builtin("apps", "v1", "Deployment");
        // The text is exactly the set's JSON written compactly (key order included).
        proptest::prop_assert_eq!(fields_v1_of(&object, schema, false), fields_of(&object, schema, false).to_fields_v1().to_string());
    }
}

/// A create by an updater (which owns the container item and its fields) and then an apply of
/// the same container by another manager: the item and equal fields are no conflict (the merge
/// changes nothing there); a changed image is one, naming only that leaf; forcing it takes the
/// leaf from the updater and leaves the updater its other fields.
#[test]
fn apply_over_an_update_should_conflict_only_on_what_it_changes() {
    let schema = Schema::builtin("apps", "v1", "Deployment");
    let mut created = deployment(1, "nginx");
    record_update(&Value::Null, &mut created, schema, &write("kubectl-create"));
    let same = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
    let applied = apply_as(Some(&created), &same, "ops", false).expect("no conflict");
    assert_eq!(applied["spec"], created["spec"]);

    let mut changed = same.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    let err = apply_as(Some(&applied), &changed, "ops", false).expect_err("conflict");
    assert_eq!(
        err.message,
        "Apply failed with 1 conflict: conflict with \"kubectl-create\" using apps/v1: .spec.template.spec.containers[name=\"web\"].image"
    );
    let forced = apply_as(Some(&applied), &changed, "ops", true).expect("forced");
    let image = [
        "f:spec",
        "f:template",
        "f:spec",
        "f:containers",
        "k:{\"name\":\"web\"}",
        "f:image",
    ]
    .map(str::to_owned);
    let replicas = ["f:spec", "f:replicas"].map(str::to_owned);
    let owners = entries(&forced);
    let creator = owners
        .iter()
        .find(|e| e.manager == "kubectl-create")
        .expect("creator");
    assert!(!creator.fields.contains(&image) && creator.fields.contains(&replicas));
    let ops = owners.iter().find(|e| e.manager == "ops").expect("applier");
    assert_eq!(ops.operation, "Apply");
    assert!(ops.fields.contains(&image) && !ops.fields.contains(&replicas));
}

/// Applying the same configuration again changes nothing, not even the entries' fields.
#[test]
fn a_repeated_apply_should_change_nothing() {
    let first = apply_as(None, &deployment(2, "nginx"), "ops", false).expect("create");
    let again = apply_as(Some(&first), &deployment(2, "nginx"), "ops", false).expect("again");
    assert_eq!(first, again);
}

proptest::proptest! {
    /// The check the JSON writers make before writing a stored `fieldsV1` text as JSON accepts
    /// every text the server writes, and nothing that is not a JSON object of objects.
    #[test]
    fn fields_v1_text_check_should_accept_exactly_fields_v1(a in field_set(), junk in "[{}\":,a\\\\ ]{0,24}") {
        proptest::prop_assert!(is_fields_v1_text(&a.to_fields_v1().to_string()));
        for candidate in [junk.clone(), format!("{{{junk}}}"), format!("{{\"f:{junk}\":{{}}}}")] {
            if is_fields_v1_text(&candidate) {
                fn objects_of_objects(value: &Value) -> bool {
                    value.as_object().is_some_and(|m| m.values().all(objects_of_objects))
                }
                let parsed: Result<Value, _> = serde_json::from_str(&candidate);
                proptest::prop_assert!(parsed.as_ref().is_ok_and(objects_of_objects), "{:?} accepted", candidate);
            }
        }
    }

    /// An object as stored (each `fieldsV1` as text) is written as the JSON of the object as
    /// clients see it, and any other value exactly as `serde_json` writes it.
    #[test]
    fn stored_objects_should_be_written_as_clients_see_them(
        a in field_set(),
        spec in krec_core::testing::json_with(&["fieldsV1", "managedFields", "metadata"], &["x", "{}"]),
    ) {
        let fields = a.to_fields_v1();
        let object = json!({"metadata": {"name": "x", "managedFields": [
            {"manager": "m", "operation": "Update", "fieldsV1": fields},
            {"manager": "n", "fieldsV1": "not JSON"}]}, "spec": spec});
        let mut stored = object.clone();
        compact(&mut stored);
        let written = krec_core::json::object_to_vec(&stored);
        let read: Value = serde_json::from_slice(&written).expect("valid JSON");
        proptest::prop_assert_eq!(&read, &object);
        let seen = expanded(&stored);
        proptest::prop_assert_eq!(seen.as_ref(), &object);
        proptest::prop_assert_eq!(krec_core::json::object_to_vec(&spec), serde_json::to_vec(&spec).expect("json"));
    }
}

proptest::proptest! {
    /// Keys and item keys are escaped as `serde_json` escapes them.
    #[test]
    fn keys_should_be_escaped_as_serde_json_escapes_them(
        text in krec_core::testing::awkward_string(),
    ) {
        let mut out = String::from("[");
        push_escaped(&mut out, &text);
        let quoted = serde_json::to_string(&text).expect("json");
        proptest::prop_assert_eq!(&out[1..], &quoted[1..quoted.len() - 1]);
        let mut out = String::from("k:");
        push_json(&mut out, &json!({"name": text, "port": 80}));
        proptest::prop_assert_eq!(out, format!("k:{}", json!({"name": text, "port": 80})));
    }
}
