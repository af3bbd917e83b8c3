//! The served documents: `/openapi/v3` (a root and one document per group-version) and
//! `/openapi/v2` (JSON and gnostic protobuf), built from the served types and the built-in
//! definitions, and kept until the served types change.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use serde_json::{Map, Value, json};

use super::*;
use crate::resources::{ResourceType, ResourceTypes};

/// The media type of the v2 document in gnostic's protobuf, as served.
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// The deprecated spelling of [`V2_PROTOBUF`], which client-go still asks for (and which Go's
/// `mime` package cannot parse as a response's type: answers carry [`V2_PROTOBUF`]).
pub const V2_PROTOBUF_DEPRECATED: &str =
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// Descriptions apiextensions-apiserver gives the properties it adds to a CRD's schema.
const METADATA_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_METADATA_DESCRIPTION: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const EMBEDDED_API_VERSION_DESCRIPTION: &str = "apiVersion defines the versioned schema of this representation of an object. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const EMBEDDED_KIND_DESCRIPTION: &str = "kind is a string value representing the type of this object. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

/// Which OpenAPI version a schema is written for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Flavour {
    V2,
    V3,
}

impl Flavour {
    fn ref_prefix(self) -> &'static str {
        match self {
            Flavour::V2 => "#/definitions/",
            Flavour::V3 => "#/components/schemas/",
        }
    }

    fn reference(self, name: &str) -> Value {
        json!({"$ref": format!("{}{name}", self.ref_prefix())})
    }
}

impl Builtin {
    /// A built-in definition written for `flavour`: references point into the document, and in
    /// v3 a reference with siblings (a description) is wrapped in `allOf`, as kube-openapi does.
    fn definition(&self, name: &str, flavour: Flavour) -> Option<Value> {
        let mut schema = self.by_name.get(name)?.schema.clone();
        if flavour == Flavour::V3 {
            to_v3_references(&mut schema);
        }
        Some(schema)
    }
}

fn to_v3_references(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get_mut("$ref") {
                if let Some(name) = reference.strip_prefix("#/definitions/") {
                    *reference = format!("#/components/schemas/{name}");
                }
                if map.len() > 1
                    && let Some(reference) = map.remove("$ref")
                {
                    map.insert("allOf".into(), json!([{"$ref": reference}]));
                }
            }
            for (key, value) in map.iter_mut() {
                // `properties` maps names to schemas; a property may be called `$ref`.
                if key != "$ref" {
                    to_v3_references(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(to_v3_references),
        _ => {}
    }
}

/// The names of the definitions `schema` references, directly.
fn references(schema: &Value, prefix: &str, found: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            if let Some(name) = map
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(prefix))
            {
                found.push(name.to_owned());
            }
            map.values().for_each(|v| references(v, prefix, found));
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, prefix, found)),
        _ => {}
    }
}

/// The schemas of `types`' kinds and lists, and every built-in definition they reference.
fn models(types: &[&ResourceType], flavour: Flavour) -> Map<String, Value> {
    let builtin = builtin();
    let mut models = Map::new();
    let mut pending = Vec::new();
    for rt in types {
        let (group, version) = (rt.group.as_str(), rt.version.as_str());
        match builtin.model(group, version, &rt.kind) {
            Some(name) if rt.schema.is_none() => {
                pending.push(name.to_owned());
                if let Some(list) = builtin.model(group, version, &rt.list_kind) {
                    pending.push(list.to_owned());
                }
            }
            _ => {
                let (name, schema) = (model_name(rt, &rt.kind), crd_model(rt, flavour));
                references(&schema, flavour.ref_prefix(), &mut pending);
                models.insert(name, schema);
                let (name, list) = (model_name(rt, &rt.list_kind), crd_list_model(rt, flavour));
                references(&list, flavour.ref_prefix(), &mut pending);
                models.insert(name, list);
            }
        }
    }
    let mut seen = BTreeSet::new();
    while let Some(name) = pending.pop() {
        if !seen.insert(name.clone()) || models.contains_key(&name) {
            continue;
        }
        if let Some(schema) = builtin.definition(&name, flavour) {
            references(&schema, flavour.ref_prefix(), &mut pending);
            models.insert(name, schema);
        }
    }
    models.sort_keys();
    models
}

/// apiextensions-apiserver's model name of a CRD kind: the group's labels reversed, then
/// version and kind (`com.example.stable.v1.CronTab`).
fn model_name(rt: &ResourceType, kind: &str) -> String {
    let group: Vec<&str> = rt.group.split('.').rev().collect();
    format!("{}.{}.{kind}", group.join("."), rt.version)
}

fn gvk_extension(rt: &ResourceType, kind: &str) -> Value {
    json!([{"group": rt.group, "version": rt.version, "kind": kind}])
}

