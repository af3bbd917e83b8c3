//! Strategic merge patch, applied as apimachinery's `strategicpatch` applies it on
//! kube-apiserver (`StrategicMergeMapPatch`: parallel lists merged, unmatched nulls ignored).
//!
//! Each field's patch strategy (`merge`, `replace`, `retainKeys`) and merge key come from
//! kube-apiserver's OpenAPI definition of the kind ([`PatchMeta`]): `containers` merge by `name`,
//! container `ports` by `containerPort`, `finalizers` as a set, `args` are replaced, and so on.
//! The directives are honoured: `$patch: replace|delete` on maps and list items, `$retainKeys`,
//! `$deleteFromPrimitiveList/…` and `$setElementOrder/…`. Merged lists are ordered as
//! apimachinery orders them: items named by the patch (or its `$setElementOrder`) in the patch's
//! order, the others where they were, interleaved by their order in the live object.

use serde_json::{Map, Value};

use crate::openapi;
use crate::resources::ResourceType;
use krec_core::error::ApiError;

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Where a built-in kind's fields find their patch strategies: kube-apiserver's definition of
/// the kind, walked alongside the object. Parts it does not describe merge maps and replace lists.
#[derive(Clone, Copy, Debug, Default)]
pub struct PatchMeta(Option<&'static Value>);

impl PatchMeta {
    /// The strategies of `rt`'s objects; `None` for custom resources, which have none (kube-apiserver
    /// refuses strategic merge patches of them).
    pub fn of(rt: &ResourceType) -> Option<Self> {
        if rt.schema.is_some() {
            return None;
        }
        Some(Self::of_kind(&rt.group, &rt.version, &rt.kind))
    }

    /// The strategies of a built-in kind's objects.
    pub fn of_kind(group: &str, version: &str, kind: &str) -> Self {
        PatchMeta(openapi::builtin_kind(group, version, kind))
    }

    fn field(self, name: &str) -> FieldMeta {
        let Some(node) = self.0.map(openapi::resolve) else {
            return FieldMeta::default();
        };
        let property = node
            .get("properties")
            .and_then(|p| p.get(name))
            .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()));
        let Some(property) = property else {
            return FieldMeta::default();
        };
        let strategies = property
            .get("x-kubernetes-patch-strategy")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let has = |strategy: &str| strategies.split(',').any(|s| s.trim() == strategy);
        FieldMeta {
            merge: has("merge"),
            replace: has("replace"),
            merge_key: property
                .get("x-kubernetes-patch-merge-key")
                .and_then(Value::as_str),
            element: PatchMeta(Some(property.get("items").unwrap_or(property))),
        }
    }
}

/// One field's strategy, and the metadata of its value (of its items, for a list).
#[derive(Clone, Copy, Debug, Default)]
struct FieldMeta {
    merge: bool,
    replace: bool,
    merge_key: Option<&'static str>,
    element: PatchMeta,
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::bad_request(message.into())
}

