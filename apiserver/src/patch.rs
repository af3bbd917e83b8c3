//! Patch formats: JSON merge patch, JSON patch, strategic merge patch and server-side apply.
//!
//! Strategic merge patch follows the `patchMergeKey`s of the built-in kinds for the lists
//! kubectl touches (`containers` by `name`, `ports` by `containerPort`/`port`, `env` by `name`,
//! `volumes`, `volumeMounts` by `mountPath`, `ownerReferences` by `uid`, `conditions` by `type`,
//! …), merges `finalizers` as a set, and honours the `$patch`, `$retainKeys`,
//! `$setElementOrder/…` and `$deleteFromPrimitiveList/…` directives. Other lists are replaced.
//! Server-side apply is applied as a merge (strategic for built-in kinds, JSON merge for custom
//! resources) without field-ownership tracking or conflict detection.

use serde_json::{Map, Value};

use crate::error::ApiError;

/// Most operations one JSON patch may have (kube-apiserver's `maxJSONPatchOperations`).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;
/// Most bytes the `copy` operations of one JSON patch may add, counted as the JSON text of each
/// copied value (kube-apiserver's `--json-patch-max-copy-bytes` default, the 3 MiB request
/// limit). Without it, a patch of a few dozen `copy` operations, each doubling the object, would
/// grow it exponentially.
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 << 20;

/// How a patch body is to be applied, from its `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml`.
    Apply,
}

impl PatchKind {
    /// The patch kind of a `Content-Type` header.
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        match content_type.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchKind::Apply)
            }
            _ => None,
        }
    }
}

/// Apply `body` (already decoded) to `target`. `builtin` says whether the kind is built in
/// (strategic merge is refused for custom resources, as kube-apiserver does).
pub fn apply_patch(
    kind: PatchKind,
    target: &mut Value,
    body: &Value,
    builtin: bool,
) -> Result<(), ApiError> {
    match kind {
        PatchKind::Merge => {
            require_object(body)?;
            json_patch::merge(target, body);
        }
        PatchKind::Json => json_patch_bounded(target, body)?,
        PatchKind::Strategic => {
            if !builtin {
                return Err(ApiError::unsupported_media_type(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                ));
            }
            require_object(body)?;
            strategic_merge(target, body);
        }
        PatchKind::Apply => {
            require_object(body)?;
            if builtin {
                strategic_merge(target, body);
            } else {
                json_patch::merge(target, body);
            }
        }
    }
    Ok(())
}

/// What a patch request stores: the current object with `body` applied or, when the object does
/// not exist, `body` itself for server-side apply (which creates) and nothing for other patches.
pub fn patched(
    kind: PatchKind,
    body: &Value,
    builtin: bool,
    current: Option<&Value>,
) -> Result<Option<Value>, ApiError> {
    match current {
        Some(current) => {
            let mut patched = current.clone();
            apply_patch(kind, &mut patched, body, builtin)?;
            Ok(Some(patched))
        }
        None if kind == PatchKind::Apply => Ok(Some(body.clone())),
        None => Ok(None),
    }
}

/// Apply the RFC 6902 patch `body` to `target` within kube-apiserver's bounds: at most
/// [`MAX_JSON_PATCH_OPERATIONS`] operations (413) and [`MAX_JSON_PATCH_COPY_BYTES`] copied
/// (422). Operations apply one at a time, so the size of what each `copy` duplicates is known
/// before it is made; on an error `target` is half-patched and must be discarded (callers patch
/// a copy).
fn json_patch_bounded(target: &mut Value, body: &Value) -> Result<(), ApiError> {
    let ops = body.as_array().ok_or_else(|| {
        ApiError::bad_request("invalid JSON patch: the body must be a JSON array")
    })?;
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(ApiError::too_large_message(format!(
            "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            ops.len()
        )));
    }
    let ops: json_patch::Patch = serde_json::from_value(body.clone())
        .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
    let failed = |message: String| {
        ApiError::invalid(
            "",
            "",
            "",
            vec![(
                "patch".into(),
                format!("the JSON patch could not be applied: {message}"),
            )],
        )
    };
    let mut copied = 0usize;
    for op in ops.0 {
        if let json_patch::PatchOperation::Copy(copy) = &op
            && let Some(value) = target.pointer(copy.from.as_str())
        {
            copied = copied.saturating_add(json_len(value));
            if copied > MAX_JSON_PATCH_COPY_BYTES {
                return Err(failed(format!(
                    "Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}"
                )));
            }
        }
        json_patch::patch(target, &[op]).map_err(|e| failed(e.to_string()))?;
    }
    Ok(())
}

/// Decimal digits of `n`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Length of `value`'s compact JSON text, counted from its structure without writing it (a
/// string's escapes are counted as one byte each: close enough for a budget, and never more
/// than the text).
fn json_len(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => digits(u),
            (None, Some(i)) => 1 + digits(i.unsigned_abs()),
            _ => n.to_string().len(),
        },
        Value::String(s) => s.len() + 2,
        Value::Array(items) => {
            2 + items.len().saturating_sub(1) + items.iter().map(json_len).sum::<usize>()
        }
        Value::Object(map) => {
            2 + map.len().saturating_sub(1)
                + map
                    .iter()
                    .map(|(k, v)| k.len() + 3 + json_len(v))
                    .sum::<usize>()
        }
    }
}

fn require_object(body: &Value) -> Result<(), ApiError> {
    if body.is_object() {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "the patch body must be a JSON object",
        ))
    }
}

/// The merge key of a list field of the built-in kinds, or `None` to replace the list.
pub(crate) fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "readinessGates"
        | "resourceClaims" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "ownerReferences" => Some("uid"),
        "conditions" => Some("type"),
        "hostAliases" => Some("ip"),
        "ports" => {
            if items.iter().any(|i| i.get("containerPort").is_some()) {
                Some("containerPort")
            } else {
                Some("port")
            }
        }
        _ => None,
    }
}