/// The `apiVersion` and `kind` properties every object has, as kube-apiserver describes them.
fn type_meta_property(name: &str) -> Value {
    builtin()
        .definitions
        .get("io.k8s.api.core.v1.Pod")
        .and_then(|pod| pod.pointer(&format!("/properties/{name}")))
        .cloned()
        .unwrap_or_else(|| json!({"type": "string"}))
}

fn with_description(reference: Value, description: &str, flavour: Flavour) -> Value {
    let mut schema = reference;
    schema["description"] = json!(description);
    if flavour == Flavour::V3 {
        to_v3_references(&mut schema);
    }
    schema
}

/// A CRD kind's schema, completed as apiextensions-apiserver's `buildKubeNative` does.
fn crd_model(rt: &ResourceType, flavour: Flavour) -> Value {
    let preserve = |s: &Value| s["x-kubernetes-preserve-unknown-fields"] == json!(true);
    let mut schema = match rt.schema.as_deref() {
        // A schema that is no object at all describes nothing (kube-apiserver refuses such CRDs).
        None => json!({"type": "object"}),
        Some(s) if !s.is_object() => json!({"type": "object"}),
        Some(s) if flavour == Flavour::V2 && preserve(s) => json!({"type": "object"}),
        Some(s) => {
            let mut schema = s.clone();
            if flavour == Flavour::V2 {
                to_v2_structural(&mut schema);
            }
            let (api_version, kind) =
                (type_meta_property("apiVersion"), type_meta_property("kind"));
            add_object_properties(&mut schema, api_version, kind, flavour);
            add_embedded_properties(&mut schema, flavour);
            schema
        }
    };
    schema["x-kubernetes-group-version-kind"] = gvk_extension(rt, &rt.kind);
    schema
}

/// A CRD kind's list schema, as apiextensions-apiserver's `buildListSchema`.
fn crd_list_model(rt: &ResourceType, flavour: Flavour) -> Value {
    let items = json!({
        "type": "array",
        "items": flavour.reference(&model_name(rt, &rt.kind)),
        "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", rt.plural),
    });
    json!({
        "type": "object",
        "description": format!("{} is a list of {}", rt.list_kind, rt.kind),
        "required": ["items"],
        "properties": {
            "apiVersion": type_meta_property("apiVersion"),
            "items": items,
            "kind": type_meta_property("kind"),
            "metadata": with_description(flavour.reference(LIST_META), LIST_METADATA_DESCRIPTION, flavour),
        },
        "x-kubernetes-group-version-kind": gvk_extension(rt, &rt.list_kind),
    })
}

/// The `apiVersion`, `kind` and `metadata` (`ObjectMeta`) of an object's schema.
fn add_object_properties(schema: &mut Value, api_version: Value, kind: Value, flavour: Flavour) {
    let metadata = with_description(
        flavour.reference(OBJECT_META),
        METADATA_DESCRIPTION,
        flavour,
    );
    let properties = properties_of(schema);
    properties.insert("apiVersion".into(), api_version);
    properties.insert("kind".into(), kind);
    properties.insert("metadata".into(), metadata);
}

fn properties_of(schema: &mut Value) -> &mut Map<String, Value> {
    if !schema["properties"].is_object() {
        schema["properties"] = json!({});
    }
    match &mut schema["properties"] {
        Value::Object(map) => map,
        _ => unreachable!("just made an object"),
    }
}

/// Sub-schemas of a schema: properties, items, additionalProperties.
fn children(schema: &mut Value) -> Vec<&mut Value> {
    let Value::Object(map) = schema else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (key, value) in map.iter_mut() {
        match key.as_str() {
            "properties" => {
                if let Value::Object(properties) = value {
                    found.extend(properties.values_mut());
                }
            }
            "items" | "additionalProperties" if value.is_object() => found.push(value),
            _ => {}
        }
    }
    found
}

/// `x-kubernetes-embedded-resource` objects get `apiVersion`, `kind` and `metadata` and
/// require the first two, as apiextensions-apiserver's `addEmbeddedProperties`.
fn add_embedded_properties(schema: &mut Value, flavour: Flavour) {
    if !schema.is_object() {
        return;
    }
    for child in children(schema) {
        add_embedded_properties(child, flavour);
    }
    if flavour == Flavour::V2 && schema["x-kubernetes-preserve-unknown-fields"] == json!(true) {
        return;
    }
    if schema["x-kubernetes-embedded-resource"] != json!(true) {
        return;
    }
    let mut api_version = type_meta_property("apiVersion");
    api_version["description"] = json!(EMBEDDED_API_VERSION_DESCRIPTION);
    let mut kind = type_meta_property("kind");
    kind["description"] = json!(EMBEDDED_KIND_DESCRIPTION);
    add_object_properties(schema, api_version, kind, flavour);
    if !schema["required"].is_array() {
        schema["required"] = json!([]);
    }
    // (`schema` is an object: checked on entry.)
    if let Value::Array(required) = &mut schema["required"] {
        for name in ["kind", "apiVersion"] {
            if !required.iter().any(|r| r == name) {
                required.push(json!(name));
            }
        }
    }
}

