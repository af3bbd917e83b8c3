//! Deployments: `SetDefaults_Deployment`, a selector matching the template, and
//! `printDeployment`'s row.

use serde_json::{Value, json};

use crate::defaults::{child, set};
use crate::printers::{AGE, Column, NAME, Row};
use crate::registry::Strategy;
use crate::registry::workload::{
    self, CONTAINERS, IMAGES, SELECTOR, default_template, template_cells,
};
use krec_core::error::Cause;

const GROUP: &str = "apps";
const KIND: &str = "Deployment";

/// The Deployment strategy.
pub struct DeploymentStrategy;

/// The Deployment strategy.
pub static STRATEGY: DeploymentStrategy = DeploymentStrategy;

impl Strategy for DeploymentStrategy {
    /// `SetDefaults_Deployment`: one replica, a 25 %/25 % rolling update, ten old ReplicaSets
    /// kept, a ten-minute progress deadline.
    fn default(&self, object: &mut Value) {
        let spec = child(object, "spec");
        set(spec, "replicas", json!(1));
        let strategy = child(spec, "strategy");
        set(strategy, "type", json!("RollingUpdate"));
        if strategy["type"] == "RollingUpdate" {
            let rolling = child(strategy, "rollingUpdate");
            set(rolling, "maxUnavailable", json!("25%"));
            set(rolling, "maxSurge", json!("25%"));
        }
        set(spec, "revisionHistoryLimit", json!(10));
        set(spec, "progressDeadlineSeconds", json!(600));
        default_template(spec);
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[
            NAME,
            Column::text("Ready"),
            Column::int("Up-to-date"),
            Column::int("Available"),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ];
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
            json!(row.int("/status/updatedReplicas")),
            json!(row.int("/status/availableReplicas")),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_should_roll_25_percent_and_keep_what_is_set() {
        let mut d = json!({"spec": {"replicas": 0, "template": {"spec": {"containers": []}}}});
        STRATEGY.default(&mut d);
        assert_eq!(d["spec"]["replicas"], 0, "a set zero is kept");
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
        let mut recreate = json!({"spec": {"strategy": {"type": "Recreate"}}});
        STRATEGY.default(&mut recreate);
        assert!(recreate["spec"]["strategy"].get("rollingUpdate").is_none());
    }
}
