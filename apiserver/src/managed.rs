//! Field management: `metadata.managedFields` and server-side apply on field sets, after
//! kube-apiserver's structured-merge-diff.
//!
//! Every write records which manager (`?fieldManager=`, else the client's User-Agent product)
//! set which fields, with the operation (`Apply` or `Update`) and the time, in the `FieldsV1`
//! form (`{"f:spec": {"f:replicas": {}}}`; keyed list items as `k:{"name":"web"}`, set members as
//! `v:"value"`, `.` for an item itself). An update takes over the fields it changes; an apply
//! owns exactly the fields of its configuration: what it no longer applies is removed unless
//! another manager owns it, and changing a field another manager owns is a 409 conflict naming
//! the fields and managers, unless forced (`force=true`), which takes the fields over.
//!
//! Lists follow their type: built-in kinds' keyed lists (`containers` by `name`, …, as strategic
//! merge keys them) are maps, `finalizers` is a set, others are atomic; for custom resources,
//! `x-kubernetes-list-type`/`-list-map-keys` of the CRD schema decide (atomic by default).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde_json::{Map, Value, json};

use crate::openapi::{self, ListType};
use krec_core::error::ApiError;
use krec_core::json::Pointer;

/// A set of fields: the members under each path element, and whether the node itself is a
/// member (`.`, for list items and empty objects).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    children: BTreeMap<String, FieldSet>,
    itself: bool,
}

impl FieldSet {
    /// Whether the set has no member.
    pub fn is_empty(&self) -> bool {
        !self.itself && self.children.values().all(FieldSet::is_empty)
    }

    /// The set from its `FieldsV1` JSON (anything but an object is a leaf).
    pub fn from_fields_v1(value: &Value) -> Self {
        match value.as_object() {
            Some(map) => Self::from_fields_v1_map(map),
            None => FieldSet {
                itself: true,
                ..Default::default()
            },
        }
    }

    /// The set from its `FieldsV1` JSON object's members.
    fn from_fields_v1_map(map: &Map<String, Value>) -> Self {
        let mut set = FieldSet::default();
        for (key, child) in map {
            if key == "." {
                set.itself = true;
            } else {
                set.children
                    .insert(key.clone(), FieldSet::from_fields_v1(child));
            }
        }
        // `{}`: a leaf.
        set.itself |= set.children.is_empty();
        set
    }

    /// The `FieldsV1` JSON of the set.
    pub fn to_fields_v1(&self) -> Value {
        self.fields_v1().unwrap_or_else(|| json!({}))
    }

    /// The `FieldsV1` JSON of the set, `None` when it has no member: one pass (asking each
    /// child whether it is empty first would walk every subtree once per level).
    fn fields_v1(&self) -> Option<Value> {
        let mut map = Map::new();
        for (key, child) in &self.children {
            if let Some(value) = child.fields_v1() {
                map.insert(key.clone(), value);
            }
        }
        if map.is_empty() {
            return self.itself.then(|| json!({}));
        }
        if self.itself {
            map.insert(".".into(), json!({}));
        }
        Some(Value::Object(map))
    }

    /// The leaf paths of the set, each a list of path elements.
    pub fn paths(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.itself || (self.children.is_empty() && !prefix.is_empty()) {
            out.push(prefix.clone());
        }
        for (key, child) in &self.children {
            prefix.push(key.clone());
            child.collect(prefix, out);
            prefix.pop();
        }
    }

    /// Add a path.
    pub fn insert(&mut self, path: &[String]) {
        match path.split_first() {
            None => self.itself = true,
            Some((first, rest)) => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// Whether the set has exactly this path as a member.
    pub fn contains(&self, path: &[String]) -> bool {
        match path.split_first() {
            None => self.itself || self.children.is_empty(),
            Some((first, rest)) => self.children.get(first).is_some_and(|c| c.contains(rest)),
        }
    }

    #[cfg(test)]
    /// Every member of `other` removed, with what is under it.
    pub fn subtract(&mut self, other: &FieldSet) {
        for (key, theirs) in &other.children {
            if theirs.itself || theirs.children.is_empty() {
                self.children.remove(key);
            } else if let Some(mine) = self.children.get_mut(key) {
                mine.subtract(theirs);
                if mine.is_empty() {
                    self.children.remove(key);
                }
            }
        }
    }

    /// Every member of `other` added.
    pub fn union(&mut self, other: &FieldSet) {
        self.itself |= other.itself;
        for (key, child) in &other.children {
            self.children.entry(key.clone()).or_default().union(child);
        }
    }
}

/// Where list types come from, as structured-merge-diff reads them: the kind's schema
/// (kube-apiserver's definition of a built-in kind, a CRD version's schema), its `metadata`
/// being `ObjectMeta` for both.
#[derive(Clone, Copy, Debug)]
pub struct Schema<'a> {
    root: Option<&'a Value>,
}

impl<'a> Schema<'a> {
    /// The schema of `rt`'s objects.
    pub fn of(rt: &'a crate::resources::ResourceType) -> Self {
        match &rt.schema {
            Some(schema) => Schema { root: Some(schema) },
            None => Self::builtin(&rt.group, &rt.version, &rt.kind),
        }
    }

    /// The schema of a built-in kind's objects.
    pub fn builtin(group: &str, version: &str, kind: &str) -> Self {
        Schema {
            root: openapi::builtin_kind(group, version, kind),
        }
    }