/// What OpenAPI v2 clients cope with, as apiextensions-apiserver's `ToStructuralOpenAPIV2`: no
/// junctors; nullable and preserve-unknown-fields values untyped and without sub-schemas.
fn to_v2_structural(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    for junctor in ["allOf", "oneOf", "anyOf", "not"] {
        map.remove(junctor);
    }
    if map.remove("nullable") == Some(json!(true)) {
        for key in ["type", "items", "properties"] {
            map.remove(key);
        }
    }
    let preserve = map.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    if preserve {
        map.remove("items");
        map.remove("properties");
    }
    let typed = |map: &Map<String, Value>, t: &str| map.get("type") == Some(&json!(t));
    if (typed(map, "array") && !map.contains_key("items")) || (preserve && typed(map, "object")) {
        map.remove("type");
    }
    let nullable = |s: &Value| s["nullable"] == json!(true);
    let nullable_properties: Vec<String> = map
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| {
            p.iter()
                .filter(|(_, s)| nullable(s))
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    if let Some(Value::Array(required)) = map.get_mut("required") {
        required.retain(|r| {
            !r.as_str()
                .is_some_and(|r| nullable_properties.iter().any(|n| n == r))
        });
        if required.is_empty() {
            map.remove("required");
        }
    }
    if map.get("additionalProperties").is_some_and(nullable) {
        map.remove("required");
    }
    for child in children(schema) {
        to_v2_structural(child);
    }
}

/// The path of a group-version, `api/v1` or `apis/{group}/{version}`.
fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The paths of `types`' resources, with the operations kubectl looks for.
fn paths(types: &[&ResourceType], flavour: Flavour) -> Map<String, Value> {
    let parameter = |name: &str, place: &str| -> Value {
        let mut p = json!({"name": name, "in": place, "uniqueItems": true});
        if place == "path" {
            p["required"] = json!(true);
        }
        match flavour {
            Flavour::V2 => p["type"] = json!("string"),
            Flavour::V3 => {
                let unique = p
                    .as_object_mut()
                    .and_then(|p| p.remove("uniqueItems"))
                    .unwrap_or(json!(true));
                p["schema"] = json!({"type": "string", "uniqueItems": unique});
            }
        }
        p
    };
    let query = |names: &[&str]| -> Value {
        Value::Array(names.iter().map(|n| parameter(n, "query")).collect())
    };
    let mut paths = Map::new();
    for rt in types {
        let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
        let operation = |action: &str, parameters: Value| {
            json!({"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": action,
                "parameters": parameters, "responses": {"200": {"description": "OK"}}})
        };
        let read = || query(&["pretty", "resourceVersion"]);
        let list = || {
            query(&[
                "pretty",
                "allowWatchBookmarks",
                "continue",
                "fieldSelector",
                "labelSelector",
                "limit",
                "resourceVersion",
                "resourceVersionMatch",
                "sendInitialEvents",
                "timeoutSeconds",
                "watch",
            ])
        };
        let write = || query(&["pretty", "dryRun", "fieldManager", "fieldValidation"]);
        let patch = || {
            query(&[
                "pretty",
                "dryRun",
                "fieldManager",
                "fieldValidation",
                "force",
            ])
        };
        let delete = || {
            query(&[
                "pretty",
                "dryRun",
                "gracePeriodSeconds",
                "propagationPolicy",
            ])
        };
        let prefix = format!("/{}", group_version_path(&rt.group, &rt.version));
        let (base, scope) = if rt.namespaced {
            (
                format!("{prefix}/namespaces/{{namespace}}/{}", rt.plural),
                vec![parameter("namespace", "path")],
            )
        } else {
            (format!("{prefix}/{}", rt.plural), Vec::new())
        };
        paths.insert(
            base.clone(),
            json!({"get": operation("list", list()), "post": operation("post", write()),
                "delete": operation("deletecollection", list()), "parameters": scope}),
        );
        let mut named = scope;
        named.push(parameter("name", "path"));
        let item = json!({"get": operation("get", read()), "put": operation("put", write()),
            "patch": operation("patch", patch()), "delete": operation("delete", delete()),
            "parameters": named});
        if rt.status_subresource {
            paths.insert(format!("{base}/{{name}}/status"), item.clone());
        }
        if rt.scale.is_some() {
            let mut scale = item.clone();
            if let Some(ops) = scale.as_object_mut() {
                ops.remove("delete");
                for op in ops
                    .values_mut()
                    .filter(|op| op.get("x-kubernetes-group-version-kind").is_some())
                {
                    op["x-kubernetes-group-version-kind"] =
                        json!({"group": "autoscaling", "version": "v1", "kind": "Scale"});
                }
            }
            paths.insert(format!("{base}/{{name}}/scale"), scale);
        }
        paths.insert(format!("{base}/{{name}}"), item);
    }
    paths
}

fn info() -> Value {
    json!({"title": "Kubernetes", "version": crate::resources::version_string()})
}

/// One served document: its bytes and the hash clients cache it by.
#[derive(Clone)]
pub struct Document {
    /// The body.
    pub body: Bytes,
    /// A hash of the body, for `ETag` and the v3 root's URLs.
    pub hash: String,
}

impl Document {
    fn new(body: Vec<u8>) -> Self {
        let hash = format!("{:016X}", fnv1a(&body));
        Document {
            body: body.into(),
            hash,
        }
    }
}

/// 64-bit FNV-1a, for cache-busting hashes.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The documents of one state of the served types, each built on first request.
struct Snapshot {
    generation: u64,
    types: Vec<ResourceType>,
    v3: OnceLock<BTreeMap<String, Document>>,
    v2: OnceLock<(Document, Document)>,
}

/// The OpenAPI documents of a server, rebuilt when its served types change.
#[derive(Default)]
pub struct Documents {
    current: Mutex<Option<Arc<Snapshot>>>,
}

impl Documents {
    fn snapshot(&self, registry: &ResourceTypes) -> Arc<Snapshot> {
        let generation = registry.generation();
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        match &*current {
            Some(snapshot) if snapshot.generation == generation => snapshot.clone(),
            _ => {
                let snapshot = Arc::new(Snapshot {
                    generation,
                    // The access reviews (create-only) are not described: kube's definitions
                    // of them are not in the embedded set.
                    types: registry
                        .all()
                        .into_iter()
                        .filter(|rt| !rt.create_only)
                        .collect(),
                    v3: OnceLock::new(),
                    v2: OnceLock::new(),
                });
                *current = Some(snapshot.clone());
                snapshot
            }
        }
    }

    fn v3_documents(&self, registry: &ResourceTypes) -> Arc<Snapshot> {
        let snapshot = self.snapshot(registry);
        snapshot.v3.get_or_init(|| {
            let mut by_group_version: BTreeMap<String, Vec<&ResourceType>> = BTreeMap::new();
            for rt in &snapshot.types {
                by_group_version
                    .entry(group_version_path(&rt.group, &rt.version))
                    .or_default()
                    .push(rt);
            }
            by_group_version
                .into_iter()
                .map(|(path, types)| {
                    let doc = json!({"openapi": "3.0.0", "info": info(),
                        "paths": paths(&types, Flavour::V3),
                        "components": {"schemas": models(&types, Flavour::V3)}});
                    (
                        path,
                        Document::new(serde_json::to_vec(&doc).unwrap_or_default()),
                    )
                })
                .collect()
        });
        snapshot
    }

    /// `/openapi/v3`: where each group-version's document is, with its hash.
    pub fn v3_root(&self, registry: &ResourceTypes) -> Value {
        let snapshot = self.v3_documents(registry);
        let paths: Map<String, Value> = snapshot
            .v3
            .get()
            .into_iter()
            .flatten()
            .map(|(path, doc)| {
                let url = format!("/openapi/v3/{path}?hash={}", doc.hash);
                (path.clone(), json!({"serverRelativeURL": url}))
            })
            .collect();
        json!({"paths": paths})
    }

    /// `/openapi/v3/api/v1`, `/openapi/v3/apis/{group}/{version}`; `None` when not served.
    pub fn v3(&self, registry: &ResourceTypes, group: &str, version: &str) -> Option<Document> {
        let snapshot = self.v3_documents(registry);
        let path = group_version_path(group, version);
        snapshot.v3.get()?.get(&path).cloned()
    }

    /// `/openapi/v2`, as JSON and as gnostic protobuf.
    pub fn v2(&self, registry: &ResourceTypes) -> (Document, Document) {
        let snapshot = self.snapshot(registry);
        snapshot
            .v2
            .get_or_init(|| {
                let types: Vec<&ResourceType> = snapshot.types.iter().collect();
                let doc = json!({"swagger": "2.0", "info": info(),
                    "paths": paths(&types, Flavour::V2),
                    "definitions": models(&types, Flavour::V2)});
                let proto = gnostic::encode(&doc);
                (
                    Document::new(serde_json::to_vec(&doc).unwrap_or_default()),
                    Document::new(proto),
                )
            })
            .clone()
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
