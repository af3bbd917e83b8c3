//! Namespaces: names are DNS labels, each carries its `kubernetes.io/metadata.name` label, a new
//! one is `Active`, and a deleted one is `Terminating` until everything in it is gone.

use serde_json::{Value, json};

use crate::defaults::{child, set};
use crate::printers::{AGE, Column, NAME, Row};
use crate::registry::{Deletion, Names, Strategy};
use krec_core::json::Pointer;
use krec_core::selector::FieldLabel;

/// The Namespace strategy.
pub struct NamespaceStrategy;

/// The Namespace strategy.
pub static STRATEGY: NamespaceStrategy = NamespaceStrategy;

impl Strategy for NamespaceStrategy {
    /// `SetDefaults_Namespace` and the namespace strategy: the `kubernetes.io/metadata.name`
    /// label, the `kubernetes` finalizer, and `Active`.
    fn default(&self, object: &mut Value) {
        let name = object
            .at("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(name) = name {
            let labels = child(child(object, "metadata"), "labels");
            labels["kubernetes.io/metadata.name"] = json!(name);
        }
        let spec = child(object, "spec");
        set(spec, "finalizers", json!(["kubernetes"]));
        set(child(object, "status"), "phase", json!("Active"));
    }

    fn names(&self) -> Names {
        Names::Label
    }

    fn prepare_for_create(&self, object: &mut Value, _: &mut dyn Iterator<Item = &Value>) {
        if object.at("/status/phase").is_none() {
            object["status"] = json!({"phase": "Active"});
        }
    }

    fn deletion(&self) -> Deletion {
        Deletion::AfterContents
    }

    fn mark_deleting(&self, marked: &mut Value) {
        marked["status"] = json!({"phase": "Terminating"});
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[NAME, Column::text("Status"), AGE];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        vec![row.name(), json!(row.str("/status/phase")), row.age()]
    }

    fn field_labels(&self) -> &'static [FieldLabel] {
        &[("status.phase", "/status/phase", "")]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_should_be_labelled_with_its_name_and_finalized_by_kubernetes() {
        let mut ns = json!({"metadata": {"name": "demo"}});
        STRATEGY.default(&mut ns);
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "demo"
        );
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(ns["status"]["phase"], "Active");
    }
}
