//! The OpenAPI documents clients read, built as kube-apiserver builds them:
//!
//! - `/openapi/v3`: a root listing one document per served group-version, each with the paths
//!   of its resources (operations carry `x-kubernetes-group-version-kind` and the query
//!   parameters kubectl checks for, such as `fieldValidation`) and the schemas of its kinds and
//!   of everything they reference. `kubectl explain`, kubectl's check for server-side field
//!   validation and its client-side `apply` (patch strategies of built-in kinds) read these.
//! - `/openapi/v2`: one Swagger 2.0 document of every served kind, as JSON or as gnostic's
//!   protobuf (`gnostic`), which kubectl asks for when it validates a `List` file.
//!
//! Built-in kinds' schemas are kube-apiserver's own definitions (`kubernetes-definitions.json`,
//! extracted from the Kubernetes release's published `swagger.json` by
//! `tools/openapi-definitions`; Apache-2.0): descriptions, list types and patch strategies as the
//! real server publishes them. A CRD's kinds get the schema of its version, completed as
//! apiextensions-apiserver completes it (`metadata`, `apiVersion`, `kind`, embedded resources,
//! a list kind) and, for v2, reduced to what v2 clients cope with (`ToStructuralOpenAPIV2`).
//!
//! Documents are built on first request and kept until the served types change
//! ([`Registry::generation`]).

mod gnostic;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};

use axum::body::Bytes;
use rustc_hash::FxHashMap;
use serde_json::{Map, Value, json};

use crate::resources::{Registry, ResourceType};

/// The media type of the v2 document in gnostic's protobuf, as served.
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// The deprecated spelling of [`V2_PROTOBUF`], which client-go still asks for (and which Go's
/// `mime` package cannot parse as a response's type: answers carry [`V2_PROTOBUF`]).
pub const V2_PROTOBUF_DEPRECATED: &str =
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The built-in definitions (see the module documentation).
const DEFINITIONS: &str = include_str!("kubernetes-definitions.json");

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

/// kube-apiserver's definitions of the built-in kinds, indexed by the kinds they describe.
struct Builtin {
    definitions: &'static Map<String, Value>,
    /// The same definitions by name, with a fast hash: `$ref`s are followed for every field of
    /// every write, and neither the sorted map (long shared prefixes, `io.k8s.api.core.v1.`) nor
    /// SipHash is cheap on names this long.
    by_name: &'static FxHashMap<&'static str, Definition>,
    /// Every schema node of the definitions, by address, with the definition its `$ref` names
    /// (`None`: it references none) and whether it is an atomic map: field ownership and the
    /// field check follow references for every field of every write, and a node's address is
    /// cheaper to hash than its `$ref` is to find and the name to hash. The definitions are
    /// leaked, so no other value can ever have one of these addresses.
    refs: FxHashMap<usize, Node>,
    /// How the items of each list node (`type: array`) of the definitions are identified, worked
    /// out once ([`list_type`] reads four extensions of a node by name otherwise).
    lists: FxHashMap<usize, ListType<'static>>,
    /// Definitions by the kind they describe: kind → (group, version, definition name), looked
    /// up on every write without building a key.
    by_kind: FxHashMap<&'static str, Vec<(&'static str, &'static str, &'static str)>>,
}

fn builtin() -> &'static Builtin {
    static BUILTIN: OnceLock<Builtin> = OnceLock::new();
    BUILTIN.get_or_init(|| {
        // The file is part of the source, checked by the tests: it always parses.
        let definitions: Map<String, Value> = serde_json::from_str(DEFINITIONS).unwrap_or_default();
        // Parsed once and kept for the life of the process, so references into it are 'static.
        let definitions: &'static Map<String, Value> = Box::leak(Box::new(definitions));
        let by_name: &'static FxHashMap<&'static str, Definition> = Box::leak(Box::new(
            definitions
                .iter()
                .map(|(name, schema)| {
                    let members = OnceLock::new();
                    (name.as_str(), Definition { schema, members })
                })
                .collect(),
        ));
        let (mut refs, mut lists) = (FxHashMap::default(), FxHashMap::default());
        for schema in definitions.values() {
            index_nodes(schema, by_name, &mut refs, &mut lists);
        }
        let mut by_kind: FxHashMap<&'static str, Vec<_>> = FxHashMap::default();
        for (name, schema) in definitions {
            for gvk in schema["x-kubernetes-group-version-kind"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let part = |key: &str| gvk.get(key).and_then(Value::as_str).unwrap_or_default();
                by_kind.entry(part("kind")).or_default().push((
                    part("group"),
                    part("version"),
                    name.as_str(),
                ));
            }
        }
        Builtin {
            definitions,
            by_name,
            refs,
            lists,
            by_kind,
        }
    })
}