    /// A list's type: `x-kubernetes-list-type` (and its map keys); lacking one, the patch
    /// strategy (`merge` with a key is a map, without one a set); else atomic.
    fn list_type<'s>(&self, schema: Option<&'s Value>) -> ListType<'s> {
        schema.map_or(ListType::Atomic, openapi::list_type)
    }

    /// The schema of `field` under `schema` (a property, or the values of a map).
    fn child<'s>(&self, schema: Option<&'s Value>, field: &str) -> Option<&'s Value> {
        let schema = openapi::resolve(schema?);
        schema
            .get("properties")
            .and_then(|p| p.get(field))
            .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
    }

    /// A map or struct's schema, resolved once for all its fields (a `$ref` followed and the
    /// properties found once, not once per field).
    fn fields<'s>(&self, schema: Option<&'s Value>) -> Fields<'s> {
        let Some(node) = schema else {
            return Fields::default();
        };
        let (members, atomic_here) = openapi::members_and_atomic(node);
        if let Some(members) = members {
            return Fields {
                members: Some(members),
                atomic: members.atomic || atomic_here,
                ..Fields::default()
            };
        }
        // No built-in definition referenced: the node is the schema (a custom resource's, or
        // one written inline).
        Fields {
            members: None,
            properties: node.get("properties").and_then(Value::as_object),
            additional: node.get("additionalProperties").filter(|a| a.is_object()),
            atomic: atomic_here,
        }
    }

    /// The schema of a list's items.
    fn items<'s>(&self, schema: Option<&'s Value>) -> Option<&'s Value> {
        schema.and_then(|s| s.get("items"))
    }

    fn root(&self) -> Option<&'a Value> {
        self.root
    }

    /// `ObjectMeta`, the schema of every kind's `metadata`.
    fn metadata(&self) -> Option<&'static Value> {
        openapi::builtin_definition("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
    }
}

/// A map or struct's schema, resolved: [`Schema::fields`].
#[derive(Clone, Copy, Default)]
struct Fields<'s> {
    /// A built-in definition's members, indexed once (the other fields unused).
    members: Option<&'static openapi::Members>,
    properties: Option<&'s Map<String, Value>>,
    additional: Option<&'s Value>,
    /// `x-kubernetes-map-type: atomic`: the map is one value.
    atomic: bool,
}

impl<'s> Fields<'s> {
    /// The schema of `field` (a property, or the values of a map), as [`Schema::child`].
    fn get(&self, field: &str) -> Option<&'s Value> {
        if let Some(members) = self.members {
            return members.get(field);
        }
        self.properties
            .and_then(|p| p.get(field))
            .or(self.additional)
    }
}

/// The path element of a field: `f:name` (without `format!`'s machinery: this runs for every
/// field of every write).
fn field_key(name: &str) -> String {
    let mut key = String::with_capacity(name.len() + 2);
    key.push_str("f:");
    key.push_str(name);
    key
}

/// The metadata fields the server owns, never part of a field set.
const SERVER_FIELDS: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// The path element of a keyed list item: `k:{"name":"web"}` (keys sorted, as JSON). A key
/// field the item leaves out takes its default, as structured-merge-diff fills it: the item
/// schema's `default`, or, for the one defaulted key of the built-in kinds (ports' `protocol`,
/// whose default kube-apiserver's v2 definitions do not carry), `TCP`.
///
/// Written straight as text (no map of the key fields built first): this runs for every item
/// of every keyed list of every write, twice per item in a merge.
fn item_key(item: &Value, keys: &[&str], item_schema: Option<&Value>) -> String {
    static TCP: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| Value::from("TCP"));
    let schema = item_schema.map(openapi::resolve);
    let default = |key: &str| -> Option<&Value> {
        let declared = schema
            .and_then(|s| s.get("properties"))
            .and_then(|p| p.get(key))
            .and_then(|p| p.get("default"));
        declared.or((key == "protocol").then_some(&*TCP))
    };
    let mut fields: Vec<(&str, &Value)> = keys
        .iter()
        .filter_map(|&key| {
            let value = item.get(key).or_else(|| default(key))?;
            Some((key, value))
        })
        .collect();
    fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
    fields.dedup_by(|a, b| a.0 == b.0);
    let mut text = String::with_capacity(16 * fields.len() + 4);
    text.push_str("k:{");
    for (i, (key, value)) in fields.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        push_key(&mut text, key);
        text.push(':');
        push_json(&mut text, value);
    }
    text.push('}');
    text
}

/// Append `key` as a JSON string: as it is when it needs no escape (the key fields of every
/// schema), else through the JSON writer.
fn push_key(text: &mut String, key: &str) {
    if key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        text.push('"');
        text.push_str(key);
        text.push('"');
    } else {
        push_json(text, &Value::from(key));
    }
}

/// Append `value` as compact JSON (as its `Display` writes it).
fn push_json(text: &mut String, value: &Value) {
    use std::fmt::Write as _;
    // Writing to a String cannot fail.
    let _ = write!(text, "{value}");
}

#[cfg(test)]
/// The fields an object sets (its leaves; apiVersion, kind and the server's metadata left out;
/// `status` left out when `skip_status`).
pub fn fields_of(object: &Value, schema: Schema<'_>, skip_status: bool) -> FieldSet {
    let mut set = FieldSet::default();
    if let Some(map) = object.as_object() {
        for (key, value) in map {
            if key == "apiVersion" || key == "kind" || (skip_status && key == "status") {
                continue;
            }
            let child_schema = schema.child(schema.root(), key);
            let mut child = FieldSet::default();
            if key == "metadata" {
                if let Some(meta) = value.as_object() {
                    for (field, v) in meta
                        .iter()
                        .filter(|(f, _)| !SERVER_FIELDS.contains(&f.as_str()))
                    {
                        let mut grandchild = FieldSet::default();
                        let node = schema.child(schema.metadata(), field);
                        walk(v, node, schema, &mut grandchild);
                        child.children.insert(field_key(field), grandchild);
                    }
                }
            } else {
                walk(value, child_schema, schema, &mut child);
            }
            set.children.insert(field_key(key), child);
        }
    }
    set
}