/// Strategic merge of `patch` (an object) into `target`.
pub fn strategic_merge(target: &mut Value, patch: &Value, meta: PatchMeta) -> Result<(), ApiError> {
    let Value::Object(patch) = patch else {
        return Err(bad_request("the patch body must be a JSON object"));
    };
    let original = match target.take() {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    *target = Value::Object(merge_map(original, patch.clone(), meta)?);
    Ok(())
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    meta: PatchMeta,
) -> Result<Map<String, Value>, ApiError> {
    if let Some(directive) = patch.remove(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => Ok(patch),
            Some("delete") => Ok(Map::new()),
            _ => Err(bad_request(format!(
                "Unrecognized patch type: {directive} in map: {}",
                Value::Object(patch)
            ))),
        };
    }
    if let Some(keep) = patch.remove(RETAIN_KEYS) {
        let keep = keep
            .as_array()
            .ok_or_else(|| bad_request("invalid patch format of retainKeys"))?;
        let kept = |key: &str| keep.iter().any(|k| k == key);
        let outside = patch.iter().any(|(k, v)| {
            !v.is_null()
                && !k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
                && !k.starts_with(SET_ELEMENT_ORDER)
                && !kept(k)
        });
        if outside {
            return Err(bad_request("invalid patch format of retainKeys"));
        }
        original.retain(|k, _| kept(k));
    }
    apply_element_orders(&mut original, &mut patch, meta)?;
    for (key, value) in patch {
        let (key, delete_list) = match key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            Some(field) => (field.to_owned(), true),
            None => (key, false),
        };
        if value.is_null() {
            original.remove(&key);
            continue;
        }
        let field = meta.field(&key);
        match (original.get_mut(&key), value) {
            (Some(Value::Object(current)), Value::Object(value)) => {
                let current = std::mem::take(current);
                let merged = if field.replace {
                    value
                } else {
                    merge_map(current, value, field.element)?
                };
                original.insert(key, Value::Object(merged));
            }
            (Some(Value::Array(current)), Value::Array(value)) => {
                let current = std::mem::take(current);
                let merged = merge_slice_handler(current, value, field, delete_list)?;
                original.insert(key, Value::Array(merged));
            }
            // A value where there was none or of another type replaces it; a list of deletions
            // for a list that is not there has nothing to delete.
            (_, _) if delete_list => {}
            (_, value) => match remove_directives(value) {
                Some(value) => {
                    original.insert(key, value);
                }
                None => {
                    original.remove(&key);
                }
            },
        }
    }
    Ok(original)
}

/// The `$setElementOrder/…` directives of `patch`: each list is merged with its patch list and
/// ordered as the directive says (apimachinery's `mergePatchIntoOriginal`).
fn apply_element_orders(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    meta: PatchMeta,
) -> Result<(), ApiError> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for key in keys {
        let field_name = &key[SET_ELEMENT_ORDER.len()..];
        let Some(Value::Array(order)) = patch.remove(&key) else {
            return Err(bad_request("invalid patch format of setElementOrder list"));
        };
        let field = meta.field(field_name);
        let as_list = |v: Option<Value>| -> Result<Option<Vec<Value>>, ApiError> {
            match v {
                None => Ok(None),
                Some(Value::Array(items)) => Ok(Some(items)),
                Some(other) => Err(bad_request(format!(
                    "invalid value for {field_name}: {other} is not a list"
                ))),
            }
        };
        let current = as_list(original.get(field_name).cloned())?;
        let patched = as_list(patch.remove(field_name))?;
        let server_order = current.clone().unwrap_or_default();
        let merged = match (current, patched) {
            (Some(current), None) => current,
            (None, Some(patched)) => patched.into_iter().filter_map(remove_directives).collect(),
            (Some(current), Some(patched)) => merge_slice_handler(current, patched, field, false)?,
            (None, None) => continue,
        };
        let (named, server_only) = partition(merged, &order, field.merge_key);
        let ordered = normalize_order(named, server_only, &order, &server_order, field.merge_key);
        original.insert(field_name.to_owned(), Value::Array(ordered));
    }
    Ok(())
}

fn merge_slice_handler(
    original: Vec<Value>,
    patch: Vec<Value>,
    field: FieldMeta,
    delete_list: bool,
) -> Result<Vec<Value>, ApiError> {
    if field.merge || delete_list {
        merge_slice(original, patch, field, delete_list)
    } else {
        Ok(patch)
    }
}

fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    field: FieldMeta,
    delete_list: bool,
) -> Result<Vec<Value>, ApiError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let all = || original.iter().chain(&patch);
    if all().any(Value::is_array) {
        return Err(ApiError::unprocessable("lists of lists are not supported"));
    }
    let maps = all().next().is_some_and(Value::is_object);
    if all().any(|v| v.is_object() != maps) {
        return Err(bad_request(
            "the items of a merged list must all be objects or all be values",
        ));
    }
    if !maps {
        if delete_list {
            return Ok(original
                .into_iter()
                .filter(|v| !patch.contains(v))
                .collect());
        }
        let mut merged = original.clone();
        for item in &patch {
            if !merged.contains(item) {
                merged.push(item.clone());
            }
        }
        let (named, server_only) = partition(merged, &patch, None);
        return Ok(normalize_order(named, server_only, &patch, &original, None));
    }
    let key = field
        .merge_key
        .ok_or_else(|| bad_request("cannot merge lists without merge key for a list of objects"))?;
    let key_of = |item: &Value| -> Result<Value, ApiError> {
        item.get(key).cloned().ok_or_else(|| {
            bad_request(format!(
                "map: {item} does not contain declared merge key: {key}"
            ))
        })
    };
    // Items with directives: `$patch: delete` removes its item, `$patch: replace` the list.
    let mut original = original;
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    for item in patch {
        match item.get(DIRECTIVE) {
            None => plain.push(item),
            Some(directive) => match directive.as_str() {
                Some("delete") => {
                    let id = key_of(&item)?;
                    original.retain(|o| o.get(key) != Some(&id));
                }
                Some("replace") => replace = true,
                Some("merge") => {
                    return Err(bad_request(
                        "merging lists cannot yet be specified in the patch",
                    ));
                }
                _ => {
                    return Err(bad_request(format!(
                        "Unrecognized patch type: {directive} in map: {item}"
                    )));
                }
            },
        }
    }
    if replace {
        original = plain.into_iter().filter_map(remove_directives).collect();
        plain = Vec::new();
    }
    let mut merged = original.clone();
    for item in &plain {
        let id = key_of(item)?;
        match merged.iter().position(|m| m.get(key) == Some(&id)) {
            Some(i) => {
                let current = match std::mem::take(&mut merged[i]) {
                    Value::Object(map) => map,
                    _ => Map::new(),
                };
                let patch = item.as_object().cloned().unwrap_or_default();
                merged[i] = Value::Object(merge_map(current, patch, field.element)?);
            }
            None => merged.extend(remove_directives(item.clone())),
        }
    }
    let (named, server_only) = partition(merged, &plain, Some(key));
    Ok(normalize_order(
        named,
        server_only,
        &plain,
        &original,
        Some(key),
    ))
}

/// What identifies a list item: its merge key's value, or the item itself.
fn identity<'v>(item: &'v Value, key: Option<&str>) -> Option<&'v Value> {
    match key {
        Some(key) => item.get(key),
        None => Some(item),
    }
}

fn index(list: &[Value], item: &Value, key: Option<&str>) -> Option<usize> {
    let id = identity(item, key);
    list.iter().position(|v| identity(v, key) == id)
}

/// The items `by` names (in `items`' order), and the others.
fn partition(items: Vec<Value>, by: &[Value], key: Option<&str>) -> (Vec<Value>, Vec<Value>) {
    items
        .into_iter()
        .partition(|item| index(by, item, key).is_some())
}

/// apimachinery's `normalizeElementOrder`: the named items in `named_order`, the others in
/// `server_order`, then the others inserted among the named by their places in `server_order`.
fn normalize_order(
    mut named: Vec<Value>,
    mut server_only: Vec<Value>,
    named_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    named.sort_by_key(|item| index(named_order, item, key).unwrap_or(usize::MAX));
    server_only.sort_by_key(|item| index(server_order, item, key).unwrap_or(usize::MAX));
    let mut out = Vec::with_capacity(named.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = named.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                match (index(server_order, l, key), index(server_order, r, key)) {
                    (Some(li), Some(ri)) => li < ri,
                    _ => false,
                }
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}

/// `value` without directives: maps holding `$patch` are dropped (`None` at the top), `$…`
/// keys removed.
fn remove_directives(value: Value) -> Option<Value> {
    match value {
        Value::Object(map) => {
            if map.contains_key(DIRECTIVE) {
                return None;
            }
            Some(Value::Object(
                map.into_iter()
                    .filter(|(k, _)| !k.starts_with('$'))
                    .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                    .collect(),
            ))
        }
        Value::Array(items) => Some(Value::Array(
            items.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

#[cfg(test)]
mod tests;