/// kube-apiserver's definition of a built-in kind, in Swagger 2.0 form (`$ref`s point into
/// `#/definitions/`; follow them with [`resolve`]): where strategic merge and server-side apply
/// find each field's patch strategy, merge key and list type.
pub fn builtin_kind(group: &str, version: &str, kind: &str) -> Option<&'static Value> {
    let builtin = builtin();
    builtin
        .model(group, version, kind)
        .and_then(|name| builtin.by_name.get(name).map(|d| d.schema))
}

/// One of kube-apiserver's definitions, by name (`io.k8s.api.core.v1.PodSpec`).
pub fn builtin_definition(name: &str) -> Option<&'static Value> {
    builtin().by_name.get(name).map(|d| d.schema)
}

/// `schema`, or the built-in definition it references (`$ref`).
pub fn resolve(schema: &Value) -> &Value {
    referenced(schema).map_or(schema, |d| d.schema)
}

/// The address of a schema node, its key in [`Builtin::refs`].
fn address(node: &Value) -> usize {
    std::ptr::from_ref(node) as usize
}

/// What the write path asks of one object node of the built-in definitions, by address.
#[derive(Clone, Copy)]
struct Node {
    /// The definition its `$ref` names.
    definition: Option<&'static Definition>,
    /// `x-kubernetes-map-type: atomic` on the node itself.
    atomic: bool,
}

/// Every object node under `node` into `refs`, with the definition its `$ref` names, and every
/// list node's type into `lists`.
fn index_nodes(
    node: &'static Value,
    by_name: &'static FxHashMap<&'static str, Definition>,
    refs: &mut FxHashMap<usize, Node>,
    lists: &mut FxHashMap<usize, ListType<'static>>,
) {
    match node {
        Value::Object(map) => {
            let facts = Node {
                definition: referenced_in(node, by_name),
                atomic: atomic_map(node),
            };
            refs.insert(address(node), facts);
            if map.get("type").and_then(Value::as_str) == Some("array") {
                lists.insert(address(node), list_type_of(node));
            }
            for child in map.values() {
                index_nodes(child, by_name, refs, lists);
            }
        }
        Value::Array(items) => {
            for item in items {
                index_nodes(item, by_name, refs, lists);
            }
        }
        _ => {}
    }
}

/// Whether a schema node says `x-kubernetes-map-type: atomic` (the map is one value).
fn atomic_map(node: &Value) -> bool {
    node.get("x-kubernetes-map-type")
        .is_some_and(|t| t == "atomic")
}

/// How a list's items are identified, as structured-merge-diff reads a schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType<'s> {
    /// Items are maps identified by these keys.
    Map(Cow<'s, [&'s str]>),
    /// Items are scalars, each a member.
    Set,
    /// The list is one value.
    Atomic,
}

/// The type of the list `node` describes: `x-kubernetes-list-type` (and its map keys); lacking
/// one, the patch strategy (`merge` with a key is a map, without one a set); else atomic.
/// Built-in definitions' list nodes are read once per process.
pub fn list_type(node: &Value) -> ListType<'_> {
    match builtin().lists.get(&address(node)) {
        Some(ListType::Map(keys)) => ListType::Map(Cow::Borrowed(keys.as_ref())),
        Some(ListType::Set) => ListType::Set,
        Some(ListType::Atomic) => ListType::Atomic,
        None => list_type_of(node),
    }
}

fn list_type_of(node: &Value) -> ListType<'_> {
    let text = |key: &str| node.get(key).and_then(Value::as_str);
    match text("x-kubernetes-list-type") {
        Some("map") => ListType::Map(Cow::Owned(
            node.get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect(),
        )),
        Some("set") => ListType::Set,
        Some(_) => ListType::Atomic,
        None => {
            let merge = text("x-kubernetes-patch-strategy")
                .is_some_and(|s| s.split(',').any(|s| s.trim() == "merge"));
            match text("x-kubernetes-patch-merge-key") {
                Some(key) if merge => ListType::Map(Cow::Owned(vec![key])),
                None if merge => ListType::Set,
                _ => ListType::Atomic,
            }
        }
    }
}

