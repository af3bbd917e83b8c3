//! CustomResourceDefinitions: accepted names, stored versions and conditions in their status;
//! API approval and conversion checked; `spec.scope` immutable; the types they define served
//! while they are stored, and their custom resources deleted before they go.

use serde_json::{Value, json};

use super::{approval, conversion, validation};
use crate::defaults::{child, set};
use crate::printers::{Column, NAME, Row};
use crate::registry::{Deletion, Strategy};
use crate::resources::ResourceTypes;
use crate::{resources, timestamp};
use krec_core::error::Cause;
use krec_core::json::Pointer;

/// The CustomResourceDefinition strategy.
pub struct CrdStrategy;

/// The CustomResourceDefinition strategy.
pub static STRATEGY: CrdStrategy = CrdStrategy;

impl Strategy for CrdStrategy {
    /// `SetDefaults_CustomResourceDefinitionSpec`'s conversion: `strategy: None`, and port 443
    /// for a conversion webhook reached through a Service.
    fn default(&self, crd: &mut Value) {
        let conversion = child(child(crd, "spec"), "conversion");
        set(conversion, "strategy", json!("None"));
        if let Some(service) = conversion.pointer_mut("/webhook/clientConfig/service")
            && service.is_object()
        {
            set(service, "port", json!(443));
        }
    }

    fn columns(&self) -> &'static [Column] {
        CREATED_AT
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        created_at(row)
    }

    fn keeps_status_on_create(&self) -> bool {
        true
    }

    fn prepare_for_create(&self, object: &mut Value, _: &mut dyn Iterator<Item = &Value>) {
        accept(object);
    }

    fn prepare_for_update(&self, old: &Value, new: &mut Value) -> Result<(), Vec<Cause>> {
        let old_scope = old.at("/spec/scope");
        if old_scope.is_some() && old_scope != new.at("/spec/scope") {
            return Err(vec![(
                "spec.scope".into(),
                format!(
                    "Invalid value: {}: field is immutable",
                    new.at("/spec/scope").unwrap_or(&Value::Null)
                ),
            )]);
        }
        if old.at("/metadata/deletionTimestamp").is_none() {
            accept(new);
            // storedVersions only grows: objects may still be stored in an older version.
            let mut stored: Vec<Value> = old
                .at("/status/storedVersions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for v in new
                .at("/status/storedVersions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
            {
                if !stored.contains(&v) {
                    stored.push(v);
                }
            }
            new["status"]["storedVersions"] = json!(stored);
        }
        Ok(())
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = validation::validate(object, old);
        causes.extend(conversion::validate(object));
        causes.extend(approval::validate(object, old));
        causes
    }

    fn validate_servable(&self, object: &Value) -> Result<(), String> {
        resources::types_from_crd(object)
            .map(|_| ())
            .map_err(|e| e.0)
    }

    fn deletion(&self) -> Deletion {
        Deletion::AfterInstances
    }

    fn mark_deleting(&self, marked: &mut Value) {
        if let Some(conditions) = marked
            .at_mut("/status/conditions")
            .and_then(Value::as_array_mut)
        {
            conditions.push(json!({"type": "Terminating", "status": "True",
                "lastTransitionTime": timestamp::now_rfc3339(),
                "reason": "InstanceDeletionInProgress",
                "message": "CustomResource deletion is in progress"}));
        }
    }

    fn after_write(&self, registry: &ResourceTypes, stored: &Value) {
        if let Err(err) = registry.put_crd(stored) {
            let name = stored
                .at("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("?");
            tracing::warn!("CRD {name} is not servable: {err}");
        }
    }

    fn after_remove(&self, registry: &ResourceTypes, name: &str) {
        registry.remove_crd(name);
    }
}

/// The status of an accepted CRD: its names accepted, its storage version stored, `NamesAccepted`
/// and `Established` (and API approval's condition).
fn accept(object: &mut Value) {
    let names = object.at("/spec/names").cloned().unwrap_or_default();
    let stored: Vec<Value> = object
        .at("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .filter_map(|v| v.get("name").cloned())
        .collect();
    let now = timestamp::now_rfc3339();
    let condition = |t: &str, reason: &str, message: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message});
    let mut conditions = vec![
        condition("NamesAccepted", "NoConflicts", "no conflicts found"),
        condition(
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        ),
    ];
    conditions.extend(approval::condition(object, &now));
    object["status"] = json!({
        "acceptedNames": names,
        "storedVersions": stored,
        "conditions": conditions,
    });
}

/// The Table of kinds printed with their creation time (CRDs, Roles, ClusterRoles).
pub(crate) const CREATED_AT: &[Column] = &[NAME, Column::text("Created At")];

/// The cells of [`CREATED_AT`].
pub(crate) fn created_at(row: &Row<'_>) -> Vec<Value> {
    vec![row.name(), json!(row.str("/metadata/creationTimestamp"))]
}
