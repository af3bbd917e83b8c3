//! Validation every write passes: kinds, names, labels, owner references, string maps, CRD
//! schemas and CRD API approval.

use super::*;
use crate::registry::Names;

impl Store {
    /// Validate the parts of an object every write checks: kind, names, metadata, schema, and
    /// for CRDs their definition and API approval; `old` is the stored object of an update.
    pub(super) fn validate(
        &self,
        rt: &ResourceType,
        object: &Value,
        name: &str,
        old: Option<&Value>,
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
            // The CRD's CEL rules (the server's: the fake cluster of the SDK does without).
            #[cfg(feature = "server")]
            if let Some(rules) = crate::expressions::rules_for(schema) {
                let causes = rules.validate(object, old);
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
