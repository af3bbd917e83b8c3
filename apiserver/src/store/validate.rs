//! Validation every write passes: kinds, names, labels, owner references, string maps, CRD
//! schemas and CRD API approval.

use super::*;
use crate::registry::Names;

impl Store {
    /// Validate the parts of an object every write checks: kind, names, metadata, schema, and
    /// for CRDs their definition and API approval; `old` is the stored object of an update.
    /// A CRD's CEL rules are taken from `judged` (what [`Store::judge_rules`] found before the
    /// lock was taken) when it judged this very object and old object.
    pub(super) fn validate(
        &self,
        rt: &ResourceType,
        object: &Value,
        name: &str,
        old: Option<&Value>,
        judged: Option<&RulesVerdict>,
    ) -> Result<(), ApiError> {
        let invalid = |field: &str, message: String| {
            ApiError::invalid(&rt.kind, &rt.group, name, vec![(field.to_owned(), message)])
        };
        if let Some(kind) = object.get("kind").and_then(Value::as_str)
            && kind != rt.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind {kind:?} of the object does not match the resource {} ({})",
                rt.plural, rt.kind
            )));
        }
        let strategy = registry::strategy(rt);
        let problems = name_problems(strategy.names(), name);
        if !problems.is_empty() {
            let causes = problems
                .into_iter()
                .map(|p| {
                    (
                        "metadata.name".to_owned(),
                        format!("Invalid value: {name:?}: {p}"),
                    )
                })
                .collect();
            return Err(ApiError::invalid(&rt.kind, &rt.group, name, causes));
        }
        check_string_maps(rt, strategy.string_maps(), object)?;
        check_bytes_maps(rt, strategy.bytes_maps(), object)?;
        let mut causes = validation::labels(object);
        causes.extend(validation::owner_references(object));
        if rt.schema.is_none() {
            causes.extend(validation::annotations(object));
        }
        causes.extend(strategy.validate(object, old));
        if !causes.is_empty() {
            return Err(ApiError::invalid(&rt.kind, &rt.group, name, causes));
        }
        if let Some(schema) = &rt.schema {
            let causes = schema::validate(schema, object);
            if !causes.is_empty() {
                return Err(ApiError::invalid(&rt.kind, &rt.group, name, causes));
            }
            #[cfg(not(feature = "server"))]
            let _ = judged;
            // The CRD's CEL rules (the server's: the fake cluster of the SDK does without).
            #[cfg(feature = "server")]
            if let Some(rules) = crate::expressions::rules_for(schema) {
                let causes = match judged.filter(|v| v.judged == RulesVerdict::seen(object, old)) {
                    Some(verdict) => verdict.causes.clone(),
                    // Not judged before the lock (no caller leaves this path in practice: an
                    // update's old object cannot change under its resourceVersion).
                    None => rules.validate(object, old),
                };
                if !causes.is_empty() {
                    return Err(ApiError::invalid(&rt.kind, &rt.group, name, causes));
                }
            }
        }
        strategy
            .validate_servable(object)
            .map_err(|e| invalid("spec", e))?;
        Ok(())
    }
}

/// What a CRD's CEL rules found in an object replacing an old one, judged before the store's
/// lock is taken: a rule may cost seconds (up to the runtime cost budget), and no other
/// request may wait on it, as kube-apiserver validates before its storage's transaction. Kept
/// with a fingerprint of what the rules saw, so that it answers only for that object.
#[derive(Debug)]
pub(super) struct RulesVerdict {
    judged: (u64, Option<u64>),
    causes: Vec<krec_core::error::Cause>,
}

impl RulesVerdict {
    /// The fingerprints of what CEL rules see of `object` and `old`: everything but the root's
    /// metadata, of which they see the name and generateName.
    fn seen(object: &Value, old: Option<&Value>) -> (u64, Option<u64>) {
        (fingerprint(object), old.map(fingerprint))
    }
}

/// A keyed hash of `object` as CEL rules see it (see [`RulesVerdict::seen`]); keyed per
/// process, so no client can aim at a collision.
fn fingerprint(object: &Value) -> u64 {
    use std::hash::{BuildHasher as _, Hash as _, Hasher as _};
    static KEYS: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    fn walk(value: &Value, hasher: &mut impl std::hash::Hasher) {
        match value {
            Value::Null => hasher.write_u8(0),
            Value::Bool(b) => {
                hasher.write_u8(1);
                b.hash(hasher);
            }
            Value::Number(n) => {
                hasher.write_u8(2);
                n.to_string().hash(hasher);
            }
            Value::String(s) => {
                hasher.write_u8(3);
                s.hash(hasher);
            }
            Value::Array(items) => {
                hasher.write_u8(4);
                hasher.write_usize(items.len());
                items.iter().for_each(|item| walk(item, hasher));
            }
            Value::Object(fields) => {
                hasher.write_u8(5);
                hasher.write_usize(fields.len());
                for (key, field) in fields {
                    key.hash(hasher);
                    walk(field, hasher);
                }
            }
        }
    }
    let mut hasher = KEYS.get_or_init(std::hash::RandomState::new).build_hasher();
    match object.as_object() {
        Some(fields) => {
            for (key, field) in fields {
                key.hash(&mut hasher);
                if key == "metadata" {
                    for seen in ["name", "generateName"] {
                        walk(field.get(seen).unwrap_or(&Value::Null), &mut hasher);
                    }
                } else {
                    walk(field, &mut hasher);
                }
            }
        }
        None => walk(object, &mut hasher),
    }
    hasher.finish()
}

