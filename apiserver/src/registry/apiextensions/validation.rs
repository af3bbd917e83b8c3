//! A CustomResourceDefinition validated as apiextensions-apiserver's
//! `ValidateCustomResourceDefinition` does it, with its field paths and messages: the name,
//! group, scope and names; the versions (names, exactly one storage version, a schema each);
//! and each schema's structural rules (`pkg/apiserver/schema`: a typed root object, every
//! specified field typed, no value validations that change types, metadata only as kube allows
//! it), the OpenAPI keywords kube forbids, the `x-kubernetes-*` extensions' rules (list types
//! and map keys, int-or-string, embedded resources, preserve-unknown-fields), `nullable`, and
//! defaults that must validate against their schema and survive pruning.
//!
//! A schema's path is `spec.validation.openAPIV3Schema` when every version has the same schema
//! (kube hoists it there before validating), else `spec.versions[i].schema.openAPIV3Schema`.
//! On an update, a problem the stored CRD already had is let through (kube ratchets each rule
//! on the old object's state; here, on the old object's same message).

use std::collections::BTreeSet;

use serde_json::Value;

use krec_core::error::Cause;
use krec_core::json::Pointer;
use krec_core::selector::is_dns_subdomain;

const TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];

const DNS_1035: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

const DNS_1123_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// Validate `crd` (replacing `old`); the causes kube gives, in its order.
pub fn validate(crd: &Value, old: Option<&Value>) -> Vec<Cause> {
    let causes = problems(crd, old.is_none());
    match old {
        None => causes,
        Some(old) => {
            let before: BTreeSet<Cause> = problems(old, false).into_iter().collect();
            causes.into_iter().filter(|c| !before.contains(c)).collect()
        }
    }
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .at(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Whether `s` is a DNS-1035 label (what kube asks of versions and resource names).
fn is_dns_1035(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn dns_1035_problem(s: &str) -> String {
    if s.len() > 63 {
        format!("must be no more than 63 characters,{DNS_1035}")
    } else {
        DNS_1035.to_owned()
    }
}

fn push(causes: &mut Vec<Cause>, field: impl Into<String>, message: impl Into<String>) {
    causes.push((field.into(), message.into()));
}

fn problems(crd: &Value, creating: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = crd.get("spec").cloned().unwrap_or_default();
    let group = text(&spec, "/group");
    let plural = text(&spec, "/names/plural");
    let name = text(crd, "/metadata/name");
    if !name.is_empty() && name != format!("{plural}.{group}") {
        push(
            &mut causes,
            "metadata.name",
            format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        );
    }
    if group.is_empty() {
        push(&mut causes, "spec.group", "Required value");
    } else if !is_dns_subdomain(group) {
        push(
            &mut causes,
            "spec.group",
            format!("Invalid value: {group:?}: {DNS_1123_SUBDOMAIN}"),
        );
    } else if !group.contains('.') {
        push(
            &mut causes,
            "spec.group",
            format!("Invalid value: {group:?}: should be a domain with at least one dot"),
        );
    }
    match text(&spec, "/scope") {
        "" => push(&mut causes, "spec.scope", "Required value"),
        "Cluster" | "Namespaced" => {}
        other => push(
            &mut causes,
            "spec.scope",
            format!("Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""),
        ),
    }
    let versions: Vec<Value> = spec
        .get("versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let schema_of = |v: &Value| {
        v.at("/schema/openAPIV3Schema")
            .filter(|s| !s.is_null())
            .cloned()
    };
    for (i, version) in versions.iter().enumerate() {
        if schema_of(version).is_none() {
            push(
                &mut causes,
                format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "Required value",
            );
        }
    }
    for (i, version) in versions.iter().enumerate() {
        let name = text(version, "/name");
        if !is_dns_1035(name) {
            push(
                &mut causes,
                format!("spec.versions[{i}].name"),
                format!("Invalid value: {name:?}: {}", dns_1035_problem(name)),
            );
        }
    }
    // kube's internal versions, as its message prints them (Go field names; the schema hoisted
    // when every version has the same one).
    let hoisted = versions
        .windows(2)
        .all(|w| schema_of(&w[0]) == schema_of(&w[1]));
    let internal = || {
        let each: Vec<String> = versions
            .iter()
            .map(|v| {
                let bool_of = |key: &str| v.get(key).and_then(Value::as_bool).unwrap_or(false);
                let or_null = |value: Option<&Value>| value.cloned().unwrap_or(Value::Null);
                // In Go's field order, as kube's encoding of its internal type has them.
                format!(
                    "{{\"Name\":{},\"Served\":{},\"Storage\":{},\"Deprecated\":{},\"DeprecationWarning\":{},\"Schema\":{},\"Subresources\":null,\"AdditionalPrinterColumns\":null,\"SelectableFields\":null}}",
                    Value::from(text(v, "/name")),
                    bool_of("served"),
                    bool_of("storage"),
                    bool_of("deprecated"),
                    or_null(v.get("deprecationWarning")),
                    if hoisted { Value::Null } else { or_null(v.get("schema")) },
                )
            })
            .collect();
        format!("[{}]", each.join(","))
    };
    let names: Vec<&str> = versions.iter().map(|v| text(v, "/name")).collect();
    if names.iter().collect::<BTreeSet<_>>().len() != names.len() {
        push(
            &mut causes,
            "spec.versions",
            format!(
                "Invalid value: {}: must contain unique version names",
                internal()
            ),
        );
    }
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if storage != 1 {
        push(
            &mut causes,
            "spec.versions",
            format!(
                "Invalid value: {}: must have exactly one version marked as storage version",
                internal()
            ),
        );
    }
    if let Some(first) = names.first()
        && !is_dns_1035(first)
    {
        push(
            &mut causes,
            "spec.version",
            format!("Invalid value: {first:?}: {}", dns_1035_problem(first)),
        );
    }
    names_problems(&spec, &mut causes);
    let status_enabled = versions
        .iter()
        .any(|v| v.at("/subresources/status").is_some());
    if hoisted {
        if let Some(schema) = versions.first().and_then(schema_of) {
            schema_problems(
                &schema,
                "spec.validation.openAPIV3Schema",
                status_enabled,
                &mut causes,
            );
        }
    } else {
        for (i, version) in versions.iter().enumerate() {
            if let Some(schema) = schema_of(version) {
                schema_problems(
                    &schema,
                    &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                    version.at("/subresources/status").is_some(),
                    &mut causes,
                );
            }
        }
    }
    if creating && storage == 0 {
        push(
            &mut causes,
            "status.storedVersions",
            "Invalid value: null: must have at least one stored version",
        );
    }
    // The aggregate drops repeated messages, keeping the first.
    let mut seen = BTreeSet::new();
    causes.retain(|c| seen.insert(c.clone()));
    causes
}

fn names_problems(spec: &Value, causes: &mut Vec<Cause>) {
    let names = spec.get("names").cloned().unwrap_or_default();
    let kind = text(&names, "/kind");
    let singular = match text(&names, "/singular") {
        "" => kind.to_lowercase(),
        s => s.to_owned(),
    };
    let list_kind = match text(&names, "/listKind") {
        "" if !kind.is_empty() => format!("{kind}List"),
        s => s.to_owned(),
    };
    let plural = text(&names, "/plural");
    for (field, value) in [
        ("plural", plural),
        ("singular", singular.as_str()),
        ("kind", kind),
        ("listKind", list_kind.as_str()),
    ] {
        if value.is_empty() {
            push(causes, format!("spec.names.{field}"), "Required value");
        }
    }
    let label = |field: &str, value: &str, causes: &mut Vec<Cause>| {
        if !value.is_empty() && !is_dns_1035(value) {
            push(
                causes,
                format!("spec.names.{field}"),
                format!("Invalid value: {value:?}: {}", dns_1035_problem(value)),
            );
        }
    };
    label("plural", plural, causes);
    label("singular", &singular, causes);
    for (field, value) in [("kind", kind), ("listKind", list_kind.as_str())] {
        let lower = value.to_lowercase();
        if !value.is_empty() && !is_dns_1035(&lower) {
            push(
                causes,
                format!("spec.names.{field}"),
                format!(
                    "Invalid value: {value:?}: may have mixed case, but should otherwise match: {}",
                    dns_1035_problem(&lower)
                ),
            );
        }
    }
    for list in ["shortNames", "categories"] {
        for (i, value) in names
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            label(
                &format!("{list}[{i}]"),
                value.as_str().unwrap_or_default(),
                causes,
            );
        }
    }
    if !kind.is_empty() && kind == list_kind {
        push(
            causes,
            "spec.names.listKind",
            format!("Invalid value: {list_kind:?}: kind and listKind may not be the same"),
        );
    }
}

/// Where a schema node is: at the root, an array's items, or an object's field.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

fn flag(node: &Value, key: &str) -> bool {
    node.get(key).and_then(Value::as_bool) == Some(true)
}

fn node_type(node: &Value) -> &str {
    node.get("type").and_then(Value::as_str).unwrap_or_default()
}

/// The keywords kube's structural schema conversion refuses outright (`NewStructural`): with
/// one of them, no structural, default or CEL check runs.
fn unconvertible(node: &Value) -> Option<&'static str> {
    let object = node.as_object()?;
    for (key, message) in [
        ("$schema", "OpenAPIV3Schema 'schema' is not supported"),
        ("id", "OpenAPIV3Schema 'id' is not supported"),
        ("$ref", "OpenAPIV3Schema '$ref' is not supported"),
        (
            "patternProperties",
            "OpenAPIV3Schema 'patternProperties' is not supported",
        ),
        (
            "dependencies",
            "OpenAPIV3Schema 'dependencies' is not supported",
        ),
        (
            "additionalItems",
            "OpenAPIV3Schema 'additionalItems' is not supported",
        ),
        (
            "definitions",
            "OpenAPIV3Schema 'definitions' is not supported",
        ),
    ] {
        if object.contains_key(key) {
            return Some(message);
        }
    }
    if node.get("items").is_some_and(Value::is_array) {
        return Some("OpenAPIV3Schema 'items' must be a schema, but is an array");
    }
    if node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        return Some(
            "internal error: 'x-kubernetes-preserve-unknown-fields' must be true or undefined",
        );
    }
    children(node).find_map(|(_, child)| unconvertible(child))
}

/// A node's child schemas with the path suffix each is at.
fn children(node: &Value) -> impl Iterator<Item = (String, &Value)> {
    let mut out: Vec<(String, &Value)> = Vec::new();
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        out.extend(
            properties
                .iter()
                .map(|(k, v)| (format!(".properties[{k}]"), v)),
        );
    }
    if let Some(items) = node.get("items").filter(|i| i.is_object()) {
        out.push((".items".into(), items));
    }
    if let Some(additional) = node.get("additionalProperties").filter(|a| a.is_object()) {
        out.push((".additionalProperties".into(), additional));
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(list) = node.get(key).and_then(Value::as_array) {
            out.extend(
                list.iter()
                    .enumerate()
                    .map(|(i, v)| (format!(".{key}[{i}]"), v)),
            );
        }
    }
    if let Some(not) = node.get("not").filter(|n| n.is_object()) {
        out.push((".not".into(), not));
    }
    out.into_iter()
}

