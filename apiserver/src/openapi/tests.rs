use super::*;
use gnostic::pool;
use prost_reflect::DynamicMessage;

fn foo_crd(schema: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "foos.stable.example.com"},
        "spec": {
            "group": "stable.example.com",
            "scope": "Namespaced",
            "names": {"kind": "Foo", "plural": "foos", "listKind": "FooCollection"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": schema}}],
        },
    })
}

fn registry_with(crd: Value) -> ResourceTypes {
    let registry = ResourceTypes::new();
    registry.put_crd(&crd).expect("crd");
    registry
}

fn v3_doc(docs: &Documents, registry: &ResourceTypes, group: &str, version: &str) -> Value {
    let doc = docs.v3(registry, group, version).expect("served");
    serde_json::from_slice(&doc.body).expect("json")
}

/// Every `$ref` of a document names one of its schemas.
fn assert_closed(schemas: &Map<String, Value>, prefix: &str) {
    let mut found = Vec::new();
    for schema in schemas.values() {
        references(schema, prefix, &mut found);
    }
    for name in found {
        assert!(
            schemas.contains_key(&name),
            "{name} is referenced but missing"
        );
    }
}

#[test]
fn every_served_builtin_kind_should_have_kube_apiservers_definition() {
    let builtin = builtin();
    assert!(
        builtin.definitions.len() > 400,
        "the definitions file parses"
    );
    for rt in crate::resources::builtins() {
        // The access reviews are requests answered, never listed.
        let kinds = if rt.create_only {
            vec![&rt.kind]
        } else {
            vec![&rt.kind, &rt.list_kind]
        };
        for kind in kinds {
            assert!(
                builtin.model(&rt.group, &rt.version, kind).is_some(),
                "no definition of {}/{} {kind}",
                rt.group,
                rt.version
            );
        }
    }
}

#[test]
fn v3_documents_should_hold_their_kinds_and_everything_they_reference() {
    let (docs, registry) = (Documents::default(), ResourceTypes::new());
    let root = docs.v3_root(&registry);
    for rt in crate::resources::builtins()
        .into_iter()
        .filter(|rt| !rt.create_only)
    {
        let path = group_version_path(&rt.group, &rt.version);
        let url = root["paths"][&path]["serverRelativeURL"].as_str();
        assert!(url.is_some_and(|u| u.starts_with(&format!("/openapi/v3/{path}?hash="))));
        let doc = v3_doc(&docs, &registry, &rt.group, &rt.version);
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        assert_closed(schemas, "#/components/schemas/");
        assert!(
            schemas
                .values()
                .any(|s| s["x-kubernetes-group-version-kind"][0]["kind"] == json!(rt.kind))
        );
    }
    let apps = v3_doc(&docs, &registry, "apps", "v1");
    let schemas = &apps["components"]["schemas"];
    // A reference with a description is wrapped in allOf, as kube-openapi writes v3.
    assert_eq!(
        schemas["io.k8s.api.apps.v1.Deployment"]["properties"]["spec"],
        json!({"allOf": [{"$ref": "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"}],
            "description": "Specification of the desired behavior of the Deployment."})
    );
    // kubectl's client-side apply merges containers by name: the patch strategy is there.
    let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    // kubectl checks a kind's PATCH operation for `fieldValidation` before relying on it.
    let patch = &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
    assert_eq!(
        patch["x-kubernetes-group-version-kind"]["kind"],
        "Deployment"
    );
    let names: Vec<&str> = patch["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(
        names.contains(&"fieldValidation") && names.contains(&"fieldManager"),
        "{names:?}"
    );
    assert!(docs.v3(&registry, "apps", "v2").is_none());
}