/// `fields_of(…).to_fields_v1()` in one walk, written
/// straight as `FieldsV1` JSON text, compact and with its keys in order, as stored objects keep
/// it (what a create records: every field the new object sets). No JSON map is built: the
/// object's own maps are already in key order, and `f:` keeps that order.
pub fn fields_v1_of(object: &Value, schema: Schema<'_>, skip_status: bool) -> String {
    let (root, meta) = (
        schema.fields(schema.root()),
        schema.fields(schema.metadata()),
    );
    let mut out = String::with_capacity(1024);
    out.push('{');
    let mut first = true;
    for (key, value) in object.as_object().into_iter().flatten() {
        if key == "apiVersion" || key == "kind" || (skip_status && key == "status") {
            continue;
        }
        let mark = out.len();
        let was_first = first;
        push_member_key(&mut out, &mut first, "f:", key);
        let written = if key == "metadata" {
            out.push('{');
            let mut none = true;
            for (field, v) in value
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(f, _)| !SERVER_FIELDS.contains(&f.as_str()))
            {
                let inner = out.len();
                let was_none = none;
                push_member_key(&mut out, &mut none, "f:", field);
                if !write_v1(v, meta.get(field), schema, &mut out) {
                    out.truncate(inner);
                    none = was_none;
                }
            }
            out.push('}');
            !none
        } else {
            write_v1(value, root.get(key), schema, &mut out)
        };
        if !written {
            out.truncate(mark);
            first = was_first;
        }
    }
    out.push('}');
    out
}

/// Append `,"<prefix><key>":` (no comma before the first member).
fn push_member_key(out: &mut String, first: &mut bool, prefix: &str, key: &str) {
    if !std::mem::take(first) {
        out.push(',');
    }
    out.push('"');
    out.push_str(prefix);
    push_escaped(out, key);
    out.push_str("\":");
}

/// Append `text` escaped as the inside of a JSON string (as `serde_json` escapes it).
fn push_escaped(out: &mut String, text: &str) {
    if krec_core::json::first_escape(text.as_bytes()).is_none() {
        out.push_str(text);
        return;
    }
    // Few keys need an escape (`k:{"name":"web"}`): the JSON writer escapes them.
    let mut quoted = Vec::with_capacity(text.len() + 8);
    krec_core::json::write_str(&mut quoted, text);
    let inside = quoted.get(1..quoted.len() - 1).unwrap_or_default();
    // The writer only appends valid UTF-8 (the text's own runs, ASCII escapes).
    out.push_str(std::str::from_utf8(inside).unwrap_or_default());
}

/// [`walk`] written as `FieldsV1` text onto `out`; `false` (with `out` to be cut back by the
/// caller) where the set would have no member (an empty keyed list or set).
fn write_v1(value: &Value, node: Option<&Value>, schema: Schema<'_>, out: &mut String) -> bool {
    match value {
        Value::Object(map) if !map.is_empty() => {
            let fields = schema.fields(node);
            if fields.atomic {
                out.push_str("{}");
                return true;
            }
            let start = out.len();
            out.push('{');
            let mut first = true;
            for (key, child) in map {
                let mark = out.len();
                let was_first = first;
                push_member_key(out, &mut first, "f:", key);
                if !write_v1(child, fields.get(key), schema, out) {
                    out.truncate(mark);
                    first = was_first;
                }
            }
            out.push('}');
            if first {
                out.truncate(start);
            }
            !first
        }
        Value::Array(items) => match schema.list_type(node) {
            ListType::Map(keys) => {
                let item_schema = schema.items(node);
                let mut members: Vec<(String, String)> = Vec::with_capacity(items.len());
                for item in items {
                    // An item is a member itself, `.` before its fields.
                    let mut fields = String::new();
                    let body =
                        if write_v1(item, item_schema, schema, &mut fields) && fields.len() > 2 {
                            // `{".":{},` then the fields without their opening brace.
                            let mut body = String::with_capacity(fields.len() + 7);
                            body.push_str("{\".\":{},");
                            body.push_str(&fields[1..]);
                            body
                        } else {
                            "{}".to_owned()
                        };
                    members.push((item_key(item, &keys, item_schema), body));
                }
                write_members(out, members)
            }
            ListType::Set => {
                let members = items
                    .iter()
                    .map(|item| (format!("v:{item}"), "{}".to_owned()))
                    .collect();
                write_members(out, members)
            }
            ListType::Atomic => {
                out.push_str("{}");
                true
            }
        },
        _ => {
            out.push_str("{}");
            true
        }
    }
}

/// Append `{"key":body,…}` in key order, a repeated key taking its last body (as a map
/// insert); `false`, nothing written, when there is no member.
fn write_members(out: &mut String, mut members: Vec<(String, String)>) -> bool {
    if members.is_empty() {
        return false;
    }
    members.sort_by(|a, b| a.0.cmp(&b.0));
    out.push('{');
    let mut first = true;
    for (i, (key, body)) in members.iter().enumerate() {
        if members.get(i + 1).is_some_and(|next| next.0 == *key) {
            continue;
        }
        push_member_key(out, &mut first, "", key);
        out.push_str(body);
    }
    out.push('}');
    true
}