fn schema_problems(schema: &Value, path: &str, status_enabled: bool, causes: &mut Vec<Cause>) {
    let before = causes.len();
    if status_enabled && !node_type(schema).is_empty() && node_type(schema) != "object" {
        push(
            causes,
            format!("{path}.type"),
            format!(
                "Invalid value: {:?}: only \"object\" is allowed as the type at the root of the schema if the status subresource is enabled",
                node_type(schema)
            ),
        );
    }
    if flag(schema, "nullable") {
        push(
            causes,
            format!("{path}.nullable"),
            "Forbidden: nullable cannot be true at the root",
        );
    }
    // A schema kube cannot make structural gets no structural, default or CEL checks; why, it
    // says only if nothing else is wrong.
    let held_back = unconvertible(schema);
    if held_back.is_none() {
        let mut structural = Vec::new();
        invariants(schema, Level::Root, path, &mut structural);
        // kube sorts the structural errors by their text.
        structural.sort_by_key(|(field, message)| format!("{field}: {message}"));
        let structural_ok = structural.is_empty();
        causes.extend(structural);
        if structural_ok {
            defaults(schema, path, Level::Root, causes);
        }
    }
    walk(schema, path, true, None, causes);
    if let Some(message) = held_back
        && causes.len() == before
    {
        push(causes, path, format!("Invalid value: \"\": {message}"));
    }
    // The CEL rules are compiled only in a schema with nothing else wrong.
    #[cfg(feature = "server")]
    if causes.len() == before {
        causes.extend(crate::expressions::check(schema, path));
    }
}