/// Primitive lists merged as sets.
fn is_set_list(field: &str) -> bool {
    matches!(field, "finalizers")
}

/// A copy of a patch value with every directive removed.
fn without_directives(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), without_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .map(without_directives)
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Strategic merge of `patch` into `target`.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Some(patch_map) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = without_directives(patch);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(target_map) = target.as_object_mut() else {
        return;
    };
    if let Some(keep) = patch_map.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        target_map.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (key, value) in patch_map {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(list), Some(remove)) = (
                target_map.get_mut(field).and_then(Value::as_array_mut),
                value.as_array(),
            ) {
                list.retain(|v| !remove.contains(v));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        match value {
            Value::Null => {
                target_map.remove(key);
            }
            Value::Object(inner)
                if inner.get("$patch").and_then(Value::as_str) == Some("delete") =>
            {
                target_map.remove(key);
            }
            Value::Object(_) => {
                let slot = target_map.entry(key.clone()).or_insert(Value::Null);
                if slot.is_object() {
                    strategic_merge(slot, value);
                } else {
                    *slot = Value::Null;
                    strategic_merge(slot, value);
                }
            }
            Value::Array(items) => {
                let slot = target_map
                    .entry(key.clone())
                    .or_insert(Value::Array(Vec::new()));
                merge_list(key, slot, items);
            }
            other => {
                target_map.insert(key.clone(), other.clone());
            }
        }
    }
}

fn merge_list(field: &str, target: &mut Value, items: &[Value]) {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *target = without_directives(&Value::Array(items.to_vec()));
        return;
    }
    if !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    let Some(list) = target.as_array_mut() else {
        return;
    };
    if is_set_list(field) {
        for item in items {
            if !list.contains(item) {
                list.push(item.clone());
            }
        }
        return;
    }
    let Some(key) = merge_key(field, items).filter(|_| items.iter().all(Value::is_object)) else {
        *list = items.iter().map(without_directives).collect();
        return;
    };
    for item in items {
        let id = item.get(key);
        let position = id.and_then(|id| list.iter().position(|t| t.get(key) == Some(id)));
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = position {
                list.remove(i);
            }
            continue;
        }
        match position {
            Some(i) => strategic_merge(&mut list[i], item),
            None => list.push(without_directives(item)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn copy_amplification_should_be_refused_within_the_copy_budget() {
        // The attack: one small value, then copies of the whole growing map into itself, each
        // doubling it (22 operations would reach gigabytes).
        let mut ops = vec![json!({"op": "add", "path": "/d", "value": {"x": "y".repeat(1000)}})];
        for k in 0..40 {
            ops.push(json!({"op": "copy", "from": "/d", "path": format!("/d/k{k}")}));
        }
        let mut target = json!({"metadata": {"name": "x"}});
        let err = apply_patch(PatchKind::Json, &mut target, &Value::Array(ops), true)
            .expect_err("amplification refused");
        assert_eq!(err.code, 422);
        assert!(
            err.message.contains("accumulated size increase of copy"),
            "{err:?}"
        );
        // Honest copies within the budget still work.
        let mut target = json!({"a": {"b": 1}});
        let ops = json!([{"op": "copy", "from": "/a", "path": "/c"}]);
        apply_patch(PatchKind::Json, &mut target, &ops, true).expect("copy");
        assert_eq!(target, json!({"a": {"b": 1}, "c": {"b": 1}}));
    }

    #[test]
    fn a_json_patch_of_too_many_operations_should_be_413() {
        let ops: Vec<Value> = (0..=MAX_JSON_PATCH_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "/a", "value": 1}))
            .collect();
        let mut target = json!({"a": 1});
        let err = apply_patch(PatchKind::Json, &mut target, &Value::Array(ops), true)
            .expect_err("too many operations");
        assert_eq!(err.code, 413);
        assert_eq!(
            err.message,
            "The allowed maximum operations in a JSON patch is 10000, got 10001"
        );
    }

    #[test]
    fn strategic_merge_should_merge_keyed_lists_and_honour_directives() {
        let mut pod = json!({"metadata": {"labels": {"a": "1"}, "finalizers": ["x"]},
            "spec": {"containers": [{"name": "web", "image": "nginx:1"}, {"name": "side", "image": "busybox"}]}});
        let patch = json!({"metadata": {"labels": {"b": "2", "a": null}, "finalizers": ["y"]},
            "spec": {"$setElementOrder/containers": [{"name": "web"}],
                     "containers": [{"name": "web", "image": "nginx:2"}, {"name": "side", "$patch": "delete"}]}});
        strategic_merge(&mut pod, &patch);
        assert_eq!(
            pod,
            json!({"metadata": {"labels": {"b": "2"}, "finalizers": ["x", "y"]},
            "spec": {"containers": [{"name": "web", "image": "nginx:2"}]}})
        );
    }

    #[test]
    fn strategic_merge_should_replace_unkeyed_lists_and_maps_on_request() {
        let mut obj = json!({"spec": {"args": ["a", "b"], "selector": {"x": "1", "y": "2"}}});
        strategic_merge(
            &mut obj,
            &json!({"spec": {"args": ["c"], "selector": {"$patch": "replace", "z": "3"}}}),
        );
        assert_eq!(
            obj,
            json!({"spec": {"args": ["c"], "selector": {"z": "3"}}})
        );
    }

    #[test]
    fn strategic_patches_should_be_refused_for_custom_resources() {
        let mut obj = json!({});
        let err = apply_patch(PatchKind::Strategic, &mut obj, &json!({}), false).expect_err("415");
        assert_eq!(err.code, 415);
    }
}
