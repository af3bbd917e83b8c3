//! The steps of an update that need nothing but the old and the new object, in the order
//! [`Store::update_locked`](super::Store) runs them — each kube-apiserver's too
//! (`rest.BeforeUpdate`, the status strategies, `ValidateObjectMetaUpdate`):
//!
//! 1. [`check_target`]: the body is an object of the URL's kind, name and namespace;
//! 2. [`check_precondition`]: its `resourceVersion` is the stored one (required for custom
//!    resources), and it was not written in another version meanwhile;
//! 3. [`status_strategy`]: through `/status` only the status changes, otherwise everything but
//!    the status;
//! 4. [`carry_system_fields`]: what the server owns is carried over (uid, creation and deletion
//!    stamps, name, namespace, managedFields);
//! 5. [`next_generation`]: `metadata.generation` is bumped when the spec changed;
//! 6. [`check_finalizers`]: a terminating object gains no finalizer.
//!
//! Then the store defaults and validates, runs the kind's strategy, records managedFields and
//! commits.

use serde_json::{Map, Value, json};

use super::write::spec_changed;
use super::{Store, meta_str, metadata_mut};
use crate::managed;
use crate::resources::ResourceType;
use krec_core::error::ApiError;
use krec_core::json::Pointer;

/// The body is an object of `rt`'s kind named as the URL names it (`status`: the URL is
/// `/status`, which the kind must serve).
///
/// # Errors
///
/// 400 for a body that is no object, of another kind, name or namespace; 404 for `/status` of a
/// kind without it.
pub(super) fn check_target(
    rt: &ResourceType,
    namespace: Option<&str>,
    name: &str,
    new: &Value,
    status: bool,
) -> Result<(), ApiError> {
    if !new.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    if status && !rt.status_subresource {
        return Err(ApiError::no_route(&format!("{}/{name}/status", rt.plural)));
    }
    Store::check_type(rt, new)?;
    if let Some(body_name) = meta_str(new, "name")
        && body_name != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if rt.namespaced
        && let (Some(url), Some(body)) = (namespace, meta_str(new, "namespace"))
        && url != body
    {
        return Err(ApiError::bad_request(format!(
            "the namespace of the provided object ({body}) does not match the namespace sent on the request ({url})"
        )));
    }
    Ok(())
}

/// The update is of the stored object: its `resourceVersion`, when given, is the stored one
/// (a custom resource must give it), and a kind with a conversion webhook was not written in
/// another version since it was read.
///
/// # Errors
///
/// 409 on a stale write; 422 for a custom resource without `resourceVersion`.
pub(super) fn check_precondition(
    rt: &ResourceType,
    name: &str,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    // Written in another version than the one stored: `reencode` came first, so the object
    // was written again in between — as kube-apiserver's storage would, a conflict.
    if rt.conversion.is_some() && !Store::in_version(rt, old) {
        return Err(ApiError::conflict(&rt.group, &rt.plural, name));
    }
    match meta_str(new, "resourceVersion").filter(|rv| !rv.is_empty()) {
        Some(rv) if Some(rv) != meta_str(old, "resourceVersion") => {
            Err(ApiError::conflict(&rt.group, &rt.plural, name))
        }
        None if rt.schema.is_some() => Err(ApiError::invalid(
            &rt.kind,
            &rt.group,
            name,
            vec![(
                "metadata.resourceVersion".into(),
                "Invalid value: 0x0: must be specified for an update".into(),
            )],
        )),
        _ => Ok(()),
    }
}

/// For a kind with a status subresource: through `/status` (`status`) only the status
/// changes — spec and metadata stay as stored, as kube-apiserver's status strategies keep
/// them; otherwise the stored status stays.
pub(super) fn status_strategy(rt: &ResourceType, status: bool, old: &Value, new: &mut Value) {
    if !rt.status_subresource {
        return;
    }
    let kept = if status {
        let new_status = new.get("status").cloned();
        *new = old.clone();
        new_status
    } else {
        old.get("status").cloned()
    };
    match kept {
        Some(s) => new["status"] = s,
        None => {
            new.as_object_mut().map(|m| m.remove("status"));
        }
    }
}

/// What the server owns is carried over from `old`: `apiVersion` and `kind` as served, `uid`,
/// `creationTimestamp`, the deletion stamps, `name` and `namespace`, and — unless the write is
/// a server-side apply (`applied`), which brings its own — the stored `managedFields`, for the
/// write's entry to be recorded into.
pub(super) fn carry_system_fields(rt: &ResourceType, old: &Value, new: &mut Value, applied: bool) {
    if let Some(map) = new.as_object_mut() {
        map.insert("apiVersion".into(), json!(rt.api_version()));
        map.insert("kind".into(), json!(rt.kind));
    }
    let no_meta = Map::new();
    let old_meta = old
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&no_meta);
    let meta = metadata_mut(new);
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "namespace",
        "name",
    ] {
        match old_meta.get(field) {
            Some(v) => meta.insert(field.into(), v.clone()),
            None => meta.remove(field),
        };
    }
    if !applied {
        // The entries are the client's when it wrote valid ones (or none at all with `[]` or
        // `[{}]`), else the stored ones (kept as they are when the body carried them back
        // unchanged, as a patch does), for `record_update` to change.
        let stored = old_meta.get("managedFields");
        match managed::given(meta.get("managedFields")) {
            managed::Given::Reset => {
                meta.remove("managedFields");
            }
            managed::Given::Entries => {}
            managed::Given::Stored => {
                if meta.get("managedFields") != stored {
                    match stored {
                        Some(entries) => meta.insert("managedFields".into(), entries.clone()),
                        None => meta.remove("managedFields"),
                    };
                }
            }
        }
    }
}

