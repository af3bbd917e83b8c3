//! What a read or write names: objects as JSON text and their heads, list options,
//! preconditions.

use std::sync::Arc;

use serde_json::Value;

use crate::{CallError, Gvk};

/// `Kind ns/name` (or `Kind name`) of a JSON object, for log lines; `generateName` stands in for
/// a name not yet given.
pub fn describe(object: &Value) -> String {
    let meta = |f: &str| {
        object
            .pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
    };
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("?");
    let name = meta("name").or(meta("generateName")).unwrap_or("?");
    match meta("namespace") {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// `object` as JSON text.
pub fn json_text(object: &Value) -> Result<Arc<str>, CallError> {
    serde_json::to_string(object)
        .map(Into::into)
        .map_err(|e| CallError::Other(format!("encoding object: {e}")))
}

/// A whole-object write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    /// Create the object.
    Create,
    /// Replace the object (its status is ignored for kinds with a status subresource).
    Update,
    /// Replace the object's status through the status subresource.
    UpdateStatus,
}

/// What an object given as JSON text says about itself: kind, namespace and name, read without
/// building the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectHead {
    /// Its kind, from `apiVersion` and `kind`.
    pub gvk: Gvk,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.name` (absent on a create with `generateName`).
    pub name: Option<String>,
}

impl ObjectHead {
    /// Read the head of `json`, which must be one valid JSON object with `apiVersion` and
    /// `kind`. The whole text is checked, but only the head is kept.
    ///
    /// # Errors
    ///
    /// `invalid`, saying what is wrong.
    pub fn parse(json: &str) -> Result<Self, CallError> {
        #[derive(serde::Deserialize)]
        struct Head {
            #[serde(rename = "apiVersion")]
            api_version: Option<String>,
            kind: Option<String>,
            #[serde(default)]
            metadata: Option<Meta>,
        }
        #[derive(serde::Deserialize)]
        struct Meta {
            namespace: Option<String>,
            name: Option<String>,
        }
        if !json.trim_start().starts_with('{') {
            return Err(match serde_json::from_str::<serde::de::IgnoredAny>(json) {
                Ok(_) => CallError::Invalid("object is not a JSON object".into()),
                Err(e) => CallError::Invalid(format!("object is not valid JSON: {e}")),
            });
        }
        let head: Head = serde_json::from_str(json)
            .map_err(|e| CallError::Invalid(format!("object is not valid JSON: {e}")))?;
        let field = |value: Option<String>, name: &str| {
            value
                .filter(|s| !s.is_empty())
                .ok_or_else(|| CallError::Invalid(format!("object has no {name}")))
        };
        let api_version = field(head.api_version, "apiVersion")?;
        let kind = field(head.kind, "kind")?;
        let (namespace, name) = head
            .metadata
            .map_or((None, None), |m| (m.namespace, m.name));
        Ok(ObjectHead {
            gvk: Gvk::from_api_version(&api_version, &kind),
            namespace,
            name,
        })
    }
}

/// Which objects a list returns: what the host's cache and client take, and the guest SDK's
/// `ListParams`. Built with chained calls:
/// `ListOptions::default().namespace("default").labels("app=web")`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Only this namespace; `None` for all namespaces or cluster-scoped kinds.
    pub namespace: Option<String>,
    /// Label selector, e.g. `app=web,tier in (fe,be),!legacy`.
    pub label_selector: Option<String>,
    /// Field selector on `metadata.name` / `metadata.namespace`.
    pub field_selector: Option<String>,
    /// Read from the API server instead of the host's cache.
    pub uncached: bool,
}

impl ListOptions {
    /// Restrict to one namespace (`None` keeps all namespaces).
    #[must_use]
    pub fn namespace<'a>(mut self, namespace: impl Into<Option<&'a str>>) -> Self {
        self.namespace = namespace.into().map(str::to_owned);
        self
    }

    /// Select by labels. An empty selector selects everything.
    #[must_use]
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = (!selector.is_empty()).then(|| selector.to_owned());
        self
    }

    /// Select by fields (`metadata.name`, `metadata.namespace`).
    #[must_use]
    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = (!selector.is_empty()).then(|| selector.to_owned());
        self
    }

    /// Read from the API server instead of the cache (strongly consistent, slower).
    #[must_use]
    pub fn uncached(mut self) -> Self {
        self.uncached = true;
        self
    }
}

/// Conditions checked before a delete (the SDK's `Context::delete_with`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// Delete only if the object still has this UID.
    pub uid: Option<String>,
    /// Delete only if the object is unchanged since this resourceVersion.
    pub resource_version: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_head_should_read_kind_and_name_and_refuse_what_is_not_an_object() {
        let head = ObjectHead::parse(
            r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"a","labels":{"x":"y"}},"spec":{"replicas":2}}"#,
        )
        .expect("head");
        assert_eq!(head.gvk, Gvk::new("apps", "v1", "Deployment"));
        assert_eq!(head.namespace.as_deref(), Some("a"));
        assert_eq!(head.name.as_deref(), Some("web"));
        let refused = |json: &str| match ObjectHead::parse(json) {
            Err(CallError::Invalid(message)) => message,
            other => panic!("{json}: {other:?}"),
        };
        assert!(refused("[1, 2]").contains("not a JSON object"));
        assert!(refused("{\"apiVersion\": \"v1\", ").contains("not valid JSON"));
        assert!(refused(r#"{"apiVersion":"v1","kind":"Pod"} trailing"#).contains("not valid JSON"));
        assert!(refused(r#"{"kind":"Pod"}"#).contains("no apiVersion"));
        assert!(refused(r#"{"apiVersion":"v1","kind":""}"#).contains("no kind"));
    }

    proptest::proptest! {
        /// What a guest sends as an object is untrusted: any text is read or refused, never a
        /// panic.
        #[test]
        fn any_object_text_should_be_read_or_refused(text in ".{0,200}") {
            let _ = ObjectHead::parse(&text);
        }

        #[test]
        fn object_like_text_should_be_read_or_refused(
            api_version in proptest::sample::select(&["v1", "apps/v1", "", "/", "a/b/c", "\\u0000"][..]),
            kind in "[A-Za-z]{0,8}",
            metadata in proptest::sample::select(&["{}", "null", "[]", "{\"name\":1}", "{\"name\":\"x\",\"namespace\":\"y\"}", "\"s\""][..]),
        ) {
            let text = format!(r#"{{"apiVersion":"{api_version}","kind":"{kind}","metadata":{metadata}}}"#);
            let _ = ObjectHead::parse(&text);
        }
    }
}
