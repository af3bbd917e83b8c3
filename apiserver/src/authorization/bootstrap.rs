//! The ClusterRoles and ClusterRoleBindings kube-apiserver makes at start
//! (`bootstrappolicy.ClusterRoles()` and `ClusterRoleBindings()`): `cluster-admin` for
//! `system:masters`; discovery, the version and health checks for every user (`system:discovery`,
//! `system:basic-user`, `system:public-info-viewer`); `/metrics` for `system:monitoring`; the
//! `admin`, `edit` and `view` roles to bind in namespaces, with the rules their aggregation
//! gives them (kube-controller-manager's aggregation controller writes them there);
//! `system:auth-delegator`. The objects are kube 1.36's, in `bootstrap-policy.json`.

use serde_json::Value;

use crate::store::{Store, WriteOptions};
use krec_core::ApiError;
use krec_core::json::Pointer as _;

const POLICY: &str = include_str!("bootstrap-policy.json");

/// Create the default roles and bindings that do not exist (a role someone deleted comes back
/// at the next start, as with kube-apiserver; one someone changed is left as it is).
///
/// # Errors
///
/// When the store refuses one.
pub fn ensure_policy(store: &Store) -> Result<(), ApiError> {
    let objects: Vec<Value> = serde_json::from_str(POLICY)
        .map_err(|err| ApiError::internal(format!("bootstrap-policy.json: {err}")))?;
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let Some(rt) = store.registry().by_kind(super::RBAC, "v1", kind) else {
            continue;
        };
        let name = object
            .at("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if store.contains(&rt, None, name) {
            continue;
        }
        let options = WriteOptions {
            manager: "kube-apiserver".into(),
            ..WriteOptions::default()
        };
        match store.create(&rt, None, object, options) {
            Err(err) if err.code != 409 => return Err(err),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::resources::ResourceTypes;

    #[test]
    fn the_default_policy_should_be_made_once() {
        let store = Store::new(Arc::new(ResourceTypes::new()));
        ensure_policy(&store).expect("made");
        let version = store.resource_version();
        ensure_policy(&store).expect("again");
        assert_eq!(store.resource_version(), version, "nothing written twice");
        let roles = store
            .registry()
            .by_kind(super::super::RBAC, "v1", "ClusterRole");
        let roles = store.objects(&roles.expect("served"), None);
        for name in ["cluster-admin", "admin", "edit", "view", "system:discovery"] {
            assert!(
                roles
                    .iter()
                    .any(|r| r.at("/metadata/name") == Some(&name.into())),
                "{name}"
            );
        }
    }
}