/// The definition of `by_name` that `schema`'s `$ref` names, if it has one.
fn referenced_in(
    schema: &Value,
    by_name: &'static FxHashMap<&'static str, Definition>,
) -> Option<&'static Definition> {
    schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/definitions/"))
        .and_then(|name| by_name.get(name))
}

/// The built-in definition `schema` references (`$ref`), if it references one: found by the
/// node's address when it is one of the built-in definitions' nodes, else (a custom resource's
/// schema, a copy) by its `$ref`.
fn referenced(schema: &Value) -> Option<&'static Definition> {
    Node::of(schema).definition
}

impl Node {
    /// What `schema` says: looked up by address for a node of the built-in definitions, read
    /// from the node otherwise.
    fn of(schema: &Value) -> Node {
        let builtin = builtin();
        match builtin.refs.get(&address(schema)) {
            Some(found) => *found,
            None => Node {
                definition: referenced_in(schema, builtin.by_name),
                atomic: atomic_map(schema),
            },
        }
    }
}

/// The members of the built-in definition `schema` references (as [`referenced_members`]), and
/// whether `schema` itself says its map is atomic: one lookup for a built-in definition's node.
pub fn members_and_atomic(schema: &Value) -> (Option<&'static Members>, bool) {
    let node = Node::of(schema);
    (node.definition.map(Definition::members), node.atomic)
}

/// A built-in definition, and its members indexed on first use.
struct Definition {
    schema: &'static Value,
    members: OnceLock<Members>,
}

impl Definition {
    /// Its members, indexed on first use.
    fn members(&'static self) -> &'static Members {
        self.members.get_or_init(|| Members::of(self.schema))
    }
}

/// The members of a built-in struct or map definition, indexed once for the life of the
/// process: field ownership looks a definition's fields up for every field of every write, and
/// a sorted map of 40 properties (a `PodSpec`) costs several string comparisons per lookup.
#[derive(Debug)]
pub struct Members {
    properties: FxHashMap<&'static str, &'static Value>,
    /// The schema of a map's values (`additionalProperties`, when an object).
    pub additional: Option<&'static Value>,
    /// `x-kubernetes-map-type: atomic`: the whole value is one field.
    pub atomic: bool,
}

impl Members {
    /// The schema of `field`: its property, else the map's values.
    pub fn get(&self, field: &str) -> Option<&'static Value> {
        self.properties.get(field).copied().or(self.additional)
    }

    /// Whether the definition declares no field and no map values (a free-form object).
    pub fn declares_nothing(&self) -> bool {
        self.properties.is_empty() && self.additional.is_none()
    }

    fn of(schema: &'static Value) -> Self {
        Members {
            properties: schema
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(name, property)| (name.as_str(), property))
                .collect(),
            additional: schema.get("additionalProperties").filter(|a| a.is_object()),
            atomic: atomic_map(schema),
        }
    }
}

/// The members of the built-in definition `schema` references (`$ref`), indexed.
pub fn referenced_members(schema: &Value) -> Option<&'static Members> {
    referenced(schema).map(Definition::members)
}

impl Builtin {
    fn model(&self, group: &str, version: &str, kind: &str) -> Option<&'static str> {
        self.by_kind
            .get(kind)?
            .iter()
            .find(|(g, v, _)| *g == group && *v == version)
            .map(|(_, _, name)| *name)
    }

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
    fn snapshot(&self, registry: &Registry) -> Arc<Snapshot> {
        let generation = registry.generation();
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        match &*current {
            Some(snapshot) if snapshot.generation == generation => snapshot.clone(),
            _ => {
                let snapshot = Arc::new(Snapshot {
                    generation,
                    types: registry.all(),
                    v3: OnceLock::new(),
                    v2: OnceLock::new(),
                });
                *current = Some(snapshot.clone());
                snapshot
            }
        }
    }

    fn v3_documents(&self, registry: &Registry) -> Arc<Snapshot> {
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
    pub fn v3_root(&self, registry: &Registry) -> Value {
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
    pub fn v3(&self, registry: &Registry, group: &str, version: &str) -> Option<Document> {
        let snapshot = self.v3_documents(registry);
        let path = group_version_path(group, version);
        snapshot.v3.get()?.get(&path).cloned()
    }

    /// `/openapi/v2`, as JSON and as gnostic protobuf.
    pub fn v2(&self, registry: &Registry) -> (Document, Document) {
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
mod tests;