fn walk(value: &Value, node: Option<&Value>, schema: Schema<'_>, set: &mut FieldSet) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            let fields = schema.fields(node);
            if fields.atomic {
                set.itself = true;
                return;
            }
            for (key, child) in map {
                let mut sub = FieldSet::default();
                walk(child, fields.get(key), schema, &mut sub);
                set.children.insert(field_key(key), sub);
            }
        }
        Value::Array(items) => match schema.list_type(node) {
            ListType::Map(keys) => {
                let item_schema = schema.items(node);
                for item in items {
                    let mut sub = FieldSet {
                        itself: true,
                        ..Default::default()
                    };
                    walk(item, item_schema, schema, &mut sub);
                    set.children.insert(item_key(item, &keys, item_schema), sub);
                }
            }
            ListType::Set => {
                for item in items {
                    let member = FieldSet {
                        itself: true,
                        ..Default::default()
                    };
                    set.children.insert(format!("v:{item}"), member);
                }
            }
            ListType::Atomic => set.itself = true,
        },
        _ => set.itself = true,
    }
}

/// The leaves that differ between `old` and `new` (changed or added in `new`), and those of
/// `old` that `new` no longer has: one walk over both objects together.
pub fn diff(
    old: &Value,
    new: &Value,
    schema: Schema<'_>,
    skip_status: bool,
) -> (FieldSet, FieldSet) {
    let mut changed = FieldSet::default();
    let mut removed = FieldSet::default();
    static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    fn fields(v: Option<&Value>) -> &Map<String, Value> {
        v.and_then(Value::as_object).unwrap_or(&EMPTY)
    }
    let (old_map, new_map) = (fields(Some(old)), fields(Some(new)));
    let keys: BTreeSet<&String> = old_map.keys().chain(new_map.keys()).collect();
    for key in keys {
        if key == "apiVersion" || key == "kind" || (skip_status && key == "status") {
            continue;
        }
        let (o, n) = (old_map.get(key), new_map.get(key));
        let (mut c, mut r) = (FieldSet::default(), FieldSet::default());
        if key == "metadata" {
            let (om, nm) = (fields(o), fields(n));
            let meta_keys: BTreeSet<&String> = om.keys().chain(nm.keys()).collect();
            for field in meta_keys
                .into_iter()
                .filter(|f| !SERVER_FIELDS.contains(&f.as_str()))
            {
                let node = schema.child(schema.metadata(), field);
                let (mut cc, mut rr) = (FieldSet::default(), FieldSet::default());
                diff_value(om.get(field), nm.get(field), node, schema, &mut cc, &mut rr);
                adopt(&mut c, || field_key(field), cc);
                adopt(&mut r, || field_key(field), rr);
            }
        } else {
            let node = schema.child(schema.root(), key);
            diff_value(o, n, node, schema, &mut c, &mut r);
        }
        adopt(&mut changed, || field_key(key), c);
        adopt(&mut removed, || field_key(key), r);
    }
    (changed, removed)
}

/// `child` under `key`, unless it has no member (the sets [`diff`] builds hold no empty
/// subsets, so a shallow look suffices).
fn adopt(set: &mut FieldSet, key: impl FnOnce() -> String, child: FieldSet) {
    if child.itself || !child.children.is_empty() {
        set.children.insert(key(), child);
    }
}

/// [`diff`] below the top: `old` and `new` are the values at one path (`None`: absent).
fn diff_value(
    old: Option<&Value>,
    new: Option<&Value>,
    node: Option<&Value>,
    schema: Schema<'_>,
    changed: &mut FieldSet,
    removed: &mut FieldSet,
) {
    let (old, new) = match (old, new) {
        (None, None) => return,
        (Some(old), None) => return walk(old, node, schema, removed),
        (None, Some(new)) => return walk(new, node, schema, changed),
        // Equal values (most of an object, on most writes) differ nowhere.
        (Some(old), Some(new)) if old == new => return,
        (Some(old), Some(new)) => (old, new),
    };
    let fields = match (old, new) {
        (Value::Object(o), Value::Object(n)) if !o.is_empty() && !n.is_empty() => {
            schema.fields(node)
        }
        _ => Fields::default(),
    };
    match (old, new) {
        (Value::Object(o), Value::Object(n))
            if !o.is_empty() && !n.is_empty() && !fields.atomic =>
        {
            let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
            for key in keys {
                let (mut c, mut r) = (FieldSet::default(), FieldSet::default());
                let child = fields.get(key);
                diff_value(o.get(key), n.get(key), child, schema, &mut c, &mut r);
                adopt(changed, || field_key(key), c);
                adopt(removed, || field_key(key), r);
            }
        }
        (Value::Array(o), Value::Array(n)) => match schema.list_type(node) {
            ListType::Map(keys) => {
                let item_schema = schema.items(node);
                let key_of = |item: &Value| item_key(item, &keys, item_schema);
                let old_items: HashMap<String, &Value> =
                    o.iter().map(|item| (key_of(item), item)).collect();
                let mut new_keys = HashSet::new();
                for item in n {
                    let key = key_of(item);
                    match old_items.get(&key) {
                        Some(before) => {
                            let (mut c, mut r) = (FieldSet::default(), FieldSet::default());
                            let (before, after) = (Some(*before), Some(item));
                            diff_value(before, after, item_schema, schema, &mut c, &mut r);
                            adopt(changed, || key.clone(), c);
                            adopt(removed, || key.clone(), r);
                        }
                        None => {
                            let mut added = FieldSet {
                                itself: true,
                                ..Default::default()
                            };
                            walk(item, item_schema, schema, &mut added);
                            changed.children.insert(key.clone(), added);
                        }
                    }
                    new_keys.insert(key);
                }
                for (key, before) in old_items {
                    if !new_keys.contains(&key) {
                        let mut gone = FieldSet {
                            itself: true,
                            ..Default::default()
                        };
                        walk(before, item_schema, schema, &mut gone);
                        removed.children.insert(key, gone);
                    }
                }
            }
            ListType::Set => {
                let leaf = || FieldSet {
                    itself: true,
                    ..Default::default()
                };
                for member in n.iter().filter(|m| !o.contains(m)) {
                    changed.children.insert(format!("v:{member}"), leaf());
                }
                for member in o.iter().filter(|m| !n.contains(m)) {
                    removed.children.insert(format!("v:{member}"), leaf());
                }
            }
            ListType::Atomic => {
                if old != new {
                    changed.itself = true;
                }
            }
        },
        _ => {
            // Leaves (scalars, empty or atomic maps, atomic lists), or a value whose shape
            // changed: the old leaves the new value does not have go, the new ones are changed.
            if old == new {
                return;
            }
            let mut before = FieldSet::default();
            walk(old, node, schema, &mut before);
            let mut after = FieldSet::default();
            walk(new, node, schema, &mut after);
            for path in before.paths() {
                if !after.contains(&path) {
                    removed.insert(&path);
                }
            }
            changed.union(&after);
        }
    }
}

