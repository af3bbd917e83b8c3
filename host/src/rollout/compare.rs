//! Comparing two reconciles of the same request: their writes (as requests: the same verb on
//! the same object with the same body, normalised), their Events and their outcomes.
//!
//! Normalised means what differs between two runs of the same code is left out: the
//! `resourceVersion`, `uid`, `generation`, `creationTimestamp` and `managedFields` the server
//! fills in, and every timestamp (a string in RFC 3339 form), which reads as `<time>`.

use serde_json::Value;

use std::collections::{BTreeMap, BTreeSet};

use super::tape::{Answer, Json, Read, ReadCall, Reconcile, Verb, Write};

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
                    // A traced write's context (`KREC_TRACE_OBJECTS`) differs from run to run.
                    if let Some(Value::Object(annotations)) = meta.get_mut("annotations") {
                        annotations.remove(crate::telemetry::TRACEPARENT_ANNOTATION);
                        if annotations.is_empty() {
                            meta.remove("annotations");
                        }
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
        krec_core::cut(&mut text, 117);
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
    /// Of those, the fields a write of the same object set differently, one by one (each is
    /// also a line): what the status page shows as a diff.
    pub changes: Vec<Change>,
    /// The fields whose written values differ, with both values (for `critical` fields): what
    /// the live version left a field as beside what the candidate left it as.
    pub fields: Vec<FieldDiff>,
}

impl Divergence {
    /// Whether the two reconciles did the same.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// A field that a live write and the candidate's write of the same object set differently.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Which write: `write 1 (apps/v1 Deployment default/web)`.
    pub write: String,
    /// The field and both values.
    pub field: FieldDiff,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.write, self.field)
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

/// Whether two writes are of the same object (the same kind, namespace and name; two creates
/// with generated names are taken as the same object in order).
fn same_object(a: &Write, b: &Write) -> bool {
    a.kind == b.kind && a.namespace == b.namespace && a.name == b.name
}

/// Every leaf of `value` by field path (`data.color`, `spec.containers[0].image`).
fn leaves(value: &Value, path: &str, out: &mut BTreeMap<String, Value>) {
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
        _ => {
            out.insert(path.to_owned(), value.clone());
        }
    }
}

