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
        if let Some(problem) = name_problem(strategy.names(), name) {
            return Err(invalid(
                "metadata.name",
                format!("Invalid value: {name:?}: {problem}"),
            ));
        }
        check_string_maps(rt, strategy.string_maps(), object)?;
        if let Some(labels) = object.at("/metadata/labels").and_then(Value::as_object) {
            for (k, v) in labels {
                if !v
                    .as_str()
                    .is_some_and(|v| krec_core::selector::is_label(k, v))
                {
                    return Err(invalid(
                        &format!("metadata.labels[{k}]"),
                        format!("Invalid value: {v}: not a valid label"),
                    ));
                }
            }
        }
        let mut causes = validation::owner_references(object);
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
fn name_problem(names: Names, name: &str) -> Option<String> {
    let rfc1123 = |what: &str| {
        format!(
            "a lowercase RFC 1123 {what} must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        )
    };
    match names {
        Names::Subdomain => (!is_dns_subdomain(name)).then(|| rfc1123("subdomain")),
        Names::Label => (!is_dns_label(name)).then(|| rfc1123("label")),
        Names::PathSegment => match name {
            "." | ".." => Some(format!("may not be '{name}'")),
            _ => ['/', '%']
                .into_iter()
                .find(|c| name.contains(*c))
                .map(|c| format!("may not contain '{c}'")),
        },
    }
}