/// kube's `validateStructuralInvariants` (and the nested value validations it checks).
fn invariants(node: &Value, level: Level, path: &str, causes: &mut Vec<Cause>) {
    let ty = node_type(node);
    let int_or_string = flag(node, "x-kubernetes-int-or-string");
    let preserve = flag(node, "x-kubernetes-preserve-unknown-fields");
    let embedded = flag(node, "x-kubernetes-embedded-resource");
    if ty == "array" && node.get("items").is_none() {
        push(
            causes,
            format!("{path}.items"),
            "Required value: must be specified",
        );
    }
    if let Some(items) = node.get("items").filter(|i| i.is_object()) {
        invariants(items, Level::Item, &format!("{path}.items"), causes);
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (key, child) in properties {
            if level == Level::Root && key == "metadata" {
                continue;
            }
            invariants(
                child,
                Level::Field,
                &format!("{path}.properties[{key}]"),
                causes,
            );
        }
    }
    if let Some(additional) = node.get("additionalProperties").filter(|a| a.is_object()) {
        invariants(
            additional,
            Level::Field,
            &format!("{path}.additionalProperties"),
            causes,
        );
    }
    if level == Level::Root && node.get("additionalProperties").is_some() {
        push(
            causes,
            format!("{path}.additionalProperties"),
            "Forbidden: must not be used at the root",
        );
    }
    if int_or_string && preserve {
        push(
            causes,
            format!("{path}.x-kubernetes-preserve-unknown-fields"),
            "Invalid value: true: must be false if x-kubernetes-int-or-string is true",
        );
    }
    if int_or_string && embedded {
        push(
            causes,
            format!("{path}.x-kubernetes-embedded-resource"),
            "Invalid value: true: must be false if x-kubernetes-int-or-string is true",
        );
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for (i, nested) in node
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            // The int-or-string pattern (`anyOf: [{type: integer}, {type: string}]`, or that
            // as `allOf`'s entry) may name types.
            let int_or_string = (key == "allOf" && is_int_or_string_pattern(nested))
                || (key == "anyOf" && is_int_or_string_any_of(node));
            if !int_or_string {
                nested_value_validation(nested, &format!("{path}.{key}[{i}]"), causes);
            }
        }
    }
    if let Some(not) = node.get("not").filter(|n| n.is_object()) {
        nested_value_validation(not, &format!("{path}.not"), causes);
    }
    if embedded && ty != "object" {
        if ty.is_empty() {
            push(
                causes,
                format!("{path}.type"),
                "Required value: must be object if x-kubernetes-embedded-resource is true",
            );
        } else {
            push(
                causes,
                format!("{path}.type"),
                format!(
                    "Invalid value: {ty:?}: must be object if x-kubernetes-embedded-resource is true"
                ),
            );
        }
    } else if ty.is_empty() && !int_or_string && !preserve {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        push(
            causes,
            format!("{path}.type"),
            format!("Required value: {detail}"),
        );
    }
    if embedded && node.get("additionalProperties").is_some() {
        push(
            causes,
            format!("{path}.additionalProperties"),
            "Forbidden: must not be used if x-kubernetes-embedded-resource is set",
        );
    }
    if level == Level::Root && !ty.is_empty() && ty != "object" {
        push(
            causes,
            format!("{path}.type"),
            format!("Invalid value: {ty:?}: must be object at the root"),
        );
    }
    if level == Level::Root || embedded {
        for key in ["kind", "apiVersion"] {
            if let Some(property) = node.at(&format!("/properties/{key}")) {
                let t = node_type(property);
                if t != "string" {
                    push(
                        causes,
                        format!("{path}.properties[{key}].type"),
                        format!("Invalid value: {t:?}: must be string"),
                    );
                }
            }
        }
        if let Some(metadata) = node.at("/properties/metadata") {
            metadata_invariants(
                metadata,
                level == Level::Root,
                &format!("{path}.properties[metadata]"),
                causes,
            );
        }
    }
    if embedded
        && !preserve
        && node
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(|p| p.is_empty())
    {
        push(
            causes,
            format!("{path}.properties"),
            "Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        );
    }
}