/// `metadata.generation`: the client never sets it; the stored one is carried over, one higher
/// when the spec changed (absent where the kind keeps none).
pub(super) fn next_generation(rt: &ResourceType, old: &Value, new: &mut Value) {
    let generation = old.at("/metadata/generation").and_then(Value::as_i64);
    let bump = spec_changed(rt, old, new);
    let meta = metadata_mut(new);
    match generation {
        Some(generation) => {
            let next = if bump {
                generation.saturating_add(1)
            } else {
                generation
            };
            meta.insert("generation".into(), json!(next));
        }
        None => {
            meta.remove("generation");
        }
    }
}

/// A terminating object cannot gain finalizers.
///
/// # Errors
///
/// 422 naming `metadata.finalizers`.
pub(super) fn check_finalizers(
    rt: &ResourceType,
    name: &str,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    if old.at("/metadata/deletionTimestamp").is_none() {
        return Ok(());
    }
    let names = |object: &Value| -> Vec<String> {
        object
            .at("/metadata/finalizers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str().map(str::to_owned))
            .collect()
    };
    let before = names(old);
    if names(new).iter().any(|f| !before.contains(f)) {
        return Err(ApiError::invalid(
            &rt.kind,
            &rt.group,
            name,
            vec![(
                "metadata.finalizers".into(),
                "Forbidden: no new finalizers can be added if the object is being deleted".into(),
            )],
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::resources::{ResourceTypes, builtin_type as kind};
    use crate::store::{Store, WriteOptions};

    #[test]
    fn the_target_should_be_the_urls_kind_name_and_namespace() {
        let cm = kind("", "ConfigMap");
        let body = json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x"}});
        assert!(check_target(&cm, Some("x"), "a", &body, false).is_ok());
        assert_eq!(
            check_target(&cm, Some("x"), "b", &body, false).map_err(|e| e.code),
            Err(400)
        );
        assert_eq!(
            check_target(&cm, Some("y"), "a", &body, false).map_err(|e| e.code),
            Err(400)
        );
        assert_eq!(
            check_target(&cm, Some("x"), "a", &json!([]), false).map_err(|e| e.code),
            Err(400)
        );
        let secret = json!({"kind": "Secret", "metadata": {"name": "a"}});
        assert_eq!(
            check_target(&cm, Some("x"), "a", &secret, false).map_err(|e| e.code),
            Err(400)
        );
        assert_eq!(
            check_target(&cm, Some("x"), "a", &body, true).map_err(|e| e.code),
            Err(404),
            "no /status"
        );
    }

    #[test]
    fn a_stale_resource_version_should_conflict() {
        let cm = kind("", "ConfigMap");
        let old = json!({"metadata": {"resourceVersion": "7"}});
        let at = |rv: &str| json!({"metadata": {"resourceVersion": rv}});
        assert!(check_precondition(&cm, "a", &old, &at("7")).is_ok());
        assert!(
            check_precondition(&cm, "a", &old, &json!({"metadata": {}})).is_ok(),
            "unconditional"
        );
        assert_eq!(
            check_precondition(&cm, "a", &old, &at("6")).map_err(|e| e.code),
            Err(409)
        );
    }

    #[test]
    fn status_and_spec_should_be_written_apart() {
        let deployment = kind("apps", "Deployment");
        let old = json!({"spec": {"replicas": 1}, "status": {"replicas": 1}});
        let mut through_status = json!({"spec": {"replicas": 9}, "status": {"replicas": 2}});
        status_strategy(&deployment, true, &old, &mut through_status);
        assert_eq!(
            through_status,
            json!({"spec": {"replicas": 1}, "status": {"replicas": 2}})
        );
        let mut whole = json!({"spec": {"replicas": 3}, "status": {"replicas": 9}});
        status_strategy(&deployment, false, &old, &mut whole);
        assert_eq!(
            whole,
            json!({"spec": {"replicas": 3}, "status": {"replicas": 1}})
        );
        let cm = kind("", "ConfigMap");
        let mut plain = json!({"data": {"a": "b"}, "status": {"x": 1}});
        status_strategy(&cm, false, &old, &mut plain);
        assert_eq!(
            plain["status"],
            json!({"x": 1}),
            "no subresource: written as sent"
        );
    }

    #[test]
    fn the_servers_fields_should_be_carried_over() {
        let cm = kind("", "ConfigMap");
        let old = json!({"metadata": {"name": "a", "namespace": "x", "uid": "u1",
            "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": [{"manager": "m"}]}});
        let mut new = json!({"metadata": {"name": "a", "uid": "forged",
            "deletionTimestamp": "2026-02-02T00:00:00Z"}});
        carry_system_fields(&cm, &old, &mut new, false);
        assert_eq!(new["apiVersion"], "v1");
        assert_eq!(new["kind"], "ConfigMap");
        assert_eq!(new["metadata"]["uid"], "u1");
        assert_eq!(new["metadata"]["namespace"], "x");
        assert!(new["metadata"].get("deletionTimestamp").is_none());
        assert_eq!(new["metadata"]["managedFields"], json!([{"manager": "m"}]));
        // As kube's field manager reads a client's entries: `[]` and `[{}]` clear them, valid
        // ones replace them, invalid ones leave the stored ones.
        for reset in [json!([]), json!([{}])] {
            let mut new = json!({"metadata": {"managedFields": reset}});
            carry_system_fields(&cm, &old, &mut new, false);
            assert!(new["metadata"].get("managedFields").is_none());
        }
        let valid = json!([{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}}]);
        let mut new = json!({"metadata": {"managedFields": valid.clone()}});
        carry_system_fields(&cm, &old, &mut new, false);
        assert_eq!(new["metadata"]["managedFields"], valid);
        let mut new =
            json!({"metadata": {"managedFields": [{"manager": "x", "operation": "Take"}]}});
        carry_system_fields(&cm, &old, &mut new, false);
        assert_eq!(new["metadata"]["managedFields"], json!([{"manager": "m"}]));
        let mut applied = json!({"metadata": {"managedFields": [{"manager": "apply"}]}});
        carry_system_fields(&cm, &old, &mut applied, true);
        assert_eq!(
            applied["metadata"]["managedFields"],
            json!([{"manager": "apply"}])
        );
    }

    #[test]
    fn the_generation_should_move_with_the_spec_only() {
        let deployment = kind("apps", "Deployment");
        let old = json!({"metadata": {"generation": 3}, "spec": {"replicas": 1}});
        let mut same =
            json!({"metadata": {"generation": 99, "labels": {"a": "b"}}, "spec": {"replicas": 1}});
        next_generation(&deployment, &old, &mut same);
        assert_eq!(same["metadata"]["generation"], 3);
        let mut scaled = json!({"metadata": {}, "spec": {"replicas": 2}});
        next_generation(&deployment, &old, &mut scaled);
        assert_eq!(scaled["metadata"]["generation"], 4);
    }

    #[test]
    fn a_terminating_object_should_gain_no_finalizer() {
        let cm = kind("", "ConfigMap");
        let old = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["a", "b"]}});
        let keep = json!({"metadata": {"finalizers": ["b"]}});
        assert!(
            check_finalizers(&cm, "x", &old, &keep).is_ok(),
            "removing is fine"
        );
        let add = json!({"metadata": {"finalizers": ["a", "c"]}});
        assert_eq!(
            check_finalizers(&cm, "x", &old, &add).map_err(|e| e.code),
            Err(422)
        );
        let live = json!({"metadata": {"finalizers": []}});
        assert!(
            check_finalizers(&cm, "x", &live, &add).is_ok(),
            "a live object may"
        );
    }

    /// The steps together, on an in-memory store: an unchanged update writes nothing, a spec
    /// change bumps generation and resourceVersion, a stale one conflicts.
    #[test]
    fn an_update_on_the_store_should_run_every_step() {
        let store = Store::new(Arc::new(ResourceTypes::new()));
        crate::store::ensure_namespaces(&store).expect("namespaces");
        let deployments = kind("apps", "Deployment");
        let created = store
            .create(
                &deployments,
                Some("default"),
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
                WriteOptions::default(),
            )
            .expect("create");
        let rv = created["metadata"]["resourceVersion"].clone();
        let same = store
            .update(
                &deployments,
                Some("default"),
                "web",
                (*created).clone(),
                false,
                WriteOptions::default(),
            )
            .expect("unchanged update");
        assert_eq!(same["metadata"]["resourceVersion"], rv, "nothing written");
        let mut scaled = (*created).clone();
        scaled["spec"]["replicas"] = json!(3);
        let updated = store
            .update(
                &deployments,
                Some("default"),
                "web",
                scaled.clone(),
                false,
                WriteOptions::default(),
            )
            .expect("update");
        assert_eq!(updated["metadata"]["generation"], 2);
        assert_ne!(updated["metadata"]["resourceVersion"], rv);
        let stale = store
            .update(
                &deployments,
                Some("default"),
                "web",
                scaled,
                false,
                WriteOptions::default(),
            )
            .expect_err("stale");
        assert_eq!(stale.code, 409);
    }
}
