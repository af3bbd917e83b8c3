//! Patch formats: JSON merge patch, JSON patch, strategic merge patch and server-side apply.
//!
//! Strategic merge patch (`strategic`) follows the patch strategies of kube-apiserver's
//! definitions of the built-in kinds; custom resources refuse it, as on kube-apiserver.
//! Server-side apply, with field ownership, is [`crate::managed`]'s.

mod strategic;

pub use strategic::{PatchMeta, strategic_merge};

use serde_json::Value;

use krec_core::error::ApiError;

/// Most operations one JSON patch may have (kube-apiserver's `maxJSONPatchOperations`).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;
/// Most bytes the `copy` operations of one JSON patch may add, counted as the JSON text of each
/// copied value (kube-apiserver's `--json-patch-max-copy-bytes` default, the 3 MiB request
/// limit). Without it, a patch of a few dozen `copy` operations, each doubling the object, would
/// grow it exponentially.
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 << 20;

pub use krec_core::PatchType;

/// Apply `body` (already decoded) to `target`. `meta` holds a built-in kind's patch strategies;
/// `None` (custom resources) refuses strategic merge, as kube-apiserver does.
pub fn apply_patch(
    kind: PatchType,
    target: &mut Value,
    body: &Value,
    meta: Option<PatchMeta>,
) -> Result<(), ApiError> {
    match kind {
        PatchType::Merge => {
            require_object(body)?;
            json_patch::merge(target, body);
        }
        PatchType::Json => json_patch_bounded(target, body)?,
        PatchType::Strategic => {
            let Some(meta) = meta else {
                return Err(ApiError::unsupported_media_type(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                ));
            };
            require_object(body)?;
            strategic_merge(target, body, meta)?;
        }
        PatchType::Apply => {
            require_object(body)?;
            match meta {
                Some(meta) => strategic_merge(target, body, meta)?,
                None => json_patch::merge(target, body),
            }
        }
    }
    Ok(())
}

/// What a patch request stores: the current object with `body` applied or, when the object does
/// not exist, `body` itself for server-side apply (which creates) and nothing for other patches.
pub fn patched(
    kind: PatchType,
    body: &Value,
    meta: Option<PatchMeta>,
    current: Option<&Value>,
) -> Result<Option<Value>, ApiError> {
    match current {
        Some(current) => {
            let mut patched = current.clone();
            // A JSON patch that reads or moves `managedFields` sees each `fieldsV1` as JSON,
            // as on kube-apiserver, not as the text stored objects keep.
            if kind == PatchType::Json && reaches_managed_fields(body) {
                crate::managed::expand(&mut patched);
            }
            apply_patch(kind, &mut patched, body, meta)?;
            Ok(Some(patched))
        }
        None if kind == PatchType::Apply => Ok(Some(body.clone())),
        None => Ok(None),
    }
}

/// Whether an operation of the RFC 6902 patch `body` has a `path` or `from` at or above
/// `/metadata/managedFields/…/fieldsV1`.
fn reaches_managed_fields(body: &Value) -> bool {
    const FIELDS: &str = "/metadata/managedFields";
    let reaches = |pointer: &str| {
        pointer.starts_with(FIELDS) || FIELDS.starts_with(pointer) && !pointer.ends_with('/')
    };
    body.as_array().into_iter().flatten().any(|op| {
        ["path", "from"]
            .iter()
            .filter_map(|field| op.get(*field).and_then(Value::as_str))
            .any(reaches)
    })
}

/// Why a JSON patch was not applied.
#[derive(Debug, thiserror::Error)]
pub enum JsonPatchError {
    /// More than [`MAX_JSON_PATCH_OPERATIONS`] operations.
    #[error(
        "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {0}"
    )]
    TooManyOperations(usize),
    /// Its `copy` operations would add more than [`MAX_JSON_PATCH_COPY_BYTES`].
    #[error(
        "Unable to complete the copy, the accumulated size increase of copy is {0}, exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}"
    )]
    CopyTooLarge(usize),
    /// Not an RFC 6902 patch.
    #[error("invalid JSON patch: {0}")]
    Invalid(String),
    /// An operation would nest the object deeper than [`MAX_PATCHED_DEPTH`].
    #[error("the patched object would be nested deeper than {MAX_PATCHED_DEPTH} levels")]
    TooDeep,
    /// An operation failed (a path that does not exist, a failed `test`).
    #[error("{0}")]
    Failed(String),
}

/// Deepest nesting a JSON patch may give an object: the depth of any object a client can send
/// (the JSON decoder's recursion limit). Without it, `add` and `move` operations could nest an
/// object a hundred thousand levels deep — past what the recursive code that stores, serializes
/// and drops it has stack for.
pub const MAX_PATCHED_DEPTH: usize = 128;

