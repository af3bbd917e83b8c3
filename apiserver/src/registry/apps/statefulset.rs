//! StatefulSets: `SetDefaults_StatefulSet`, a selector matching the template, and
//! `printStatefulSet`'s row.

use serde_json::{Value, json};

use crate::defaults::{child, set};
use crate::printers::{AGE, Column, NAME, Row};
use crate::registry::Strategy;
use crate::registry::workload::{self, CONTAINERS, IMAGES, default_template, template_cells};
use krec_core::error::Cause;

const GROUP: &str = "apps";
const KIND: &str = "StatefulSet";

/// The StatefulSet strategy.
pub struct StatefulSetStrategy;

/// The StatefulSet strategy.
pub static STRATEGY: StatefulSetStrategy = StatefulSetStrategy;

impl Strategy for StatefulSetStrategy {
    /// `SetDefaults_StatefulSet`.
    fn default(&self, object: &mut Value) {
        let spec = child(object, "spec");
        set(spec, "replicas", json!(1));
        set(spec, "podManagementPolicy", json!("OrderedReady"));
        let strategy = child(spec, "updateStrategy");
        set(strategy, "type", json!("RollingUpdate"));
        if strategy["type"] == "RollingUpdate" {
            set(child(strategy, "rollingUpdate"), "partition", json!(0));
        }
        set(spec, "revisionHistoryLimit", json!(10));
        let retention = child(spec, "persistentVolumeClaimRetentionPolicy");
        set(retention, "whenDeleted", json!("Retain"));
        set(retention, "whenScaled", json!("Retain"));
        default_template(spec);
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[NAME, Column::text("Ready"), AGE, CONTAINERS, IMAGES];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        vec![
            row.name(),
            json!(format!(
                "{}/{}",
                row.int("/status/readyReplicas"),
                row.int("/spec/replicas")
            )),
            row.age(),
        ]
        .into_iter()
        .chain(template_cells(row, false))
        .collect()
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        workload::validate(GROUP, KIND, object, old)
    }
}