fn is_int_or_string_any_of(node: &Value) -> bool {
    node.get("anyOf") == Some(&serde_json::json!([{"type": "integer"}, {"type": "string"}]))
}

fn is_int_or_string_pattern(nested: &Value) -> bool {
    nested.as_object().is_some_and(|o| o.len() == 1) && is_int_or_string_any_of(nested)
}

/// kube's `validateStructuralMetadataInvariants`: an object, and at the root only `name` and
/// `generateName` may be said of it.
fn metadata_invariants(metadata: &Value, root: bool, path: &str, causes: &mut Vec<Cause>) {
    let ty = node_type(metadata);
    if ty != "object" {
        push(
            causes,
            format!("{path}.type"),
            format!("Invalid value: {ty:?}: must be object"),
        );
    }
    if !root {
        return;
    }
    let mut rest = metadata.as_object().cloned().unwrap_or_default();
    rest.remove("type");
    rest.remove("default");
    if let Some(properties) = rest.get("properties").and_then(Value::as_object) {
        let keys: BTreeSet<&str> = properties.keys().map(String::as_str).collect();
        let allowed = [
            BTreeSet::from(["name"]),
            BTreeSet::from(["generateName"]),
            BTreeSet::from(["name", "generateName"]),
        ];
        if allowed.contains(&keys) {
            rest.remove("properties");
        }
    }
    if !rest.is_empty() {
        push(
            causes,
            path,
            "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
        );
    }
}

/// kube's `validateNestedValueValidation`: inside `allOf`/`anyOf`/`oneOf`/`not` only value
/// validations, never what changes a value's type or shape.
fn nested_value_validation(node: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(object) = node.as_object() else {
        return;
    };
    for (key, detail) in [
        ("type", "Forbidden: must be empty to be structural"),
        ("default", "Forbidden: must be undefined to be structural"),
        ("title", "Forbidden: must be empty to be structural"),
        ("description", "Forbidden: must be empty to be structural"),
        (
            "x-kubernetes-list-map-keys",
            "Forbidden: must be empty to be structural",
        ),
        (
            "x-kubernetes-list-type",
            "Forbidden: must be undefined to be structural",
        ),
        (
            "x-kubernetes-map-type",
            "Forbidden: must be undefined to be structural",
        ),
        (
            "x-kubernetes-validations",
            "Forbidden: must be empty to be structural",
        ),
    ] {
        if object.contains_key(key) {
            push(causes, format!("{path}.{key}"), detail);
        }
    }
    if object
        .get("additionalProperties")
        .is_some_and(|a| *a != Value::Bool(false))
    {
        push(
            causes,
            format!("{path}.additionalProperties"),
            "Forbidden: must be undefined to be structural",
        );
    }
    for key in [
        "nullable",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
    ] {
        if flag(node, key) {
            push(
                causes,
                format!("{path}.{key}"),
                "Forbidden: must be false to be structural",
            );
        }
    }
    if node.at("/properties/metadata").is_some() {
        push(
            causes,
            format!("{path}.properties[metadata]"),
            "Forbidden: must not be specified in a nested context",
        );
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (key, child) in properties {
            if key != "metadata" {
                nested_value_validation(child, &format!("{path}.properties[{key}]"), causes);
            }
        }
    }
    if let Some(items) = node.get("items").filter(|i| i.is_object()) {
        nested_value_validation(items, &format!("{path}.items"), causes);
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for (i, nested) in node
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            nested_value_validation(nested, &format!("{path}.{key}[{i}]"), causes);
        }
    }
}

