//! Comparing two reconciles of the same request: their writes (as requests: the same verb on
//! the same object with the same body, normalised), their Events and their outcomes.
//!
//! Normalised means what differs between two runs of the same code is left out: the
//! `resourceVersion`, `uid`, `generation`, `creationTimestamp` and `managedFields` the server
//! fills in, and every timestamp (a string in RFC 3339 form), which reads as `<time>`.

use serde_json::Value;

use super::tape::{Reconcile, Write};

/// Metadata the server fills in: left out of comparisons.
const SERVER_FIELDS: [&str; 6] = [
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
];

/// Whether `text` is an RFC 3339 timestamp (`2026-11-26T10:00:00Z`, with fractions or an
/// offset).
fn is_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    (20..=35).contains(&b.len())
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && (b.ends_with(b"Z") || b[b.len() - 6] == b'+' || b[b.len() - 6] == b'-')
}

/// `value` without what differs between two runs of the same code (the module docs).
pub fn normalised(value: &Value) -> Value {
    fn walk(value: &mut Value, top: bool) {
        match value {
            Value::Object(map) => {
                if top && let Some(Value::Object(meta)) = map.get_mut("metadata") {
                    for field in SERVER_FIELDS {
                        meta.remove(field);
                    }
                }
                for v in map.values_mut() {
                    walk(v, false);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| walk(v, false)),
            Value::String(text) if is_timestamp(text) => *text = "<time>".into(),
            _ => {}
        }
    }
    let mut value = value.clone();
    walk(&mut value, true);
    value
}

/// Short text of a JSON value for a diff line (long values cut).
fn brief(value: Option<&Value>) -> String {
    let Some(value) = value else {
        return "(absent)".into();
    };
    let mut text = value.to_string();
    if text.len() > 120 {
        let mut end = 117;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

/// One difference between two JSON documents: the field path (`spec.replicas`,
/// `spec.template.spec.containers[0].image`) and the two values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldDiff {
    /// Where.
    pub path: String,
    /// The live (or recorded) value.
    pub live: String,
    /// The candidate's value.
    pub candidate: String,
}

impl std::fmt::Display for FieldDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} → {}", self.path, self.live, self.candidate)
    }
}

/// Where `a` and `b` differ, field by field (arrays of different lengths compared whole).
pub fn field_diffs(a: &Value, b: &Value) -> Vec<FieldDiff> {
    fn walk(path: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<FieldDiff>) {
        match (a, b) {
            (Some(Value::Object(x)), Some(Value::Object(y))) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for key in keys {
                    let path = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    walk(&path, x.get(key), y.get(key), out);
                }
            }
            (Some(Value::Array(x)), Some(Value::Array(y))) if x.len() == y.len() => {
                for (i, (a, b)) in x.iter().zip(y).enumerate() {
                    walk(&format!("{path}[{i}]"), Some(a), Some(b), out);
                }
            }
            (a, b) if a != b => out.push(FieldDiff {
                path: if path.is_empty() {
                    "(whole)".into()
                } else {
                    path.to_owned()
                },
                live: brief(a),
                candidate: brief(b),
            }),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", Some(a), Some(b), &mut out);
    out
}

/// Where a candidate's reconcile differs from the live (or recorded) one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Divergence {
    /// One line per difference.
    pub lines: Vec<String>,
    /// The field paths that differ in writes (for `critical` fields).
    pub fields: Vec<String>,
}