fn step<'a>(at: &'a Value, element: &str) -> Option<&'a Value> {
    if let Some(field) = element.strip_prefix("f:") {
        at.get(field)
    } else if let Some(key) = element.strip_prefix("k:") {
        let key: Value = serde_json::from_str(key).ok()?;
        let key = key.as_object()?;
        at.as_array()?
            .iter()
            .find(|item| key.iter().all(|(k, v)| item.get(k) == Some(v)))
    } else if let Some(member) = element.strip_prefix("v:") {
        let member: Value = serde_json::from_str(member).ok()?;
        at.as_array()?.iter().find(|item| **item == member)
    } else {
        None
    }
}

/// Remove the field at `path` from `object` (an item from its list, a member from its set).
fn remove_at(object: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = object;
    for element in parents {
        let next = if let Some(field) = element.strip_prefix("f:") {
            at.get_mut(field)
        } else {
            let found = step(at, element).cloned();
            at.as_array_mut()
                .and_then(|items| items.iter_mut().find(|i| Some(&**i) == found.as_ref()))
        };
        match next {
            Some(next) => at = next,
            None => return,
        }
    }
    if let Some(field) = last.strip_prefix("f:") {
        if let Some(map) = at.as_object_mut() {
            map.remove(field);
        }
    } else if let Some(found) = step(at, last).cloned()
        && let Some(items) = at.as_array_mut()
    {
        items.retain(|i| *i != found);
    }
}

#[cfg(test)]
/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The field manager.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The API version the fields were written in.
    pub api_version: String,
    /// When (RFC 3339).
    pub time: String,
    /// `status` for writes through the status subresource.
    pub subresource: Option<String>,
    /// The fields.
    pub fields: FieldSet,
}

#[cfg(test)]
impl Entry {
    fn from_json(value: &Value) -> Option<Self> {
        Some(Entry {
            manager: value.get("manager")?.as_str()?.to_owned(),
            operation: value.get("operation")?.as_str()?.to_owned(),
            api_version: value
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            time: value
                .get("time")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            subresource: value
                .get("subresource")
                .and_then(Value::as_str)
                .map(str::to_owned),
            fields: match value.as_object() {
                Some(entry) => FieldSet::from_fields_v1_map(&entry_fields(entry)),
                None => FieldSet::default(),
            },
        })
    }
}

#[cfg(test)]
/// The `managedFields` of an object.
pub fn entries(object: &Value) -> Vec<Entry> {
    object
        .at("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Entry::from_json)
        .collect()
}

/// What a write is: who makes it, how, where.
#[derive(Clone, Debug)]
pub struct Write<'a> {
    /// The field manager.
    pub manager: &'a str,
    /// The API version written in.
    pub api_version: &'a str,
    /// `Some("status")` through the status subresource.
    pub subresource: Option<&'a str>,
    /// Now, RFC 3339.
    pub time: &'a str,
}

/// An entry's `fieldsV1` members. Stored objects keep `fieldsV1` as its compact JSON text
/// (a string: one allocation instead of a JSON map per node), which is parsed here; an entry a
/// client wrote has the object itself. Anything else has no member.
fn entry_fields(entry: &Map<String, Value>) -> std::borrow::Cow<'_, Map<String, Value>> {
    use std::borrow::Cow;
    match entry.get("fieldsV1") {
        Some(Value::Object(map)) => Cow::Borrowed(map),
        Some(Value::String(text)) => Cow::Owned(parse_fields(text)),
        _ => Cow::Owned(Map::new()),
    }
}

/// An entry's `fieldsV1` text (`{}` when it has none).
fn fields_text(entry: &Value) -> &str {
    entry
        .get("fieldsV1")
        .and_then(Value::as_str)
        .unwrap_or("{}")
}

/// `FieldsV1` text as its JSON object (`{}` when it is not one).
fn parse_fields(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// An entry's `fieldsV1` as a JSON object, to change in place (text parsed; anything else
/// becomes `{}`); [`compact_fields`] writes it back as text.
fn expand_fields(entry: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let fields = entry
        .entry("fieldsV1")
        .or_insert_with(|| Value::Object(Map::new()));
    let map = match fields {
        Value::Object(map) => std::mem::take(map),
        Value::String(text) => parse_fields(text),
        _ => Map::new(),
    };
    *fields = Value::Object(map);
    match fields {
        Value::Object(map) => map,
        _ => unreachable!("just set to an object"),
    }
}

/// Whether an object is `FieldsV1`: every member an object of the same kind.
fn is_fields(map: &Map<String, Value>) -> bool {
    map.values().all(|v| v.as_object().is_some_and(is_fields))
}

/// An entry's object `fieldsV1` written as its compact text, as stored objects keep it (a
/// `serde_json` map is in key order, so the text is canonical). An object that is not
/// `FieldsV1` (a member that is not an object) is left as it is.
fn compact_fields(entry: &mut Map<String, Value>) {
    if let Some(fields) = entry.get_mut("fieldsV1")
        && let Value::Object(map) = fields
        && is_fields(map)
    {
        *fields = Value::String(Value::Object(std::mem::take(map)).to_string());
    }
}

/// Whether `text` is `FieldsV1` as the server writes it (a JSON object whose members are all
/// such objects), checked in one pass: what the JSON writers check before writing a stored
/// entry's text as the JSON it holds.
pub fn is_fields_v1_text(text: &str) -> bool {
    krec_core::json::is_object_of_objects(text)
}

/// `object`'s `managedFields` as clients see them: each `fieldsV1` a JSON object (stored
/// objects keep it as text). Borrowed when there is nothing to parse.
pub fn expanded(object: &Value) -> std::borrow::Cow<'_, Value> {
    use std::borrow::Cow;
    let has_text = object
        .at("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|list| {
            list.iter()
                .any(|e| e.get("fieldsV1").is_some_and(Value::is_string))
        });
    if !has_text {
        return Cow::Borrowed(object);
    }
    let mut object = object.clone();
    expand(&mut object);
    Cow::Owned(object)
}

