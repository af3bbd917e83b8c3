//! What each kind does beyond the generic store, one file per kind, as kube-apiserver's
//! `pkg/registry/<group>/<kind>/strategy.go`: a [`Strategy`] per kind with behaviour of its own
//! — its name rule, string maps, what a create prepares, what an update may not change, how its
//! objects are deleted, what a stored object sets off — and [`GENERIC`] for every other kind.
//! The store asks [`strategy`] and never names a kind.

use serde_json::Value;

use crate::error::{ApiError, Cause};
use crate::resources::{Registry, ResourceType};

pub mod apiextensions;
pub mod core;

/// How a kind's objects are deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// At once, or once its finalizers are gone.
    Finalizers,
    /// Marked, then removed when its kubelet confirms (or at once when graceful termination is
    /// off, it never ran or it finished): Pods.
    Graceful,
    /// Held until everything in it is gone: Namespaces.
    AfterContents,
    /// Held until the objects of the types it defines are gone: CRDs.
    AfterInstances,
}

/// A kind's behaviour beyond the generic store's (kube-apiserver's `RESTCreateStrategy`,
/// `RESTUpdateStrategy` and `RESTDeleteStrategy` hooks). Every method has the generic kind's
/// answer as its default.
pub trait Strategy: Send + Sync {
    /// Whether its names are DNS labels (63 characters, no dots) rather than subdomains.
    fn name_is_label(&self) -> bool {
        false
    }

    /// Top-level fields that are maps of strings (Go `map[string]string` or `map[string][]byte`),
    /// whose other values the decoder refuses.
    fn string_maps(&self) -> &'static [&'static str] {
        &[]
    }

    /// Whether a create keeps the `status` it is given although the kind has a status
    /// subresource.
    fn keeps_status_on_create(&self) -> bool {
        false
    }

    /// Defaults a new object gets beyond the kind's defaulters (before mutating admission).
    fn default_on_create(&self, _object: &mut Value) {}

    /// What a create sets before it is stored (`PrepareForCreate`); `siblings` are the stored
    /// objects of the same resource.
    fn prepare_for_create(&self, _object: &mut Value, _siblings: &mut dyn Iterator<Item = &Value>) {
    }

    /// What an update of the whole object (not its status) sets or refuses before it is stored
    /// (`PrepareForUpdate` and `ValidateUpdate`): causes of a 422.
    ///
    /// # Errors
    ///
    /// The update's problems.
    fn prepare_for_update(&self, _old: &Value, _new: &mut Value) -> Result<(), Vec<Cause>> {
        Ok(())
    }

    /// The kind's own validation of a written object (`old`: the stored one of an update).
    fn validate(&self, _object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        Vec::new()
    }

    /// The kind's validation that needs the object to be well formed first (after schema and
    /// built-in validation).
    ///
    /// # Errors
    ///
    /// The message of a 422 on `spec`.
    fn validate_servable(&self, _object: &Value) -> Result<(), String> {
        Ok(())
    }

    /// How its objects are deleted.
    fn deletion(&self) -> Deletion {
        Deletion::Finalizers
    }

    /// What marking an object for deletion sets beyond `deletionTimestamp`.
    fn mark_deleting(&self, _marked: &mut Value) {}

    /// What a stored object sets off in the server (a CRD serves its types).
    fn after_write(&self, _registry: &Registry, _stored: &Value) {}

    /// What removing the object named `name` for good sets off (a CRD's types stop).
    fn after_remove(&self, _registry: &Registry, _name: &str) {}
}

/// The strategy of every kind without behaviour of its own.
pub struct Generic;

impl Strategy for Generic {}

/// The generic strategy.
pub static GENERIC: Generic = Generic;

/// The strategy of `rt`'s kind.
pub fn strategy(rt: &ResourceType) -> &'static dyn Strategy {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => &core::pod::STRATEGY,
        ("", "Namespace") => &core::namespace::STRATEGY,
        ("", "Service") => &core::service::STRATEGY,
        ("", "ConfigMap") => &core::configmap::STRATEGY,
        ("", "Secret") => &core::secret::STRATEGY,
        ("apiextensions.k8s.io", "CustomResourceDefinition") => &apiextensions::crd::STRATEGY,
        _ => &GENERIC,
    }
}

/// A 422 for `rt`'s object `name` with `causes`.
pub(crate) fn invalid(rt: &ResourceType, name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(&rt.kind, &rt.group, name, causes)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::json::Pointer;
    use crate::resources::builtin_type as kind;

    #[test]
    fn each_kind_should_find_its_own_strategy() {
        assert_eq!(strategy(&kind("", "Pod")).deletion(), Deletion::Graceful);
        assert_eq!(
            strategy(&kind("", "Namespace")).deletion(),
            Deletion::AfterContents
        );
        assert!(strategy(&kind("", "Namespace")).name_is_label());
        let crd = strategy(&kind("apiextensions.k8s.io", "CustomResourceDefinition"));
        assert_eq!(crd.deletion(), Deletion::AfterInstances);
        assert!(crd.keeps_status_on_create());
        assert_eq!(
            strategy(&kind("", "Secret")).string_maps(),
            &["data", "stringData"]
        );
        let generic = strategy(&kind("apps", "Deployment"));
        assert_eq!(generic.deletion(), Deletion::Finalizers);
        assert!(!generic.name_is_label() && generic.string_maps().is_empty());
    }

    #[test]
    fn a_new_service_should_get_a_free_cluster_ip_and_node_ports() {
        let taken = json!({"spec": {"clusterIP": "10.96.0.10",
            "ports": [{"port": 80, "nodePort": 30000}]}});
        let mut service = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        strategy(&kind("", "Service")).prepare_for_create(&mut service, &mut [&taken].into_iter());
        assert_eq!(service.at("/spec/clusterIP"), Some(&json!("10.96.0.11")));
        assert_eq!(service.at("/spec/clusterIPs"), Some(&json!(["10.96.0.11"])));
        assert_eq!(service.at("/spec/ports/0/nodePort"), Some(&json!(30001)));
    }

    #[test]
    fn a_crd_update_should_keep_its_scope_and_every_stored_version() {
        let crd = strategy(&kind("apiextensions.k8s.io", "CustomResourceDefinition"));
        let old = json!({"spec": {"scope": "Namespaced"}, "status": {"storedVersions": ["v1"]}});
        let mut moved = json!({"spec": {"scope": "Cluster"}});
        let causes = crd
            .prepare_for_update(&old, &mut moved)
            .expect_err("immutable");
        assert_eq!(causes[0].0, "spec.scope");
        let mut next = json!({"spec": {"scope": "Namespaced", "names": {"kind": "Foo"},
            "versions": [{"name": "v2", "storage": true}]}});
        crd.prepare_for_update(&old, &mut next).expect("an update");
        assert_eq!(
            next.at("/status/storedVersions"),
            Some(&json!(["v1", "v2"]))
        );
    }
}
