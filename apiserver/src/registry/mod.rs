//! What each kind does beyond the generic store, one file per kind, as kube-apiserver's
//! `pkg/registry/<group>/<kind>/strategy.go`: a [`Strategy`] per kind with behaviour of its own
//! — its name rule, string maps, what a create prepares, what an update may not change, how its
//! objects are deleted, what a stored object sets off — and [`GENERIC`] for every other kind.
//! The store asks [`strategy`] and never names a kind.

use serde_json::Value;

use crate::printers::{Column, NAME_AGE, Row};
use crate::resources::{ResourceType, ResourceTypes};
use krec_core::error::{ApiError, Cause};
use krec_core::selector::FieldLabel;

pub mod admissionregistration;
pub mod apiextensions;
pub mod apps;
pub mod batch;
pub mod coordination;
pub mod core;
pub mod discovery;
pub mod rbac;
#[cfg(feature = "server")]
mod table;
mod workload;

#[cfg(feature = "server")]
pub use table::table;

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

/// What an object's name must be, as kube-apiserver's `ValidateObjectMeta` name functions
/// have it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Names {
    /// A lowercase RFC 1123 subdomain (most kinds).
    Subdomain,
    /// A lowercase RFC 1123 label: 63 characters, no dots (Namespaces).
    Label,
    /// Any path segment: no `/` or `%`, not `.` or `..` (RBAC's roles and bindings, whose
    /// names are often `system:…`).
    PathSegment,
}

/// A kind's behaviour beyond the generic store's (kube-apiserver's `RESTCreateStrategy`,
/// `RESTUpdateStrategy` and `RESTDeleteStrategy` hooks, its defaulters, its table convertor and
/// its field label conversion). Every method has the generic kind's answer as its default.
pub trait Strategy: Send + Sync {
    /// Fill in the values kube-apiserver's defaulters (`SetDefaults_*` of
    /// `pkg/apis/<group>/v1`) give an object of the kind: applied to every write's body
    /// (create, update, and the result of a patch), as kube-apiserver applies them when it
    /// decodes a request. A field counts as unset when it is absent, `null`, or the Go zero
    /// value of a value field (`""`); pointers set to zero are kept.
    fn default(&self, _object: &mut Value) {}

    /// What its names must be: a DNS subdomain unless it says otherwise.
    fn names(&self) -> Names {
        Names::Subdomain
    }

    /// Top-level fields that are maps of strings (Go `map[string]string` or `map[string][]byte`),
    /// whose other values the decoder refuses.
    fn string_maps(&self) -> &'static [&'static str] {
        &[]
    }

    /// Those of [`string_maps`](Self::string_maps) whose values are bytes (Go
    /// `map[string][]byte`): each value must be standard base64, or the decoder refuses it.
    fn bytes_maps(&self) -> &'static [&'static str] {
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

    /// The kind's own validation of a written object (`old`: the stored one of an update), with
    /// the field paths and messages kube-apiserver gives.
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
    fn after_write(&self, _registry: &ResourceTypes, _stored: &Value) {}

    /// What removing the object named `name` for good sets off (a CRD's types stop).
    fn after_remove(&self, _registry: &ResourceTypes, _name: &str) {}

    /// The columns of the kind's Table (`pkg/printers/internalversion`), what `kubectl get`
    /// shows.
    fn columns(&self) -> &'static [Column] {
        NAME_AGE
    }

    /// The cells of `row`'s object, one per [column](Self::columns).
    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        vec![row.name(), row.age()]
    }

    /// The field labels the kind can be selected by besides `metadata.name` and
    /// `metadata.namespace` (its registry's `GetAttrs` and field label conversion).
    fn field_labels(&self) -> &'static [FieldLabel] {
        &[]
    }
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
        ("", "ReplicationController") => &core::replicationcontroller::STRATEGY,
        ("", "Endpoints") => &core::endpoints::STRATEGY,
        ("", "Node") => &core::node::STRATEGY,
        ("", "Event") => &core::event::STRATEGY,
        ("events.k8s.io", "Event") => &core::event::EVENTS_STRATEGY,
        ("apps", "Deployment") => &apps::deployment::STRATEGY,
        ("apps", "ReplicaSet") => &apps::replicaset::STRATEGY,
        ("apps", "StatefulSet") => &apps::statefulset::STRATEGY,
        ("apps", "DaemonSet") => &apps::daemonset::STRATEGY,
        ("batch", "Job") => &batch::job::STRATEGY,
        ("batch", "CronJob") => &batch::cronjob::STRATEGY,
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => &rbac::role::STRATEGY,
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            &rbac::rolebinding::STRATEGY
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            &admissionregistration::webhookconfiguration::VALIDATING
        }
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            &admissionregistration::webhookconfiguration::MUTATING
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            &admissionregistration::policy::POLICY
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            &admissionregistration::policy::BINDING
        }
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicy") => {
            &admissionregistration::policy::MUTATING_POLICY
        }
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding") => {
            &admissionregistration::policy::MUTATING_BINDING
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => &apiextensions::crd::STRATEGY,
        ("discovery.k8s.io", "EndpointSlice") => &discovery::endpointslice::STRATEGY,
        ("coordination.k8s.io", "Lease") => &coordination::lease::STRATEGY,
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
    use crate::resources::builtin_type as kind;
    use krec_core::json::Pointer;

    #[test]
    fn each_kind_should_find_its_own_strategy() {
        assert_eq!(strategy(&kind("", "Pod")).deletion(), Deletion::Graceful);
        assert_eq!(
            strategy(&kind("", "Namespace")).deletion(),
            Deletion::AfterContents
        );
        assert_eq!(strategy(&kind("", "Namespace")).names(), Names::Label);
        let crd = strategy(&kind("apiextensions.k8s.io", "CustomResourceDefinition"));
        assert_eq!(crd.deletion(), Deletion::AfterInstances);
        assert!(crd.keeps_status_on_create());
        assert_eq!(
            strategy(&kind("", "Secret")).string_maps(),
            &["data", "stringData"]
        );
        let generic = strategy(&kind("", "ServiceAccount"));
        assert_eq!(generic.deletion(), Deletion::Finalizers);
        assert!(generic.names() == Names::Subdomain && generic.string_maps().is_empty());
        assert_eq!(generic.columns(), crate::printers::NAME_AGE);
        assert!(generic.field_labels().is_empty());
    }

    #[test]
    fn every_kinds_row_should_have_a_cell_for_each_column() {
        let now = jiff::Timestamp::now();
        let object = json!({"metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"completions": 1}});
        for rt in crate::resources::builtins() {
            let strategy = strategy(&rt);
            let cells = strategy.cells(&Row {
                object: &object,
                now,
            });
            assert_eq!(cells.len(), strategy.columns().len(), "{}", rt.kind);
            let names = strategy
                .columns()
                .iter()
                .filter(|c| c.name == "Name")
                .count();
            assert_eq!(names, 1, "{}: one Name column", rt.kind);
        }
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