/// Apply the RFC 6902 patch `body` to `target` within kube-apiserver's bounds: at most
/// [`MAX_JSON_PATCH_OPERATIONS`] operations and [`MAX_JSON_PATCH_COPY_BYTES`] copied (kube's
/// `JSONPatchMaxCopyBytes`, which bounds a PATCH request's patch and a mutating webhook's
/// alike). Operations apply one at a time, so the size of what each `copy` duplicates is known
/// before it is made; on an error `target` is half-patched and must be discarded (callers patch
/// a copy).
///
/// # Errors
///
/// [`JsonPatchError`].
pub fn apply_json_patch(target: &mut Value, body: &Value) -> Result<(), JsonPatchError> {
    let ops = body
        .as_array()
        .ok_or_else(|| JsonPatchError::Invalid("the body must be a JSON array".into()))?;
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(JsonPatchError::TooManyOperations(ops.len()));
    }
    let ops: json_patch::Patch =
        serde_json::from_value(body.clone()).map_err(|e| JsonPatchError::Invalid(e.to_string()))?;
    let mut copied = 0usize;
    for op in ops.0 {
        if let json_patch::PatchOperation::Copy(copy) = &op
            && let Some(value) = target.pointer(copy.from.as_str())
        {
            copied = copied.saturating_add(krec_core::json::encoded_len(value));
            if copied > MAX_JSON_PATCH_COPY_BYTES {
                return Err(JsonPatchError::CopyTooLarge(copied));
            }
        }
        // What an operation places sits at its path's depth, plus its own: checked before it
        // is placed, so the object is never deeper than the bound (and every walk of it stays
        // shallow).
        let placed = match &op {
            json_patch::PatchOperation::Add(add) => Some((&add.path, depth(&add.value))),
            json_patch::PatchOperation::Replace(replace) => {
                Some((&replace.path, depth(&replace.value)))
            }
            json_patch::PatchOperation::Move(op) => {
                Some((&op.path, pointed_depth(target, &op.from)))
            }
            json_patch::PatchOperation::Copy(op) => {
                Some((&op.path, pointed_depth(target, &op.from)))
            }
            _ => None,
        };
        if let Some((path, value_depth)) = placed
            && path.as_str().split('/').count().saturating_sub(1) + value_depth > MAX_PATCHED_DEPTH
        {
            return Err(JsonPatchError::TooDeep);
        }
        json_patch::patch(target, &[op]).map_err(|e| JsonPatchError::Failed(e.to_string()))?;
    }
    Ok(())
}

/// The depth of the value `pointer` names in `target` (0 when there is none).
fn pointed_depth(target: &Value, pointer: &json_patch::jsonptr::PointerBuf) -> usize {
    target.pointer(pointer.as_str()).map_or(0, depth)
}

/// How deeply `value` nests: 0 for a scalar, 1 for an array or object of scalars, …
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// [`apply_json_patch`] for a PATCH request: too many operations is a 413, a patch that is not
/// one a 400, one that cannot be applied a 422, as on kube-apiserver.
fn json_patch_bounded(target: &mut Value, body: &Value) -> Result<(), ApiError> {
    apply_json_patch(target, body).map_err(|err| match err {
        JsonPatchError::TooManyOperations(_) => ApiError::too_large_message(err.to_string()),
        JsonPatchError::Invalid(_) => ApiError::bad_request(err.to_string()),
        JsonPatchError::CopyTooLarge(_) | JsonPatchError::TooDeep | JsonPatchError::Failed(_) => {
            ApiError::invalid(
                "",
                "",
                "",
                vec![(
                    "patch".into(),
                    format!("the JSON patch could not be applied: {err}"),
                )],
            )
        }
    })
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_patch_nesting_the_object_ever_deeper_should_be_refused() {
        // Each round adds a 100-deep value and moves what was built into its leaf: 10 000
        // operations would nest it 500 000 deep, past any recursive walk's stack.
        let deep = |levels: usize| (0..levels).fold(json!(1), |inner, _| json!({ "n": inner }));
        let leaf = format!("/b{}", "/n".repeat(99));
        let mut ops = vec![json!({"op": "add", "path": "/a", "value": deep(100)})];
        for _ in 0..50 {
            ops.push(json!({"op": "add", "path": "/b", "value": deep(100)}));
            ops.push(json!({"op": "move", "from": "/a", "path": leaf}));
            ops.push(json!({"op": "move", "from": "/b", "path": "/a"}));
        }
        let mut target = json!({});
        let err = apply_json_patch(&mut target, &Value::Array(ops)).expect_err("too deep");
        assert!(matches!(err, JsonPatchError::TooDeep), "{err}");
        // A patch within the bound applies.
        let mut target = json!({});
        let ops = json!([{"op": "add", "path": "/a", "value": deep(100)}]);
        apply_json_patch(&mut target, &ops).expect("100 deep");
    }

    #[test]
    fn copy_amplification_should_be_refused_within_the_copy_budget() {
        // The attack: one small value, then copies of the whole growing map into itself, each
        // doubling it (22 operations would reach gigabytes).
        let mut ops = vec![json!({"op": "add", "path": "/d", "value": {"x": "y".repeat(1000)}})];
        for k in 0..40 {
            ops.push(json!({"op": "copy", "from": "/d", "path": format!("/d/k{k}")}));
        }
        let mut target = json!({"metadata": {"name": "x"}});
        let err = apply_patch(PatchType::Json, &mut target, &Value::Array(ops), None)
            .expect_err("amplification refused");
        assert_eq!(err.code, 422);
        assert!(
            err.message.contains("accumulated size increase of copy"),
            "{err:?}"
        );
        // Honest copies within the budget still work.
        let mut target = json!({"a": {"b": 1}});
        let ops = json!([{"op": "copy", "from": "/a", "path": "/c"}]);
        apply_patch(PatchType::Json, &mut target, &ops, None).expect("copy");
        assert_eq!(target, json!({"a": {"b": 1}, "c": {"b": 1}}));
    }

    #[test]
    fn a_json_patch_of_too_many_operations_should_be_413() {
        let ops: Vec<Value> = (0..=MAX_JSON_PATCH_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "/a", "value": 1}))
            .collect();
        let mut target = json!({"a": 1});
        let err = apply_patch(PatchType::Json, &mut target, &Value::Array(ops), None)
            .expect_err("too many operations");
        assert_eq!(err.code, 413);
        assert_eq!(
            err.message,
            "The allowed maximum operations in a JSON patch is 10000, got 10001"
        );
    }

    #[test]
    fn strategic_patches_should_be_refused_for_custom_resources() {
        let mut obj = json!({});
        let err = apply_patch(PatchType::Strategic, &mut obj, &json!({}), None).expect_err("415");
        assert_eq!(err.code, 415);
    }
}