/// [`expanded`], in place.
pub fn expand(object: &mut Value) {
    for entry in managed_entries_mut(object) {
        // Text the server did not write (never stored) stays as it is, as the writers leave it.
        let stored = entry.get("fieldsV1").and_then(Value::as_str);
        if stored.is_some_and(is_fields_v1_text) {
            expand_fields(entry);
        }
    }
}

/// `object`'s `managedFields` entries with `fieldsV1` written as text, as the store keeps them.
pub fn compact(object: &mut Value) {
    for entry in managed_entries_mut(object) {
        compact_fields(entry);
    }
}

fn managed_entries_mut(object: &mut Value) -> impl Iterator<Item = &mut Map<String, Value>> {
    object
        .get_mut("metadata")
        .and_then(|m| m.get_mut("managedFields"))
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// What a client wrote in `metadata.managedFields`, as kube's field manager reads it
/// (`decodeLiveOrNew`).
#[derive(Debug, PartialEq)]
pub enum Given {
    /// Nothing, or entries that do not decode: the stored entries stay.
    Stored,
    /// `[]` or `[{}]`: no entries at all from now on (the documented way to clear them).
    Reset,
    /// Entries that decode: they replace the stored ones.
    Entries,
}

/// How kube's field manager takes `managed_fields` from a client's update or patch: a reset, a
/// valid list (each entry `Apply` or `Update`, with an `apiVersion`, `fieldsType: FieldsV1` and
/// a `fieldsV1` object), or nothing it will use (absent, or any entry invalid — then the stored
/// entries stay, so that clients unaware of them cannot lose them).
pub fn given(managed_fields: Option<&Value>) -> Given {
    let Some(Value::Array(entries)) = managed_fields else {
        return Given::Stored;
    };
    match entries.as_slice() {
        [] => return Given::Reset,
        [Value::Object(only)] if only.is_empty() => return Given::Reset,
        _ => {}
    }
    let valid = |entry: &Value| {
        let text = |key: &str| entry.get(key).and_then(Value::as_str);
        matches!(text("operation"), Some("Apply" | "Update"))
            && text("apiVersion").is_some_and(|v| !v.is_empty())
            && text("fieldsType") == Some("FieldsV1")
            && match entry.get("fieldsV1") {
                Some(Value::Object(fields)) => is_fields(fields),
                None => true,
                Some(Value::String(text)) => is_fields_v1_text(text),
                _ => false,
            }
    };
    if entries.iter().all(valid) {
        Given::Entries
    } else {
        Given::Stored
    }
}

/// Record an `Update` (create, update or non-apply patch) that turned `old` (`Value::Null` for a
/// create) into `new`, whose `managedFields` are `old`'s or the ones its client wrote
/// ([`given`]): the manager takes the fields it changed from everyone else, and fields that went
/// are nobody's. An object without entries is not tracked.
///
/// The entries are changed in place, in their `FieldsV1` form: an entry the write does not touch
/// (most of them, on most writes) is neither decoded nor encoded again.
pub fn record_update(old: &Value, new: &mut Value, schema: Schema<'_>, write: &Write<'_>) {
    if old.is_null() {
        // A create: the manager owns every field the object sets, written in one walk.
        let fields = fields_v1_of(new, schema, false);
        if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
            if fields != "{}" {
                let entry = new_entry(write, "Update", Value::String(fields));
                meta.insert("managedFields".into(), Value::Array(vec![entry]));
            }
        }
        return;
    }
    let (changed, removed) = diff(old, new, schema, false);
    let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let mut list = match meta.remove("managedFields") {
        Some(Value::Array(list)) => list,
        _ => Vec::new(),
    };
    // An object that has no entries stays without: kube tracks fields from a create on, or
    // from a server-side apply, never from the update of an untracked object.
    if list.is_empty() {
        return;
    }
    let touches = !changed.is_empty() || !removed.is_empty();
    let mut own_found = false;
    list.retain_mut(|entry| {
        let Some(entry) = entry.as_object_mut() else {
            return false;
        };
        let text = |field: &str| entry.get(field).and_then(Value::as_str);
        let (Some(manager), Some(operation)) = (text("manager"), text("operation")) else {
            return false;
        };
        let mine = manager == write.manager && operation == "Update";
        let own = mine && !own_found && text("subresource") == write.subresource;
        compact_fields(entry);
        let mut emptied = false;
        if touches {
            // Changed as text: no JSON map is built.
            let mut fields = match entry.remove("fieldsV1") {
                Some(Value::String(fields)) => fields,
                _ => "{}".to_owned(),
            };
            let take = |set: &FieldSet, fields: &mut String| {
                if set.is_empty() {
                    return false;
                }
                let (rest, gone) = text::subtract(fields, set);
                if let Some(rest) = rest {
                    *fields = rest;
                }
                gone
            };
            emptied = take(&removed, &mut fields);
            if !mine {
                emptied |= take(&changed, &mut fields);
            }
            if own && !changed.is_empty() {
                fields = text::union(&fields, &changed, true);
            }
            entry.insert("fieldsV1".into(), Value::String(fields));
        }
        if own {
            own_found = true;
            if !changed.is_empty() {
                entry.insert("time".into(), json!(write.time));
                entry.insert("apiVersion".into(), json!(write.api_version));
            }
            emptied &= fields_are_empty(entry);
        }
        !(emptied && fields_are_empty(entry))
    });
    if !own_found && !changed.is_empty() {
        let fields = changed.to_fields_v1().to_string();
        list.push(new_entry(write, "Update", Value::String(fields)));
    }
    if !list.is_empty() {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// A `managedFields` entry of `write` with `fields` (`FieldsV1`).
fn new_entry(write: &Write<'_>, operation: &str, fields: Value) -> Value {
    let mut entry = Map::new();
    entry.insert("manager".into(), write.manager.into());
    entry.insert("operation".into(), operation.into());
    entry.insert("apiVersion".into(), write.api_version.into());
    entry.insert("time".into(), write.time.into());
    entry.insert("fieldsType".into(), "FieldsV1".into());
    entry.insert("fieldsV1".into(), fields);
    if let Some(subresource) = write.subresource {
        entry.insert("subresource".into(), subresource.into());
    }
    Value::Object(entry)
}

/// Whether an entry's `fieldsV1` (text or object) has no member left.
fn fields_are_empty(entry: &Map<String, Value>) -> bool {
    match entry.get("fieldsV1") {
        Some(Value::Object(map)) => map.is_empty(),
        Some(Value::String(text)) => text == "{}",
        _ => true,
    }
}

/// Server-side apply of `config` by `write.manager` onto `live` (`None`: the object is created).
/// Returns the new object with its `managedFields`, or a 409 listing the conflicts.
///
/// As structured-merge-diff's `Apply`: the configuration is merged into the live object; the
/// fields that merge changes or adds and another manager owns are conflicts (a 409 unless
/// forced, when they are taken from their owners); what this manager applied before and no
/// longer applies is removed unless another manager owns it; the manager's `Apply` entry becomes
/// exactly the configuration's fields. Entries are read and changed in their `FieldsV1` form,
/// and only the applier's entry is written anew.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    schema: Schema<'_>,
    skip_status: bool,
    force: bool,
    write: &Write<'_>,
    describe: (&str, &str, &str),
) -> Result<Value, ApiError> {
    let empty = json!({});
    let base = live.unwrap_or(&empty);
    let mut merged = base.clone();
    merge(
        &mut merged,
        config,
        schema.root(),
        schema,
        skip_status,
        true,
    );
    let mut list = match merged
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.remove("managedFields"))
    {
        Some(Value::Array(list)) => list,
        _ => Vec::new(),
    };
    list.retain(|e| {
        e.get("manager").is_some_and(Value::is_string)
            && e.get("operation").is_some_and(Value::is_string)
    });
    for entry in list.iter_mut().filter_map(Value::as_object_mut) {
        compact_fields(entry);
    }
    let is_own = |entry: &Value| {
        entry["manager"].as_str() == Some(write.manager) && entry["operation"] == "Apply"
    };

    // Conflicts: what the merge changes or adds, where another manager owns it.
    let (changed, _) = diff(base, &merged, schema, skip_status);
    let mut conflicts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut taken = FieldSet::default();
    if !changed.is_empty() {
        for entry in list.iter().filter(|e| !is_own(e)) {
            let owned = FieldSet {
                itself: false,
                ..text::members_in_both(fields_text(entry), &changed)
            };
            if owned.is_empty() {
                continue;
            }
            let owner = format!(
                "{:?} using {}",
                entry["manager"].as_str().unwrap_or_default(),
                entry["apiVersion"].as_str().unwrap_or_default()
            );
            let paths = conflicts.entry(owner).or_default();
            for path in owned.paths() {
                paths.push(path_text(&path));
            }
            taken.union(&owned);
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(conflicts, describe));
    }

    // What this manager applied before and no longer does goes, unless someone else owns it.
    let applied_v1 = fields_v1_of(config, schema, skip_status);
    if let Some(previous) = list.iter().find(|e| is_own(e)).and_then(Value::as_object)
        && previous.get("fieldsV1").and_then(Value::as_str) != Some(applied_v1.as_str())
    {
        let previous = FieldSet::from_fields_v1_map(&entry_fields(previous));
        let applied = FieldSet::from_fields_v1_map(&parse_fields(&applied_v1));
        for path in previous.paths() {
            if applied.contains(&path) {
                continue;
            }
            let owned_elsewhere = list
                .iter()
                .filter(|e| !is_own(e))
                .any(|e| text::contains(fields_text(e), &path));
            if !owned_elsewhere {
                remove_at(&mut merged, &path);
            }
        }
    }

    // Forced: the conflicting fields leave their owners; the applier's entry is its config.
    list.retain_mut(|entry| {
        if is_own(entry) {
            return true;
        }
        if taken.is_empty() {
            return true;
        }
        let (rest, emptied) = text::subtract(fields_text(entry), &taken);
        if let Some(rest) = rest {
            entry["fieldsV1"] = Value::String(rest);
        }
        !emptied
    });
    let applied_empty = applied_v1 == "{}";
    let entry = new_entry(write, "Apply", Value::String(applied_v1));
    match list.iter_mut().find(|e| is_own(e)) {
        Some(own) => *own = entry,
        None => list.push(entry),
    }
    if applied_empty {
        list.retain(|e| !is_own(e));
    }
    if !merged.get("metadata").is_some_and(Value::is_object) {
        merged["metadata"] = json!({});
    }
    if !list.is_empty() {
        merged["metadata"]["managedFields"] = Value::Array(list);
    }
    sync_last_applied(&mut merged, config, write.manager);
    Ok(merged)
}

