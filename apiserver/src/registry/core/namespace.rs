//! Namespaces: names are DNS labels, a new one is `Active`, and a deleted one is `Terminating`
//! until everything in it is gone.

use serde_json::{Value, json};

use crate::json::Pointer;
use crate::registry::{Deletion, Strategy};

/// The Namespace strategy.
pub struct NamespaceStrategy;

/// The Namespace strategy.
pub static STRATEGY: NamespaceStrategy = NamespaceStrategy;

impl Strategy for NamespaceStrategy {
    fn name_is_label(&self) -> bool {
        true
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
}