/// kube's `ValidateDefaults`: each `default` (outside the object's metadata) must survive
/// pruning and validate against its own schema.
fn defaults(node: &Value, path: &str, level: Level, causes: &mut Vec<Cause>) {
    if let Some(default) = node.get("default")
        && level != Level::Root
    {
        let mut pruned = default.clone();
        krec_core::schema::prune(node, &mut pruned);
        if pruned != *default {
            push(
                causes,
                format!("{path}.default"),
                format!("Invalid value: {default}: must not have unknown fields"),
            );
        } else {
            for (field, message) in krec_core::schema::validate(node, default) {
                let field = match field.as_str() {
                    "<root>" => format!("{path}.default"),
                    sub => format!("{path}.default.{sub}"),
                };
                push(causes, field, message.replace("<root>", ""));
            }
        }
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (key, child) in properties {
            if level == Level::Root && key == "metadata" {
                continue;
            }
            defaults(
                child,
                &format!("{path}.properties[{key}]"),
                Level::Field,
                causes,
            );
        }
    }
    if let Some(items) = node.get("items").filter(|i| i.is_object()) {
        defaults(items, &format!("{path}.items"), Level::Item, causes);
    }
}

/// Where a node is under the root's `metadata`, `kind` or `apiVersion` (defaults are forbidden
/// there).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Meta {
    Metadata,
    Kind,
    ApiVersion,
}

/// kube's `ValidateCustomResourceDefinitionOpenAPISchema`: forbidden keywords, types, and the
/// `x-kubernetes-*` extensions' rules, node by node (properties in name order).
fn walk(node: &Value, path: &str, root: bool, meta: Option<Meta>, causes: &mut Vec<Cause>) {
    let Some(object) = node.as_object() else {
        return;
    };
    let ty = node_type(node);
    if !ty.is_empty() && !TYPES.contains(&ty) {
        push(
            causes,
            format!("{path}.type"),
            format!(
                "Unsupported value: {ty:?}: supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""
            ),
        );
    }
    if object.contains_key("default")
        && let Some(meta) = meta
    {
        let reason = match meta {
            Meta::Metadata => "in top-level metadata",
            Meta::Kind => "in top-level kind",
            Meta::ApiVersion => "in top-level apiVersion",
        };
        push(
            causes,
            format!("{path}.default"),
            format!("Forbidden: must not be set {reason}"),
        );
    }
    for (key, detail) in [
        ("id", "id is not supported"),
        ("additionalItems", "additionalItems is not supported"),
        ("patternProperties", "patternProperties is not supported"),
        ("definitions", "definitions is not supported"),
        ("dependencies", "dependencies is not supported"),
        ("$ref", "$ref is not supported"),
    ] {
        if object.contains_key(key) {
            push(
                causes,
                format!("{path}.{key}"),
                format!("Forbidden: {detail}"),
            );
        }
    }
    if ty == "null" {
        push(
            causes,
            format!("{path}.type"),
            "Forbidden: type cannot be set to null, use nullable as an alternative",
        );
    }
    if node.get("items").is_some_and(Value::is_array) {
        push(
            causes,
            format!("{path}.items"),
            "Forbidden: items must be a schema object and not an array",
        );
    }
    if meta.is_some() && flag(node, "x-kubernetes-embedded-resource") {
        push(
            causes,
            format!("{path}.x-kubernetes-embedded-resource"),
            "Forbidden: must not be used inside of resource meta",
        );
    }
    if flag(node, "uniqueItems") {
        push(
            causes,
            format!("{path}.uniqueItems"),
            "Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        );
    }
    let has_properties = node
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty());
    if node
        .get("additionalProperties")
        .is_some_and(|a| *a != Value::Bool(true))
        && has_properties
    {
        push(
            causes,
            format!("{path}.additionalProperties"),
            "Forbidden: additionalProperties and properties are mutual exclusive",
        );
    }
    // Children, depth first.
    if let Some(additional) = node.get("additionalProperties").filter(|a| a.is_object()) {
        walk(
            additional,
            &format!("{path}.additionalProperties"),
            false,
            meta,
            causes,
        );
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        let mut keys: Vec<&String> = properties.keys().collect();
        keys.sort();
        for key in keys {
            let child_meta = meta.or(match (root, key.as_str()) {
                (true, "metadata") => Some(Meta::Metadata),
                (true, "kind") => Some(Meta::Kind),
                (true, "apiVersion") => Some(Meta::ApiVersion),
                _ => None,
            });
            walk(
                &properties[key],
                &format!("{path}.properties[{key}]"),
                false,
                child_meta,
                causes,
            );
        }
    }
    if let Some(not) = node.get("not").filter(|n| n.is_object()) {
        walk(not, &format!("{path}.not"), false, meta, causes);
    }
    for key in ["allOf", "oneOf", "anyOf"] {
        for (i, nested) in node
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            walk(nested, &format!("{path}.{key}[{i}]"), false, meta, causes);
        }
    }
    if let Some(items) = node.get("items").filter(|i| i.is_object()) {
        walk(items, &format!("{path}.items"), false, meta, causes);
    }
    extensions(node, path, causes);
}