/// kubectl's client-side apply annotation.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// kube's `lastAppliedUpdater`: a server-side apply by kubectl (field manager `kubectl`) of an
/// object that has client-side apply's annotation keeps that annotation the configuration
/// applied, so that a later client-side apply computes from it.
fn sync_last_applied(object: &mut Value, config: &Value, manager: &str) {
    if manager != "kubectl" {
        return;
    }
    let Some(annotations) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
        .filter(|a| a.contains_key(LAST_APPLIED))
    else {
        return;
    };
    let mut applied = config.clone();
    if let Some(meta) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
        let emptied = match meta.get_mut("annotations").and_then(Value::as_object_mut) {
            Some(own) => {
                own.remove(LAST_APPLIED);
                own.is_empty()
            }
            None => false,
        };
        if emptied {
            meta.remove("annotations");
        }
    }
    // As Go encodes it: keys in order, a newline at the end.
    annotations.insert(LAST_APPLIED.into(), Value::String(format!("{applied}\n")));
}

/// Merge `config` into `object` as server-side apply merges a configuration (keyed lists by
/// key, sets by member, atomic values replaced), owning nothing: what a mutating admission
/// policy's `ApplyConfiguration` does.
pub fn merge_configuration(object: &mut Value, config: &Value, schema: Schema<'_>) {
    merge(object, config, schema.root(), schema, false, true);
}

