//! CronJobs: `SetDefaults_CronJob`, and the schedule and job template checked as kube's
//! `ValidateCronJobSpec` checks them.

use serde_json::{Value, json};

use crate::defaults::{child, set};
use crate::registry::Strategy;
use crate::registry::core::pod;
use krec_core::error::Cause;
use krec_core::json::Pointer;

/// The CronJob strategy.
pub struct CronJobStrategy;

/// The CronJob strategy.
pub static STRATEGY: CronJobStrategy = CronJobStrategy;

impl Strategy for CronJobStrategy {
    /// `SetDefaults_CronJob`.
    fn default(&self, object: &mut Value) {
        let spec = child(object, "spec");
        set(spec, "concurrencyPolicy", json!("Allow"));
        set(spec, "suspend", json!(false));
        set(spec, "successfulJobsHistoryLimit", json!(3));
        set(spec, "failedJobsHistoryLimit", json!(1));
        if let Some(pod) = spec.at_mut("/jobTemplate/spec/template/spec") {
            pod::default_spec(pod);
        }
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        match object.at("/spec/schedule").and_then(Value::as_str) {
            None | Some("") => causes.push(("spec.schedule".into(), "Required value".into())),
            Some(schedule) => {
                if let Some(problem) = super::schedule::problem(schedule) {
                    causes.push((
                        "spec.schedule".into(),
                        format!("Invalid value: {schedule:?}: {problem}"),
                    ));
                }
            }
        }
        let path = "spec.jobTemplate.spec.template.spec";
        match object.at("/spec/jobTemplate/spec/template/spec") {
            Some(pod) => {
                pod::validate_spec(pod, path, &mut causes);
                let policy = pod.get("restartPolicy").and_then(Value::as_str);
                if !matches!(policy, Some("Never" | "OnFailure")) {
                    causes.push((
                        format!("{path}.restartPolicy"),
                        format!(
                            "Unsupported value: {:?}: supported values: \"OnFailure\", \"Never\"",
                            policy.unwrap_or("")
                        ),
                    ));
                }
            }
            None => causes.push((format!("{path}.containers"), "Required value".into())),
        }
        causes
    }
}
