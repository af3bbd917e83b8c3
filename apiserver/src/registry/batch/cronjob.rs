//! CronJobs: `SetDefaults_CronJob`.

use serde_json::{Value, json};

use crate::defaults::{child, set};
use crate::registry::Strategy;
use crate::registry::core::pod;
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
}