impl Store {
    /// Judge `object` (replacing `old`) by `rt`'s CEL rules, without the store's lock; `None`
    /// when the kind has none (or this build evaluates none).
    pub(super) fn judge_rules(
        rt: &ResourceType,
        object: &Value,
        old: Option<&Value>,
    ) -> Option<RulesVerdict> {
        #[cfg(feature = "server")]
        {
            let rules = crate::expressions::rules_for(rt.schema.as_ref()?)?;
            Some(RulesVerdict {
                judged: RulesVerdict::seen(object, old),
                causes: rules.validate(object, old),
            })
        }
        #[cfg(not(feature = "server"))]
        {
            let _ = (rt, object, old);
            None
        }
    }
}

/// Refuse a non-string value in a field that is a map of strings, as kube-apiserver's decoder
/// does (400, "cannot be handled as a ConfigMap").
/// Refuse a value of a bytes map (`map[string][]byte`) that is not standard base64, as Go's
/// JSON decoder does: `illegal base64 data at input byte N`.
fn check_bytes_maps(
    rt: &ResourceType,
    maps: &[&'static str],
    object: &Value,
) -> Result<(), ApiError> {
    for map in maps {
        let values = object.get(*map).and_then(Value::as_object);
        for text in values.into_iter().flatten().filter_map(|(_, v)| v.as_str()) {
            if let Some(at) = base64_error_at(text.as_bytes()) {
                return Err(ApiError::bad_request(format!(
                    "{kind} in version \"{version}\" cannot be handled as a {kind}: illegal base64 data at input byte {at}",
                    kind = rt.kind,
                    version = rt.version
                )));
            }
        }
    }
    Ok(())
}

/// Where Go's standard base64 decoder (padded; `\r` and `\n` skipped) finds `src` corrupt, if
/// it does: the offset its `CorruptInputError` reports.
fn base64_error_at(src: &[u8]) -> Option<usize> {
    let is_newline = |b: u8| b == b'\n' || b == b'\r';
    let in_alphabet = |b: u8| b.is_ascii_alphanumeric() || b == b'+' || b == b'/';
    let mut si = 0;
    loop {
        // One quantum of four characters.
        let mut j = 0;
        while j < 4 {
            if si == src.len() {
                return match j {
                    0 => None,
                    _ => Some(si - j),
                };
            }
            let b = src[si];
            si += 1;
            if in_alphabet(b) {
                j += 1;
                continue;
            }
            if is_newline(b) {
                continue;
            }
            if b != b'=' {
                return Some(si - 1);
            }
            // Padding: it ends the input.
            match j {
                0 | 1 => return Some(si - 1),
                2 => {
                    while si < src.len() && is_newline(src[si]) {
                        si += 1;
                    }
                    if si == src.len() {
                        return Some(src.len());
                    }
                    if src[si] != b'=' {
                        return Some(si - 1);
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < src.len() && is_newline(src[si]) {
                si += 1;
            }
            return (si < src.len()).then_some(si);
        }
    }
}

fn check_string_maps(
    rt: &ResourceType,
    own: &[&'static str],
    object: &Value,
) -> Result<(), ApiError> {
    let mut fields: Vec<(&str, &str)> = vec![("metadata", "annotations"), ("metadata", "labels")];
    fields.extend(own.iter().map(|f| ("", *f)));
    for (parent, field) in fields {
        let holder = if parent.is_empty() {
            Some(object)
        } else {
            object.get(parent)
        };
        let Some(value) = holder.and_then(|h| h.get(field)) else {
            continue;
        };
        let go_type = |v: &Value| match v {
            Value::Number(_) => "number",
            Value::Bool(_) => "bool",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
            _ => "string",
        };
        // The field's path, written only for a problem found.
        let path = || {
            if parent.is_empty() {
                format!("{}.{field}", rt.kind)
            } else {
                format!("{}.{parent}.{field}", rt.kind)
            }
        };
        let problem = match value {
            Value::Null => None,
            Value::Object(map) => map
                .values()
                .find(|v| !v.is_string() && !v.is_null())
                .map(|v| {
                    format!(
                        "cannot unmarshal {} into Go struct field {} of type string",
                        go_type(v),
                        path()
                    )
                }),
            other => Some(format!(
                "cannot unmarshal {} into Go struct field {} of type map[string]string",
                go_type(other),
                path()
            )),
        };
        if let Some(problem) = problem {
            return Err(ApiError::bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: json: {problem}",
                kind = rt.kind,
                version = rt.version
            )));
        }
    }
    Ok(())
}

/// What is wrong with `name` for a kind whose names are `names`, in kube's words.
fn name_problems(names: Names, name: &str) -> Vec<String> {
    match names {
        Names::Subdomain => validation::dns1123_subdomain_problems(name),
        Names::Label => validation::dns1123_label_problems(name),
        Names::PathSegment => match name {
            "." | ".." => vec![format!("may not be '{name}'")],
            _ => ['/', '%']
                .into_iter()
                .filter(|c| name.contains(*c))
                .map(|c| format!("may not contain '{c}'"))
                .collect(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::base64_error_at;

    #[test]
    fn corrupt_base64_should_be_found_where_go_finds_it() {
        for (text, at) in [
            ("aGVsbG8=", None),
            ("aGVs\nbG8=", None),
            ("", None),
            ("not base64!", Some(3)),
            ("abc", Some(0)),
            ("abcde", Some(4)),
            ("ab=", Some(3)),
            ("a===", Some(1)),
            ("ab==cd", Some(4)),
            ("ab=c", Some(2)),
        ] {
            assert_eq!(base64_error_at(text.as_bytes()), at, "{text:?}");
        }
    }
}