/// Merge `config` into `live` with list semantics (keyed lists by key, sets by member).
fn merge(
    live: &mut Value,
    config: &Value,
    node: Option<&Value>,
    schema: Schema<'_>,
    skip_status: bool,
    top: bool,
) {
    let fields = if live.is_object() && config.is_object() {
        schema.fields(node)
    } else {
        Fields::default()
    };
    match (live.as_object_mut(), config.as_object()) {
        (Some(_), Some(_)) if fields.atomic => *live = config.clone(),
        (Some(live_map), Some(config_map)) => {
            for (key, value) in config_map {
                if top && skip_status && key == "status" {
                    continue;
                }
                if top && key == "metadata" {
                    let meta = live_map.entry("metadata").or_insert_with(|| json!({}));
                    if let (Some(meta), Some(config_meta)) =
                        (meta.as_object_mut(), value.as_object())
                    {
                        for (k, v) in config_meta.iter().filter(|(k, _)| {
                            !SERVER_FIELDS.contains(&k.as_str())
                                || *k == "name"
                                || *k == "namespace"
                        }) {
                            let slot = meta.entry(k.clone()).or_insert(Value::Null);
                            let node = schema.child(schema.metadata(), k);
                            merge(slot, v, node, schema, false, false);
                        }
                    }
                    continue;
                }
                let child_node = fields.get(key);
                match live_map.get_mut(key) {
                    Some(slot) => merge(slot, value, child_node, schema, false, false),
                    None => {
                        live_map.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        _ => match (live.as_array_mut(), config.as_array()) {
            (Some(live_items), Some(config_items)) => match schema.list_type(node) {
                ListType::Map(keys) => {
                    let item_node = schema.items(node);
                    for item in config_items {
                        let key = item_key(item, &keys, item_node);
                        let same = |l: &&mut Value| item_key(l, &keys, item_node) == key;
                        match live_items.iter_mut().find(same) {
                            Some(existing) => {
                                merge(existing, item, item_node, schema, false, false);
                            }
                            None => live_items.push(item.clone()),
                        }
                    }
                }
                ListType::Set => {
                    for item in config_items {
                        if !live_items.contains(item) {
                            live_items.push(item.clone());
                        }
                    }
                }
                ListType::Atomic => *live = config.clone(),
            },
            _ => *live = config.clone(),
        },
    }
}

/// A field path as kube-apiserver prints it in conflicts: `.spec.replicas`,
/// `.spec.containers[name="web"].image`.
fn path_text(path: &[String]) -> String {
    let mut text = String::new();
    for element in path {
        if let Some(field) = element.strip_prefix("f:") {
            text.push('.');
            text.push_str(field);
        } else if let Some(key) = element.strip_prefix("k:") {
            let key: Value = serde_json::from_str(key).unwrap_or_default();
            let parts: Vec<String> = key
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            text.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(member) = element.strip_prefix("v:") {
            text.push_str(&format!("[={member}]"));
        }
    }
    text
}

/// The 409 of an apply with conflicts, worded as kube-apiserver's.
fn conflict_error(
    conflicts: BTreeMap<String, Vec<String>>,
    (kind, group, name): (&str, &str, &str),
) -> ApiError {
    let count: usize = conflicts.values().map(Vec::len).sum();
    let mut causes = Vec::new();
    let mut message = format!(
        "Apply failed with {count} conflict{}: ",
        if count == 1 { "" } else { "s" }
    );
    let mut parts = Vec::new();
    for (manager, fields) in &conflicts {
        for field in fields {
            causes.push(json!({"reason": "FieldManagerConflict",
                "message": format!("conflict with {manager}"), "field": field}));
        }
        if fields.len() == 1 {
            parts.push(format!("conflict with {manager}: {}", fields[0]));
        } else {
            parts.push(format!(
                "conflicts with {manager}:\n- {}",
                fields.join("\n- ")
            ));
        }
    }
    message.push_str(&parts.join("\n"));
    ApiError::conflict_with(message, kind, group, name, causes)
}

mod text;

#[cfg(test)]
mod tests;
