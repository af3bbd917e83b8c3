//! Jobs: `SetDefaults_Job` with the selector the server generates, a selector matching the
//! template, a template that does not change and restarts `Never` or `OnFailure`, `printJob`'s
//! row, selectable by `status.successful`.

use serde_json::{Map, Value, json};

use crate::defaults::{child, set, unset};
use crate::printers::{AGE, Column, NAME, Row, human_duration};
use crate::registry::Strategy;
use crate::registry::workload::{
    self, CONTAINERS, IMAGES, SELECTOR, default_template, template_cells,
};
use krec_core::error::Cause;
use krec_core::json::Pointer;
use krec_core::selector::FieldLabel;

const GROUP: &str = "batch";
const KIND: &str = "Job";

/// The Job strategy.
pub struct JobStrategy;

/// The Job strategy.
pub static STRATEGY: JobStrategy = JobStrategy;

impl Strategy for JobStrategy {
    /// `SetDefaults_Job`, and the job strategy's generated selector: unless `manualSelector`, the
    /// pods are selected by the Job's uid, and the template carries the labels that select them.
    fn default(&self, object: &mut Value) {
        let uid = object
            .at("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let name = object
            .at("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let spec = child(object, "spec");
        if unset(spec, "completions") && unset(spec, "parallelism") {
            spec["completions"] = json!(1);
            spec["parallelism"] = json!(1);
        }
        set(spec, "parallelism", json!(1));
        set(spec, "backoffLimit", json!(6));
        set(spec, "completionMode", json!("NonIndexed"));
        set(spec, "suspend", json!(false));
        set(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
        let manual = spec.get("manualSelector").and_then(Value::as_bool) == Some(true);
        if let (false, Some(uid), Some(name)) = (manual, uid, name) {
            let mut labels = Map::new();
            labels.insert("batch.kubernetes.io/controller-uid".into(), json!(uid));
            labels.insert("batch.kubernetes.io/job-name".into(), json!(name));
            labels.insert("controller-uid".into(), json!(uid));
            labels.insert("job-name".into(), json!(name));
            if unset(spec, "selector") {
                spec["selector"] =
                    json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
            }
            let template_labels = child(child(child(spec, "template"), "metadata"), "labels");
            for (key, value) in labels {
                set(template_labels, &key, value);
            }
        }
        default_template(spec);
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[
            NAME,
            Column::text("Status"),
            Column::text("Completions"),
            Column::text("Duration"),
            AGE,
            CONTAINERS,
            IMAGES,
            SELECTOR,
        ];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        let completions = match row.object.at("/spec/completions").and_then(Value::as_i64) {
            Some(c) => format!("{}/{c}", row.int("/status/succeeded")),
            None => format!(
                "{}/1 of {}",
                row.int("/status/succeeded"),
                row.int("/spec/parallelism").max(1)
            ),
        };
        vec![
            row.name(),
            json!(status(row.object)),
            json!(completions),
            json!(duration(row)),
            row.age(),
        ]
        .into_iter()
        .chain(template_cells(row, true))
        .collect()
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        workload::validate(GROUP, KIND, object, old)
    }

    fn field_labels(&self) -> &'static [FieldLabel] {
        &[("status.successful", "/status/succeeded", "0")]
    }
}

/// A Job's STATUS column: `Complete`, `Failed`, `Suspended`, `Running`, …
fn status(o: &Value) -> &'static str {
    let conditions: Vec<&Value> = o
        .at("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "True")
        .collect();
    let has = |t: &str| conditions.iter().any(|c| c["type"] == t);
    if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if o.at("/metadata/deletionTimestamp").is_some() {
        "Terminating"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else if has("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else if has("Suspended") {
        "Suspended"
    } else {
        "Running"
    }
}

/// A Job's DURATION: from start to completion, or to now while it runs.
fn duration(row: &Row<'_>) -> String {
    let (o, now) = (row.object, row.now);
    let time = |p: &str| {
        o.at(p)
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    };
    match time("/status/startTime") {
        None => String::new(),
        Some(start) => {
            let end = time("/status/completionTime").unwrap_or(now);
            human_duration((end.as_second() - start.as_second()).max(0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_should_select_its_pods_by_its_uid() {
        let mut job = json!({"metadata": {"name": "j", "uid": "u-1"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": []}}}});
        STRATEGY.default(&mut job);
        assert_eq!(job["spec"]["completions"], 1);
        assert_eq!(job["spec"]["backoffLimit"], 6);
        assert_eq!(
            job["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
        );
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"]["job-name"],
            "j"
        );
        assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    }
}