/// `patch` applied to `target` as a JSON merge patch (RFC 7386; a strategic merge or apply
/// patch is read the same way, close enough to tell which fields it sets).
fn merged(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(map) = target {
        for (key, value) in patch {
            if value.is_null() {
                map.remove(key);
            } else {
                merged(map.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// The object as the live version found it before `write`: its last read (a `get`, or an
/// item of a `list`) in `reads`, normalised.
fn before(write: &Write, reads: &[&Read]) -> Option<Value> {
    let name = write.name.as_deref()?;
    let is_it = |object: &Value| {
        object.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
            && object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                == write.namespace.as_deref()
    };
    reads
        .iter()
        .rev()
        .find_map(|read| match (&read.call, &read.answer) {
            (ReadCall::Get { kind, .. }, Answer::Object(json)) if *kind == write.kind => {
                Some(json.value()).filter(is_it)
            }
            (ReadCall::List { kind, .. }, Answer::Items(items)) if *kind == write.kind => items
                .iter()
                .filter(|item| item.0.contains(name))
                .map(Json::value)
                .find(is_it),
            _ => None,
        })
        .map(|object| normalised(&object))
}

/// What `write` leaves each field it changes as, beside the object `before` it: a field path
/// and its new value (`None`: removed). A create changes every field it sets, a delete every
/// field of the object, a JSON patch the paths of its operations.
/// `old` is `before`'s leaves.
fn effect(
    write: &Write,
    before: Option<&Value>,
    old: &BTreeMap<String, Value>,
) -> BTreeMap<String, Option<Value>> {
    let body = normalised(&write.body.value());
    let after = match (write.verb, write.patch_type.as_deref()) {
        (Verb::Delete, _) => {
            return old.keys().map(|path| (path.clone(), None)).collect();
        }
        (_, Some(content_type)) if content_type.contains("json-patch") => {
            // A JSON patch: each operation's path, as the field it sets.
            let ops = body.as_array().cloned().unwrap_or_default();
            return ops
                .iter()
                .filter_map(|op| {
                    let path = op.get("path")?.as_str()?;
                    let field = path
                        .trim_start_matches('/')
                        .split('/')
                        .map(|part| part.replace("~1", "/").replace("~0", "~"))
                        .collect::<Vec<_>>()
                        .join(".");
                    Some((field, op.get("value").cloned()))
                })
                .collect();
        }
        (_, Some(_)) => {
            let mut object = before.cloned().unwrap_or(Value::Null);
            merged(&mut object, &body);
            object
        }
        _ => body,
    };
    let mut new = BTreeMap::new();
    leaves(&after, "", &mut new);
    let mut changes: BTreeMap<String, Option<Value>> = new
        .iter()
        .filter(|(path, value)| old.get(*path) != Some(*value))
        .map(|(path, value)| (path.clone(), Some(value.clone())))
        .collect();
    if write.patch_type.is_none() {
        // A whole object: what it leaves out is removed.
        for path in old.keys().filter(|path| !new.contains_key(*path)) {
            changes.insert(path.clone(), None);
        }
    }
    changes
}

/// The fields where `live` and `candidate` (either may be absent: a write the other side did
/// not make) leave the object differently, with both values.
fn effect_diffs(
    live: Option<&Write>,
    candidate: Option<&Write>,
    reads: &[&Read],
) -> Vec<FieldDiff> {
    let Some(any) = live.or(candidate) else {
        return Vec::new();
    };
    let before = before(any, reads);
    let mut old = BTreeMap::new();
    if let Some(before) = &before {
        leaves(before, "", &mut old);
    }
    let of = |write: Option<&Write>| {
        write
            .map(|w| effect(w, before.as_ref(), &old))
            .unwrap_or_default()
    };
    let (l, c) = (of(live), of(candidate));
    let secret = is_secret(any);
    let shown = |path: &String, change: Option<&Option<Value>>| {
        if secret {
            return "<redacted>".to_owned();
        }
        match change {
            Some(value) => brief(value.as_ref()),
            None => brief(old.get(path)),
        }
    };
    let paths: BTreeSet<&String> = l.keys().chain(c.keys()).collect();
    paths
        .into_iter()
        .filter(|path| {
            let value = |side: &BTreeMap<String, Option<Value>>| match side.get(*path) {
                Some(change) => change.clone(),
                None => old.get(*path).cloned(),
            };
            value(&l) != value(&c)
        })
        .map(|path| FieldDiff {
            path: path.clone(),
            live: shown(path, l.get(path)),
            candidate: shown(path, c.get(path)),
        })
        .collect()
}

/// Compare a live write with the candidate's write of the same object.
fn compare_write(n: usize, live: &Write, candidate: &Write, reads: &[&Read], out: &mut Divergence) {
    if live.verb != candidate.verb || live.patch_type != candidate.patch_type {
        out.lines.push(format!(
            "write {n}: live {} ({}), candidate {} ({})",
            live.target(),
            live.patch_type.as_deref().unwrap_or("object"),
            candidate.target(),
            candidate.patch_type.as_deref().unwrap_or("object"),
        ));
        out.fields
            .extend(effect_diffs(Some(live), Some(candidate), reads));
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
        let change = Change {
            write: format!("write {n} ({})", live.target()),
            field: diff,
        };
        out.lines.push(change.to_string());
        out.changes.push(change);
    }
    // The bodies are the requests; what each leaves the object as is what `critical` judges
    // (a patch setting a field to the value it has changes nothing).
    out.fields
        .extend(effect_diffs(Some(live), Some(candidate), reads));
}

/// How `candidate` differs from `live`: writes of the same object paired (in order, whatever
/// order each side made them in), Events, outcome.
pub fn compare(live: &Reconcile, candidate: &Reconcile) -> Divergence {
    let mut out = Divergence::default();
    let (lw, cw) = (&live.tape.writes, &candidate.tape.writes);
    let reads: Vec<&Read> = live
        .tape
        .reads
        .iter()
        .chain(&candidate.tape.reads)
        .collect();
    let mut paired = vec![false; cw.len()];
    for (i, l) in lw.iter().enumerate() {
        let n = i + 1;
        let partner = (0..cw.len()).find(|&j| !paired[j] && same_object(l, &cw[j]));
        match partner {
            Some(j) => {
                paired[j] = true;
                compare_write(n, l, &cw[j], &reads, &mut out);
            }
            None => {
                out.lines.push(format!(
                    "write {n}: live {}, candidate made no such write",
                    l.target()
                ));
                out.fields.extend(effect_diffs(Some(l), None, &reads));
            }
        }
    }
    for (j, c) in cw.iter().enumerate().filter(|(j, _)| !paired[*j]) {
        out.lines.push(format!(
            "write {}: candidate {}, live made no such write",
            j + 1,
            c.target()
        ));
        out.fields.extend(effect_diffs(None, Some(c), &reads));
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
    out.changes.truncate(MAX_LINES);
    out
}

/// `lines` cut to [`MAX_LINES`] of at most [`MAX_LINE`] bytes each.
fn bound(lines: &mut Vec<String>) {
    let more = lines.len().saturating_sub(MAX_LINES);
    lines.truncate(MAX_LINES);
    for line in lines.iter_mut() {
        if krec_core::cut(line, MAX_LINE) {
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

    #[test]
    fn a_traced_creates_context_should_not_count_but_other_annotations_should() {
        let key = crate::telemetry::TRACEPARENT_ANNOTATION;
        let live = json!({"metadata": {"name": "x", "annotations": {
            key: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}});
        let shadow = json!({"metadata": {"name": "x"}});
        assert!(field_diffs(&normalised(&live), &normalised(&shadow)).is_empty());
        let other = json!({"metadata": {"name": "x", "annotations": {key: "00-…", "team": "a"}}});
        assert!(!field_diffs(&normalised(&other), &normalised(&shadow)).is_empty());
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
        // The same, field by field: what the status page shows as a diff.
        assert_eq!(d.changes.len(), 1);
        assert_eq!(d.changes[0].to_string(), d.lines[0]);
        assert_eq!(d.changes[0].field.candidate, "<redacted>");
        let wide = |n: i64| {
            let fields: serde_json::Map<String, Value> =
                (0..50).map(|i| (format!("k{i}"), json!(n))).collect();
            write(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "default"}, "data": fields}))
        };
        let d = compare(&reconcile(vec![wide(1)]), &reconcile(vec![wide(2)]));
        assert_eq!(d.lines.len(), MAX_LINES + 1);
        assert_eq!(d.lines[MAX_LINES], "... and 30 more difference(s)");
        assert_eq!(d.changes.len(), MAX_LINES, "as many as the lines kept");
        assert_eq!(d.fields.len(), 50, "every field counts for critical ones");
        // A write only one side made: its fields count too.
        let d = compare(&reconcile(vec![]), &reconcile(vec![wide(1)]));
        assert!(
            d.fields.iter().any(|f| f.path == "data.k7"),
            "{:?}",
            d.fields
        );
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

    fn cm(namespace: &str, labels: Value, color: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": namespace, "resourceVersion": "4",
                "labels": labels},
            "data": {"color": color}})
    }

    fn read_of(object: &Value) -> Read {
        Read {
            call: ReadCall::Get {
                kind: crate::rollout::tape::KindName {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                },
                namespace: object["metadata"]["namespace"].as_str().map(str::to_owned),
                name: "settings".into(),
            },
            answer: Answer::Object(Json::of(object)),
        }
    }

    fn whole(verb: Verb, object: Value) -> Write {
        crate::rollout::tape::object_write(
            verb,
            &object,
            crate::rollout::tape::Answer::Namespaced(false),
        )
    }

    #[test]
    fn critical_fields_should_be_judged_by_value_not_by_touch() {
        let stored = cm("default", json!({"app": "x"}), "red");
        let mut live = reconcile(vec![]);
        live.tape.reads = vec![read_of(&stored)];
        // The candidate updates the whole object to add a label: data.color is written, unchanged.
        let labelled = whole(
            Verb::Update,
            cm("default", json!({"app": "x", "v": "2"}), "red"),
        );
        let d = compare(&live, &reconcile(vec![labelled]));
        let paths: Vec<&str> = d.fields.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["metadata.labels.v"], "{d:?}");
        // One that changes the value names both.
        let blue = whole(Verb::Update, cm("default", json!({"app": "x"}), "blue"));
        let d = compare(&live, &reconcile(vec![blue]));
        assert_eq!(
            d.fields,
            [FieldDiff {
                path: "data.color".into(),
                live: "\"red\"".into(),
                candidate: "\"blue\"".into()
            }]
        );
        // A merge patch setting a field to the value it has changes nothing.
        let mut live = reconcile(vec![patch(json!({"metadata": {"labels": {"v": "2"}}}))]);
        live.tape.reads = vec![read_of(&stored)];
        let candidate = reconcile(vec![patch(
            json!({"metadata": {"labels": {"v": "2"}}, "data": {"color": "red"}}),
        )]);
        let d = compare(&live, &candidate);
        assert!(!d.lines.is_empty(), "the requests differ");
        assert!(d.fields.is_empty(), "{d:?}");
    }

    fn patch(body: Value) -> Write {
        crate::rollout::tape::patch_write(
            &krec_core::Gvk::new("", "v1", "ConfigMap"),
            Some("default"),
            "settings",
            krec_core::PatchType::Merge,
            &body,
            false,
            crate::rollout::tape::Answer::Namespaced(false),
        )
    }

    #[test]
    fn writes_should_be_paired_by_object_whatever_their_order() {
        let live = reconcile(vec![whole(Verb::Create, cm("team-c", json!({}), "red"))]);
        let candidate = reconcile(vec![
            whole(Verb::Update, cm("team-b", json!({"v": "2"}), "red")),
            whole(Verb::Create, cm("team-c", json!({"v": "2"}), "red")),
        ]);
        let d = compare(&live, &candidate);
        assert_eq!(
            d.lines,
            [
                "write 1 (create v1 ConfigMap team-c/settings): metadata.labels.v: (absent) → \"2\"",
                "write 1: candidate update v1 ConfigMap team-b/settings, live made no such write"
            ]
        );
    }
}
