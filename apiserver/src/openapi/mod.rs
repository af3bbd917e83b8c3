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
//! (`ResourceTypes::generation`).

#[cfg(feature = "server")]
mod documents;
#[cfg(feature = "server")]
mod gnostic;

use std::borrow::Cow;
use std::sync::OnceLock;

use rustc_hash::FxHashMap;
use serde_json::{Map, Value};

/// The built-in definitions (see the module documentation).
const DEFINITIONS: &str = include_str!("kubernetes-definitions.json");

/// kube-apiserver's definitions of the built-in kinds, indexed by the kinds they describe.
struct Builtin {
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
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
}

#[cfg(feature = "server")]
pub use documents::{Document, Documents, V2_PROTOBUF, V2_PROTOBUF_DEPRECATED};