impl Divergence {
    /// Whether the two reconciles did the same.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// Most lines kept of one divergence; the rest are counted.
pub const MAX_LINES: usize = 20;

/// Longest line kept (a field path can be long too).
pub const MAX_LINE: usize = 400;

/// Whether `write` is of a Secret: its values are not shown.
fn is_secret(write: &Write) -> bool {
    write.kind.api_version == "v1" && write.kind.kind == "Secret"
}

/// Every field path of the writes' bodies: what a write one side made and the other did not
/// touches (for `critical` fields).
fn fields_of(writes: &[&Write], out: &mut Divergence) {
    fn leaves(value: &Value, path: &str, out: &mut Vec<String>) {
        let at = |key: &str| {
            if path.is_empty() {
                key.to_owned()
            } else {
                format!("{path}.{key}")
            }
        };
        match value {
            Value::Object(map) if !map.is_empty() => {
                map.iter().for_each(|(k, v)| leaves(v, &at(k), out));
            }
            Value::Array(items) if !items.is_empty() => {
                for (i, v) in items.iter().enumerate() {
                    leaves(v, &format!("{path}[{i}]"), out);
                }
            }
            _ => out.push(path.to_owned()),
        }
    }
    for write in writes {
        leaves(&write.body.value(), "", &mut out.fields);
    }
}

/// Compare one write of each.
fn compare_write(index: usize, live: &Write, candidate: &Write, out: &mut Divergence) {
    let n = index + 1;
    if live.target() != candidate.target() || live.patch_type != candidate.patch_type {
        out.lines.push(format!(
            "write {n}: live {} ({}), candidate {} ({})",
            live.target(),
            live.patch_type.as_deref().unwrap_or("object"),
            candidate.target(),
            candidate.patch_type.as_deref().unwrap_or("object"),
        ));
        fields_of(&[live, candidate], out);
        return;
    }
    // The same text is the same write: nothing to parse.
    if live.body == candidate.body {
        return;
    }
    let diffs = field_diffs(
        &normalised(&live.body.value()),
        &normalised(&candidate.body.value()),
    );
    for mut diff in diffs {
        if is_secret(live) {
            // Where a Secret differs, never what it holds.
            diff.live = "<redacted>".into();
            diff.candidate = "<redacted>".into();
        }
        out.lines
            .push(format!("write {n} ({}): {diff}", live.target()));
        out.fields.push(diff.path);
    }
}

/// How `candidate` differs from `live`: writes in order, Events, outcome.
pub fn compare(live: &Reconcile, candidate: &Reconcile) -> Divergence {
    let mut out = Divergence::default();
    let (lw, cw) = (&live.tape.writes, &candidate.tape.writes);
    for (i, (l, c)) in lw.iter().zip(cw).enumerate() {
        compare_write(i, l, c, &mut out);
    }
    for (i, l) in lw.iter().enumerate().skip(cw.len()) {
        out.lines.push(format!(
            "write {}: live {}, candidate made no such write",
            i + 1,
            l.target()
        ));
        fields_of(&[l], &mut out);
    }
    for (i, c) in cw.iter().enumerate().skip(lw.len()) {
        out.lines.push(format!(
            "write {}: candidate {}, live made no such write",
            i + 1,
            c.target()
        ));
        fields_of(&[c], &mut out);
    }
    let event = |e: &super::tape::Event| {
        format!(
            "{} {} on {}: {}",
            e.event_type, e.reason, e.regarding, e.message
        )
    };
    let (le, ce): (Vec<String>, Vec<String>) = (
        live.tape.events.iter().map(event).collect(),
        candidate.tape.events.iter().map(event).collect(),
    );
    if le != ce {
        out.lines.push(format!(
            "events: live [{}], candidate [{}]",
            le.join("; "),
            ce.join("; ")
        ));
    }
    if live.outcome != candidate.outcome {
        out.lines.push(format!(
            "outcome: live {}, candidate {}",
            live.outcome, candidate.outcome
        ));
    }
    bound(&mut out.lines);
    out
}

/// `lines` cut to [`MAX_LINES`] of at most [`MAX_LINE`] bytes each.
fn bound(lines: &mut Vec<String>) {
    let more = lines.len().saturating_sub(MAX_LINES);
    lines.truncate(MAX_LINES);
    for line in lines.iter_mut() {
        if crate::vocab::cut(line, MAX_LINE) {
            line.push_str("...");
        }
    }
    if more > 0 {
        lines.push(format!("... and {more} more difference(s)"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_fields_and_timestamps_should_not_count() {
        let a = json!({"metadata": {"name": "x", "resourceVersion": "1", "uid": "a"},
            "status": {"conditions": [{"lastTransitionTime": "2026-11-26T10:00:00Z"}]}});
        let b = json!({"metadata": {"name": "x", "resourceVersion": "7"},
            "status": {"conditions": [{"lastTransitionTime": "2026-11-27T11:30:00.123456+01:00"}]}});
        assert!(field_diffs(&normalised(&a), &normalised(&b)).is_empty());
    }

    fn reconcile(writes: Vec<Write>) -> Reconcile {
        Reconcile {
            seq: 1,
            namespace: Some("default".into()),
            name: "x".into(),
            clock_ms: 0,
            tape: crate::rollout::tape::Tape {
                writes,
                ..Default::default()
            },
            outcome: crate::rollout::tape::Outcome::Done,
        }
    }

    fn write(object: Value) -> Write {
        crate::rollout::tape::object_write(
            crate::rollout::tape::Verb::Update,
            &object,
            crate::rollout::tape::Answer::Namespaced(false),
        )
    }

    #[test]
    fn a_secret_should_diverge_by_path_only_and_long_diffs_be_cut() {
        let secret = |password: &str| {
            write(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "db", "namespace": "default"}, "data": {"password": password}}))
        };
        let d = compare(
            &reconcile(vec![secret("aHVudGVyMg==")]),
            &reconcile(vec![secret("c2VjcmV0")]),
        );
        assert_eq!(
            d.lines,
            ["write 1 (update v1 Secret default/db): data.password: <redacted> → <redacted>"]
        );
        let wide = |n: i64| {
            let fields: serde_json::Map<String, Value> =
                (0..50).map(|i| (format!("k{i}"), json!(n))).collect();
            write(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "default"}, "data": fields}))
        };
        let d = compare(&reconcile(vec![wide(1)]), &reconcile(vec![wide(2)]));
        assert_eq!(d.lines.len(), MAX_LINES + 1);
        assert_eq!(d.lines[MAX_LINES], "... and 30 more difference(s)");
        assert_eq!(d.fields.len(), 50, "every field counts for critical ones");
        // A write only one side made: its fields count too.
        let d = compare(&reconcile(vec![]), &reconcile(vec![wide(1)]));
        assert!(d.fields.contains(&"data.k7".to_owned()), "{:?}", d.fields);
    }

    #[test]
    fn a_diff_should_name_the_field_path() {
        let a = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [{"image": "a"}]}}}});
        let b = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"image": "b"}]}}}});
        let diffs: Vec<String> = field_diffs(&a, &b)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            diffs,
            [
                "spec.replicas: 2 → 3",
                "spec.template.spec.containers[0].image: \"a\" → \"b\""
            ]
        );
    }
}
