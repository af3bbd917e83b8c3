//! ReplicationControllers: one replica by default, selectable by `status.replicas`.

use serde_json::{Value, json};

use crate::defaults::{child, set};
use crate::registry::Strategy;
use crate::registry::workload::default_template;
use krec_core::selector::FieldLabel;

/// The ReplicationController strategy.
pub struct ReplicationControllerStrategy;

/// The ReplicationController strategy.
pub static STRATEGY: ReplicationControllerStrategy = ReplicationControllerStrategy;

impl Strategy for ReplicationControllerStrategy {
    fn default(&self, object: &mut Value) {
        let spec = child(object, "spec");
        set(spec, "replicas", json!(1));
        default_template(spec);
    }

    fn field_labels(&self) -> &'static [FieldLabel] {
        &[("status.replicas", "/status/replicas", "0")]
    }
}