#[test]
fn a_crds_kinds_should_be_completed_as_apiextensions_does() {
    let registry = registry_with(foo_crd(json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer"},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                    "x-kubernetes-preserve-unknown-fields": true},
            }},
        },
    })));
    let docs = Documents::default();
    let doc = v3_doc(&docs, &registry, "stable.example.com", "v1");
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    assert_closed(schemas, "#/components/schemas/");
    let foo = &schemas["com.example.stable.v1.Foo"];
    assert_eq!(
        foo["x-kubernetes-group-version-kind"],
        json!([{"group": "stable.example.com", "version": "v1", "kind": "Foo"}])
    );
    assert_eq!(
        foo["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert_eq!(foo["properties"]["kind"]["type"], "string");
    let template = &foo["properties"]["spec"]["properties"]["template"];
    assert_eq!(template["required"], json!(["kind", "apiVersion"]));
    assert!(template["properties"]["metadata"].is_object());
    let list = &schemas["com.example.stable.v1.FooCollection"];
    assert_eq!(list["description"], "FooCollection is a list of Foo");
    assert_eq!(
        list["properties"]["items"]["items"]["$ref"],
        "#/components/schemas/com.example.stable.v1.Foo"
    );

    // Adding the CRD changed the served types: the documents follow.
    let before = Documents::default();
    let plain = ResourceTypes::new();
    assert!(
        before.v3_root(&plain)["paths"]
            .get("apis/stable.example.com/v1")
            .is_none()
    );
    assert!(
        docs.v3_root(&registry)["paths"]
            .get("apis/stable.example.com/v1")
            .is_some()
    );
    registry.remove_crd("foos.stable.example.com");
    assert!(docs.v3(&registry, "stable.example.com", "v1").is_none());
}

/// The cases of apiextensions-apiserver's `ToStructuralOpenAPIV2`, checked by hand.
#[test]
fn v2_schemas_should_drop_what_v2_clients_cannot_read() {
    let mut schema = json!({
        "type": "object",
        "required": ["a", "b"],
        "properties": {
            "a": {"type": "string", "nullable": true},
            "b": {"type": "array", "items": {"type": "string"}},
            "c": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"d": {"type": "string"}}},
            "e": {"type": "array", "x-kubernetes-preserve-unknown-fields": true,
                "items": {"type": "string"}},
            "f": {"anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": true},
            "g": {"type": "object", "additionalProperties": {"type": "string", "nullable": true},
                "required": ["x"]},
            "h": {"type": "object", "nullable": true, "properties": {"i": {"type": "string"}}},
        },
    });
    to_v2_structural(&mut schema);
    assert_eq!(
        schema,
        json!({
            "type": "object",
            "required": ["b"],
            "properties": {
                "a": {},
                "b": {"type": "array", "items": {"type": "string"}},
                "c": {"x-kubernetes-preserve-unknown-fields": true},
                "e": {"x-kubernetes-preserve-unknown-fields": true},
                "f": {"x-kubernetes-int-or-string": true},
                "g": {"type": "object", "additionalProperties": {}},
                "h": {},
            },
        })
    );
    // A kind that keeps unknown fields is an untyped object in v2.
    let registry = registry_with(foo_crd(
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    ));
    let (v2, _) = Documents::default().v2(&registry);
    let v2: Value = serde_json::from_slice(&v2.body).expect("json");
    assert_eq!(
        v2["definitions"]["com.example.stable.v1.Foo"],
        json!({"type": "object", "x-kubernetes-group-version-kind":
            [{"group": "stable.example.com", "version": "v1", "kind": "Foo"}]})
    );
}

