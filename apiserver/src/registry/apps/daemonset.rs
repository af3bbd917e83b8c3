//! DaemonSets: `SetDefaults_DaemonSet`, a selector matching the template, and
//! `printDaemonSet`'s row.

use serde_json::{Value, json};

use crate::defaults::{child, set};
use crate::printers::{AGE, Column, NAME, Row, map_text};
use crate::registry::Strategy;
use crate::registry::workload::{
    self, CONTAINERS, IMAGES, SELECTOR, default_template, template_cells,
};
use krec_core::error::Cause;
use krec_core::json::Pointer;

const GROUP: &str = "apps";
const KIND: &str = "DaemonSet";

/// The DaemonSet strategy.
pub struct DaemonSetStrategy;

/// The DaemonSet strategy.
pub static STRATEGY: DaemonSetStrategy = DaemonSetStrategy;

impl Strategy for DaemonSetStrategy {
    /// `SetDefaults_DaemonSet`.
    fn default(&self, object: &mut Value) {
        let spec = child(object, "spec");
        let strategy = child(spec, "updateStrategy");
        set(strategy, "type", json!("RollingUpdate"));
        if strategy["type"] == "RollingUpdate" {
            let rolling = child(strategy, "rollingUpdate");
            set(rolling, "maxUnavailable", json!(1));
            set(rolling, "maxSurge", json!(0));
        }
        set(spec, "revisionHistoryLimit", json!(10));
        default_template(spec);
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[
            NAME,
            Column::int("Desired"),
            Column::int("Current"),
            Column::int("Ready"),
            Column::int("Up-to-date"),
            Column::int("Available"),
            Column::text("Node Selector"),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        let node_selector = map_text(row.object.at("/spec/template/spec/nodeSelector"));
        vec![
            row.name(),
            json!(row.int("/status/desiredNumberScheduled")),
            json!(row.int("/status/currentNumberScheduled")),
            json!(row.int("/status/numberReady")),
            json!(row.int("/status/updatedNumberScheduled")),
            json!(row.int("/status/numberAvailable")),
            json!(node_selector),
            row.age(),
        ]
        .into_iter()
        .chain(template_cells(row, true))
        .collect()
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        workload::validate(GROUP, KIND, object, old)
    }
}
