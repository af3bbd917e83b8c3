//! Events, of both APIs (`v1` and `events.k8s.io/v1`, one storage in kube-apiserver):
//! `printEvent`'s row and each API's field labels.

use serde_json::{Value, json};

use crate::printers::{Column, NAME, Row};
use crate::registry::Strategy;
use krec_core::json::Pointer;
use krec_core::selector::FieldLabel;

/// The Event strategy of one of the two APIs.
pub struct EventStrategy {
    field_labels: &'static [FieldLabel],
}

/// The strategy of `v1` Events.
pub static STRATEGY: EventStrategy = EventStrategy {
    field_labels: &[
        ("involvedObject.kind", "/involvedObject/kind", ""),
        ("involvedObject.namespace", "/involvedObject/namespace", ""),
        ("involvedObject.name", "/involvedObject/name", ""),
        ("involvedObject.uid", "/involvedObject/uid", ""),
        (
            "involvedObject.apiVersion",
            "/involvedObject/apiVersion",
            "",
        ),
        (
            "involvedObject.resourceVersion",
            "/involvedObject/resourceVersion",
            "",
        ),
        ("involvedObject.fieldPath", "/involvedObject/fieldPath", ""),
        ("reason", "/reason", ""),
        ("reportingComponent", "/reportingComponent", ""),
        ("source", "/source/component", ""),
        ("type", "/type", ""),
    ],
};

/// The strategy of `events.k8s.io/v1` Events.
pub static EVENTS_STRATEGY: EventStrategy = EventStrategy {
    field_labels: &[
        ("regarding.kind", "/regarding/kind", ""),
        ("regarding.namespace", "/regarding/namespace", ""),
        ("regarding.name", "/regarding/name", ""),
        ("regarding.uid", "/regarding/uid", ""),
        ("regarding.apiVersion", "/regarding/apiVersion", ""),
        (
            "regarding.resourceVersion",
            "/regarding/resourceVersion",
            "",
        ),
        ("regarding.fieldPath", "/regarding/fieldPath", ""),
        ("reason", "/reason", ""),
        ("reportingController", "/reportingController", ""),
        ("type", "/type", ""),
    ],
};

impl Strategy for EventStrategy {
    /// The object references an Event holds are Go `ObjectReference`s, whose fields are all
    /// `omitempty`: a `null` one (a cluster-scoped object's `namespace`, say) is dropped, as
    /// kube-apiserver's decoding drops it.
    fn default(&self, object: &mut Value) {
        for reference in ["involvedObject", "related", "regarding"] {
            if let Some(Value::Object(fields)) = object.get_mut(reference) {
                fields.retain(|_, value| !value.is_null());
            }
        }
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[
            Column::text("Last Seen"),
            Column::text("Type"),
            Column::text("Reason"),
            Column::text("Object"),
            Column::text("Subobject").wide(),
            Column::text("Source").wide(),
            Column::text("Message"),
            Column::text("First Seen").wide(),
            Column::int("Count").wide(),
            NAME.wide(),
        ];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        cells(row)
    }

    fn field_labels(&self) -> &'static [FieldLabel] {
        self.field_labels
    }
}

/// `printEvent`'s row, for both Event APIs (`involvedObject` of `v1`, `regarding` of
/// `events.k8s.io/v1`).
fn cells(row: &Row<'_>) -> Vec<Value> {
    let o = row.object;
    let s = |p: &str| o.at(p).and_then(Value::as_str).unwrap_or_default();
    let regarding = if o.get("regarding").is_some() {
        "/regarding"
    } else {
        "/involvedObject"
    };
    let object = format!(
        "{}/{}",
        s(&format!("{regarding}/kind")).to_lowercase(),
        s(&format!("{regarding}/name"))
    );
    let last = o
        .at("/lastTimestamp")
        .or_else(|| o.at("/series/lastObservedTime"))
        .or_else(|| o.at("/eventTime"))
        .or_else(|| o.at("/deprecatedLastTimestamp"))
        .or_else(|| o.at("/metadata/creationTimestamp"));
    let first = o
        .at("/firstTimestamp")
        .or_else(|| o.at("/eventTime"))
        .or_else(|| o.at("/metadata/creationTimestamp"));
    let source = match (
        s("/source/component"),
        s("/reportingComponent"),
        s("/reportingController"),
    ) {
        (c, _, _) if !c.is_empty() => c,
        (_, c, _) if !c.is_empty() => c,
        (_, _, c) => c,
    };
    let count = o
        .get("count")
        .and_then(Value::as_i64)
        .or_else(|| o.at("/series/count").and_then(Value::as_i64))
        .unwrap_or(1);
    let message = o
        .get("message")
        .or_else(|| o.get("note"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim()
        .to_owned();
    vec![
        json!(row.age_of(last)),
        json!(s("/type")),
        json!(s("/reason")),
        json!(object),
        json!(s(&format!("{regarding}/fieldPath"))),
        json!(source),
        json!(message),
        json!(row.age_of(first)),
        json!(count),
        row.name(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_field_of_an_object_reference_should_be_dropped() {
        let mut event = json!({"involvedObject": {"kind": "Node", "name": "n", "namespace": null},
            "related": {"kind": "Pod", "namespace": null}, "reason": null});
        STRATEGY.default(&mut event);
        assert_eq!(
            event,
            json!({"involvedObject": {"kind": "Node", "name": "n"}, "related": {"kind": "Pod"},
                "reason": null})
        );
    }
}