/// The `x-kubernetes-*` extensions' own rules on one node.
fn extensions(node: &Value, path: &str, causes: &mut Vec<Cause>) {
    let ty = node_type(node);
    if node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        push(
            causes,
            format!("{path}.x-kubernetes-preserve-unknown-fields"),
            "Invalid value: false: must be true or undefined",
        );
    }
    if let Some(map_type) = node.get("x-kubernetes-map-type").and_then(Value::as_str) {
        if ty.is_empty() {
            push(
                causes,
                format!("{path}.type"),
                "Required value: must be object if x-kubernetes-map-type is specified",
            );
        } else if ty != "object" {
            push(
                causes,
                format!("{path}.type"),
                format!(
                    "Invalid value: {ty:?}: must be object if x-kubernetes-map-type is specified"
                ),
            );
        }
        if !matches!(map_type, "atomic" | "granular") {
            push(
                causes,
                format!("{path}.x-kubernetes-map-type"),
                format!(
                    "Unsupported value: {map_type:?}: supported values: \"atomic\", \"granular\""
                ),
            );
        }
    }
    let list_type = node.get("x-kubernetes-list-type").and_then(Value::as_str);
    let items = node.get("items").filter(|i| i.is_object());
    if let Some(list_type) = list_type {
        if ty.is_empty() {
            push(
                causes,
                format!("{path}.type"),
                "Required value: must be array if x-kubernetes-list-type is specified",
            );
        } else if ty != "array" {
            push(
                causes,
                format!("{path}.type"),
                format!(
                    "Invalid value: {ty:?}: must be array if x-kubernetes-list-type is specified"
                ),
            );
        } else if list_type == "set"
            && let Some(items) = items
        {
            let item_list_type = items.get("x-kubernetes-list-type").and_then(Value::as_str);
            if node_type(items) == "array" && item_list_type != Some("atomic") {
                push(
                    causes,
                    format!("{path}.items.x-kubernetes-list-type"),
                    format!(
                        "Invalid value: {}: must be atomic as item of a list with x-kubernetes-list-type=set",
                        items
                            .get("x-kubernetes-map-type")
                            .cloned()
                            .unwrap_or(Value::Null)
                    ),
                );
            } else if node_type(items) == "object"
                && items.get("x-kubernetes-map-type").and_then(Value::as_str) != Some("atomic")
            {
                push(
                    causes,
                    format!("{path}.items.x-kubernetes-map-type"),
                    format!(
                        "Invalid value: {}: must be atomic as item of a list with x-kubernetes-list-type=set",
                        serde_json::json!(item_list_type)
                    ),
                );
            }
        }
        if !matches!(list_type, "atomic" | "set" | "map") {
            push(
                causes,
                format!("{path}.x-kubernetes-list-type"),
                format!(
                    "Unsupported value: {list_type:?}: supported values: \"atomic\", \"set\", \"map\""
                ),
            );
        }
    }
    let keys: Vec<&str> = node
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if !keys.is_empty() {
        match list_type {
            None => push(
                causes,
                format!("{path}.x-kubernetes-list-type"),
                "Required value: must be map if x-kubernetes-list-map-keys is non-empty",
            ),
            Some("map") => {}
            Some(other) => push(
                causes,
                format!("{path}.x-kubernetes-list-type"),
                format!(
                    "Invalid value: {other:?}: must be map if x-kubernetes-list-map-keys is non-empty"
                ),
            ),
        }
    }
    if list_type == Some("map") {
        if keys.is_empty() {
            push(
                causes,
                format!("{path}.x-kubernetes-list-map-keys"),
                "Required value: must not be empty if x-kubernetes-list-type is map",
            );
        }
        match items {
            None => push(
                causes,
                format!("{path}.items"),
                "Required value: must have a schema if x-kubernetes-list-type is map",
            ),
            Some(items) if node_type(items) != "object" => push(
                causes,
                format!("{path}.items.type"),
                format!(
                    "Invalid value: {:?}: must be object if parent array's x-kubernetes-list-type is map",
                    node_type(items)
                ),
            ),
            Some(items) => {
                let keys_json = serde_json::json!(keys).to_string();
                for key in &keys {
                    match items.at(&format!("/properties/{key}")) {
                        None => push(
                            causes,
                            format!("{path}.x-kubernetes-list-map-keys"),
                            format!(
                                "Invalid value: {keys_json}: entries must all be names of item properties"
                            ),
                        ),
                        Some(property) if matches!(node_type(property), "array" | "object") => {
                            push(
                                causes,
                                format!("{path}.items.properties[{key}].type"),
                                "Invalid value: \"object\": must be a scalar type if parent array's x-kubernetes-list-type is map",
                            )
                        }
                        Some(_) => {}
                    }
                }
                if keys.iter().collect::<BTreeSet<_>>().len() != keys.len() {
                    push(
                        causes,
                        format!("{path}.x-kubernetes-list-map-keys"),
                        format!("Invalid value: {keys_json}: must not contain duplicate entries"),
                    );
                }
            }
        }
    }
    if let (Some(list_type @ ("set" | "map")), Some(items)) = (list_type, items) {
        if flag(items, "nullable") {
            push(
                causes,
                format!("{path}.items.nullable"),
                format!("Forbidden: cannot be nullable when x-kubernetes-list-type is {list_type}"),
            );
        }
        if list_type == "map" {
            let required: Vec<&str> = items
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            for key in &keys {
                let Some(property) = items.at(&format!("/properties/{key}")) else {
                    continue;
                };
                if !required.contains(key) && property.get("default").is_none() {
                    push(
                        causes,
                        format!("{path}.items.properties[{key}].default"),
                        "Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                    );
                }
                if flag(property, "nullable") {
                    push(
                        causes,
                        format!("{path}.items.properties[{key}].nullable"),
                        "Forbidden: this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                    );
                }
            }
        }
    }
    for (i, rule) in node
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{path}.x-kubernetes-validations[{i}]");
        if text(rule, "/rule").trim().is_empty() {
            push(
                causes,
                format!("{at}.rule"),
                "Required value: rule is not specified",
            );
        }
        if let Some(message) = rule.get("message").and_then(Value::as_str) {
            if message.trim().is_empty() {
                push(
                    causes,
                    format!("{at}.message"),
                    format!("Invalid value: {message:?}: must be non-empty if specified"),
                );
            } else if message.contains('\n') {
                push(
                    causes,
                    format!("{at}.message"),
                    format!("Invalid value: {message:?}: must not contain line breaks"),
                );
            }
        } else if text(rule, "/rule").contains('\n') && rule.get("messageExpression").is_none() {
            push(
                causes,
                format!("{at}.message"),
                "Required value: message must be specified if rule contains line breaks",
            );
        }
        if rule
            .get("messageExpression")
            .and_then(Value::as_str)
            .is_some_and(|m| m.trim().is_empty())
        {
            push(
                causes,
                format!("{at}.messageExpression"),
                "Required value: messageExpression must be non-empty if specified",
            );
        }
        if let Some(reason) = rule.get("reason").and_then(Value::as_str)
            && !matches!(
                reason,
                "FieldValueDuplicate"
                    | "FieldValueForbidden"
                    | "FieldValueInvalid"
                    | "FieldValueRequired"
            )
        {
            push(
                causes,
                format!("{at}.reason"),
                format!(
                    "Unsupported value: {reason:?}: supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd(schema: Value) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "foos.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "foos", "singular": "foo", "kind": "Foo", "listKind": "FooList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": schema}}]}})
    }

    fn messages(crd: &Value) -> Vec<String> {
        validate(crd, None)
            .into_iter()
            .map(|(field, message)| format!("{field}: {message}"))
            .collect()
    }

    const P: &str = "spec.validation.openAPIV3Schema";

    #[test]
    fn the_schemas_kube_refuses_should_be_refused_with_its_messages() {
        let cases: Vec<(Value, Vec<String>)> = vec![
            (
                json!({"type": "frobnicate"}),
                vec![
                    format!("{P}.type: Invalid value: \"frobnicate\": must be object at the root"),
                    format!(
                        "{P}.type: Unsupported value: \"frobnicate\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""
                    ),
                ],
            ),
            (
                json!({"type": "string"}),
                vec![format!(
                    "{P}.type: Invalid value: \"string\": must be object at the root"
                )],
            ),
            (
                json!({"properties": {"spec": {"type": "object"}}}),
                vec![format!(
                    "{P}.type: Required value: must not be empty at the root"
                )],
            ),
            (
                json!({"type": "object", "properties": {"spec": {}}}),
                vec![format!(
                    "{P}.properties[spec].type: Required value: must not be empty for specified object fields"
                )],
            ),
            (
                json!({"type": "object", "properties": {"spec": {"type": "object",
                    "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}}}),
                vec![format!(
                    "{P}.properties[spec].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
                )],
            ),
            (
                json!({"type": "object", "properties": {"spec": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": false}}}),
                vec![format!(
                    "{P}.properties[spec].x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"
                )],
            ),
            (
                json!({"type": "object", "nullable": true}),
                vec![format!(
                    "{P}.nullable: Forbidden: nullable cannot be true at the root"
                )],
            ),
            (
                json!({"type": "object", "properties": {"metadata": {"type": "object",
                    "properties": {"name": {"type": "string", "default": "x"}}}}}),
                vec![format!(
                    "{P}.properties[metadata].properties[name].default: Forbidden: must not be set in top-level metadata"
                )],
            ),
            (
                json!({"type": "object", "properties": {"spec": {"type": "object",
                    "properties": {"a": {"type": "string"}}, "default": {"a": "x", "b": 1}}}}),
                vec![format!(
                    "{P}.properties[spec].default: Invalid value: {{\"a\":\"x\",\"b\":1}}: must not have unknown fields"
                )],
            ),
            (
                json!({"type": "object", "properties": {"n": {"type": "integer", "default": "x"}}}),
                vec![format!(
                    "{P}.properties[n].default: Invalid value: \"string\":  in body must be of type integer: \"string\""
                )],
            ),
            (
                json!({"type": "object", "properties": {"ports": {"type": "array",
                    "x-kubernetes-list-type": "map",
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}}),
                vec![format!(
                    "{P}.properties[ports].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
                )],
            ),
            (
                json!({"type": "object", "properties": {"ports": {"type": "array",
                    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}}),
                vec![format!(
                    "{P}.properties[ports].items.properties[name].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property"
                )],
            ),
            (
                json!({"type": "object", "properties": {"l": {"type": "array",
                    "items": {"type": "string"}, "uniqueItems": true}}}),
                vec![format!(
                    "{P}.properties[l].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
                )],
            ),
            (
                json!({"type": "object", "properties": {"l": {"type": "array"}}}),
                vec![format!(
                    "{P}.properties[l].items: Required value: must be specified"
                )],
            ),
            (
                json!({"type": "object", "$schema": "http://json-schema.org/draft-04/schema#"}),
                vec![format!(
                    "{P}: Invalid value: \"\": OpenAPIV3Schema 'schema' is not supported"
                )],
            ),
        ];
        for (schema, expected) in cases {
            assert_eq!(messages(&crd(schema.clone())), expected, "{schema}");
        }
    }

    #[test]
    fn a_crd_with_defaults_list_map_keys_and_nullable_fields_should_be_valid() {
        let valid = crd(json!({"type": "object", "properties": {
            "metadata": {"type": "object"},
            "spec": {"type": "object", "default": {}, "properties": {
                "replicas": {"type": "integer", "default": 1, "minimum": 0},
                "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                "note": {"type": "string", "nullable": true},
                "port": {"x-kubernetes-int-or-string": true,
                    "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name", "protocol"],
                    "items": {"type": "object", "required": ["name"], "properties": {
                        "name": {"type": "string"},
                        "protocol": {"type": "string", "default": "TCP"}}}},
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                    "x-kubernetes-preserve-unknown-fields": true},
                "free": {"x-kubernetes-preserve-unknown-fields": true}}},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}));
        assert_eq!(messages(&valid), Vec::<String>::new());
    }

    #[test]
    fn names_versions_and_scope_should_be_checked_as_kube_does() {
        let mut wrong = crd(json!({"type": "object"}));
        wrong["metadata"]["name"] = json!("bars.example.com");
        wrong["spec"]["scope"] = json!("Global");
        wrong["spec"]["versions"][0]["storage"] = json!(false);
        assert_eq!(
            messages(&wrong),
            [
                "metadata.name: Invalid value: \"bars.example.com\": must be spec.names.plural+\".\"+spec.group",
                "spec.scope: Unsupported value: \"Global\": supported values: \"Cluster\", \"Namespaced\"",
                "spec.versions: Invalid value: [{\"Name\":\"v1\",\"Served\":true,\"Storage\":false,\"Deprecated\":false,\"DeprecationWarning\":null,\"Schema\":null,\"Subresources\":null,\"AdditionalPrinterColumns\":null,\"SelectableFields\":null}]: must have exactly one version marked as storage version",
                "status.storedVersions: Invalid value: null: must have at least one stored version",
            ]
        );
        let mut no_schema = crd(json!({}));
        no_schema["spec"]["versions"][0]
            .as_object_mut()
            .expect("version")
            .remove("schema");
        assert_eq!(
            messages(&no_schema),
            ["spec.versions[0].schema.openAPIV3Schema: Required value"]
        );
        let mut dotless = crd(json!({"type": "object"}));
        dotless["metadata"]["name"] = json!("foos.example");
        dotless["spec"]["group"] = json!("example");
        assert_eq!(
            messages(&dotless),
            ["spec.group: Invalid value: \"example\": should be a domain with at least one dot"]
        );
        // On an update, what the stored CRD already had is let through.
        let old = crd(json!({"type": "object", "properties": {"spec": {}}}));
        let mut new = old.clone();
        new["metadata"]["labels"] = json!({"a": "b"});
        assert!(validate(&new, Some(&old)).is_empty());
    }
}