#[test]
fn the_v2_document_should_encode_as_gnostic_protobuf() {
    let registry = registry_with(foo_crd(json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "size": {"type": "integer", "minimum": 1, "default": 3, "enum": [1, 3, 5]},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        }}},
    })));
    let (json_doc, proto_doc) = Documents::default().v2(&registry);
    let doc: Value = serde_json::from_slice(&json_doc.body).expect("json");
    assert_eq!(doc["swagger"], "2.0");
    let definitions = doc["definitions"].as_object().expect("definitions");
    assert_closed(definitions, "#/definitions/");

    let descriptor = pool()
        .get_message_by_name("openapi.v2.Document")
        .expect("descriptor");
    let decoded = DynamicMessage::decode(descriptor, proto_doc.body.as_ref()).expect("decodes");
    let text = serde_json::to_value(&decoded).expect("as json");
    assert_eq!(text["swagger"], "2.0");
    let named = text["definitions"]["additionalProperties"]
        .as_array()
        .expect("definitions");
    assert_eq!(named.len(), definitions.len());
    let find = |name: &str| {
        named
            .iter()
            .find(|n| n["name"] == name)
            .map(|n| n["value"].clone())
            .expect(name)
    };
    let deployment = find("io.k8s.api.apps.v1.Deployment");
    assert_eq!(deployment["type"]["value"], json!(["object"]));
    let gvk = &deployment["vendorExtension"][0];
    assert_eq!(gvk["name"], "x-kubernetes-group-version-kind");
    let yaml: Value =
        serde_json::from_str(gvk["value"]["yaml"].as_str().expect("yaml")).expect("json");
    assert_eq!(
        yaml,
        json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
    );
    let spec = find("io.k8s.api.apps.v1.Deployment")["properties"]["additionalProperties"]
        .as_array()
        .and_then(|p| p.iter().find(|n| n["name"] == "spec").cloned())
        .expect("spec");
    assert_eq!(
        spec["value"]["Ref"],
        "#/definitions/io.k8s.api.apps.v1.DeploymentSpec"
    );

    let foo = find("com.example.stable.v1.Foo");
    let properties = |s: &Value, name: &str| {
        s["properties"]["additionalProperties"]
            .as_array()
            .and_then(|p| p.iter().find(|n| n["name"] == name).cloned())
            .map(|n| n["value"].clone())
            .expect(name)
    };
    let size = properties(&properties(&foo, "spec"), "size");
    assert_eq!(size["type"]["value"], json!(["integer"]));
    assert_eq!(size["minimum"], 1.0);
    assert_eq!(size["default"]["yaml"], "3");
    assert_eq!(
        size["enum"],
        json!([{"yaml": "1"}, {"yaml": "3"}, {"yaml": "5"}])
    );
    let labels = properties(&properties(&foo, "spec"), "labels");
    assert_eq!(
        labels["additionalProperties"]["schema"]["type"]["value"],
        json!(["string"])
    );

    // Operations carry their kind and query parameters, as kubectl's v2 fallback reads them.
    let paths = text["paths"]["path"].as_array().expect("paths");
    let item = paths
        .iter()
        .find(|p| p["name"] == "/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
        .expect("deployment path");
    let patch = &item["value"]["patch"];
    assert!(
        patch["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .any(
                |p| p["parameter"]["nonBodyParameter"]["queryParameterSubSchema"]["name"]
                    == "fieldValidation"
            )
    );
    let extensions = patch["vendorExtension"].as_array().expect("extensions");
    assert!(
        extensions
            .iter()
            .any(|e| e["name"] == "x-kubernetes-group-version-kind"
                && e["value"]["yaml"] == r#"{"group":"apps","kind":"Deployment","version":"v1"}"#)
    );
    assert_eq!(
        item["value"]["parameters"][1]["parameter"]["nonBodyParameter"]["pathParameterSubSchema"]["name"],
        "name"
    );
}

/// JSON a CRD's `openAPIV3Schema` could hold, valid or not.
fn schema_value() -> impl proptest::strategy::Strategy<Value = Value> {
    krec_core::testing::json_with(
        &[
            "type",
            "properties",
            "items",
            "additionalProperties",
            "required",
            "nullable",
            "x-kubernetes-preserve-unknown-fields",
            "x-kubernetes-embedded-resource",
            "x-kubernetes-int-or-string",
            "anyOf",
            "allOf",
            "enum",
            "default",
            "minimum",
            "maxLength",
            "description",
            "$ref",
            "spec",
            "metadata",
            "x",
        ],
        &[
            "object",
            "array",
            "string",
            "integer",
            "#/definitions/x",
            "",
        ],
    )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
    /// Whatever schema a CRD carries, its kinds' models build, and encode as protobuf, without
    /// a panic (the rest of the documents is the built-ins', tested above).
    #[test]
    fn arbitrary_crd_schemas_should_build_documents(schema in schema_value()) {
        let registry = registry_with(foo_crd(schema));
        let types = registry.all();
        let crd: Vec<&ResourceType> = types.iter().filter(|t| t.group == "stable.example.com").collect();
        proptest::prop_assert_eq!(crd.len(), 1);
        let v3 = models(&crd, Flavour::V3);
        proptest::prop_assert!(v3.contains_key("com.example.stable.v1.Foo"));
        let v2 = json!({"swagger": "2.0", "paths": paths(&crd, Flavour::V2),
            "definitions": models(&crd, Flavour::V2)});
        proptest::prop_assert!(!gnostic::encode(&v2).is_empty());
    }
}

#[test]
fn references_should_resolve_alike_by_address_and_by_name() {
    let builtin = builtin();
    let mut nodes = 0;
    let mut with_ref = 0;
    let (mut lists, mut keyed_or_set) = (0, 0);
    let mut stack: Vec<&'static Value> = builtin.definitions.values().collect();
    while let Some(node) = stack.pop() {
        match node {
            Value::Object(map) => {
                nodes += 1;
                let by_address = referenced(node).map(|d| d.schema as *const Value);
                // A copy is no node of the definitions: found by its `$ref`.
                let copy = node.clone();
                let by_name = referenced(&copy).map(|d| d.schema as *const Value);
                assert_eq!(by_address, by_name, "{node}");
                // The facts kept by address are the ones the node's text gives.
                assert_eq!(members_and_atomic(node).1, atomic_map(&copy), "{node}");
                assert_eq!(list_type(node), list_type(&copy), "{node}");
                lists += usize::from(builtin.lists.contains_key(&address(node)));
                if list_type(node) != ListType::Atomic {
                    keyed_or_set += 1;
                }
                with_ref += usize::from(by_address.is_some());
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    assert!(
        nodes > 1_000 && with_ref > 100,
        "{nodes} nodes, {with_ref} references"
    );
    assert_eq!(builtin.refs.len(), nodes);
    assert!(
        lists > 100 && keyed_or_set > 50,
        "{lists} list nodes, {keyed_or_set} keyed or sets"
    );
}
