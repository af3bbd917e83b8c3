//! What a read or write names: objects as JSON text and their heads, list options, patch types,
//! preconditions.

use std::sync::Arc;

use serde_json::Value;

use super::{AccessError, Gvk};
use crate::bindings::krec::reconciler::client::PatchType as WitPatchType;

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
pub fn json_text(object: &Value) -> Result<Arc<str>, AccessError> {
    serde_json::to_string(object)
        .map(Into::into)
        .map_err(|e| AccessError::Other(format!("encoding object: {e}")))
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
    pub fn parse(json: &str) -> Result<Self, AccessError> {
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
                Ok(_) => AccessError::Invalid("object is not a JSON object".into()),
                Err(e) => AccessError::Invalid(format!("object is not valid JSON: {e}")),
            });
        }
        let head: Head = serde_json::from_str(json)
            .map_err(|e| AccessError::Invalid(format!("object is not valid JSON: {e}")))?;
        let field = |value: Option<String>, name: &str| {
            value
                .filter(|s| !s.is_empty())
                .ok_or_else(|| AccessError::Invalid(format!("object has no {name}")))
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

/// Which objects a list returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Only this namespace; `None` for all.
    pub namespace: Option<String>,
    /// Label selector text.
    pub label_selector: Option<String>,
    /// Field selector text.
    pub field_selector: Option<String>,
    /// Bypass the cache.
    pub uncached: bool,
}

pub use krec_core::PatchType;

/// The conversions between [`PatchType`] and the other enums with the same cases — the WIT
/// `patch-type` the guests send, and the guest SDK's native `PatchType` (the native arm) — from
/// one list of the cases.
macro_rules! patch_cases {
    ($($case:ident),* $(,)?) => {
        impl From<WitPatchType> for PatchType {
            fn from(how: WitPatchType) -> Self {
                match how {
                    $(WitPatchType::$case => PatchType::$case,)*
                }
            }
        }

        #[cfg(feature = "native")]
        impl From<krec_guest::native::PatchType> for WitPatchType {
            fn from(how: krec_guest::native::PatchType) -> Self {
                match how {
                    $(krec_guest::native::PatchType::$case => WitPatchType::$case,)*
                }
            }
        }
    };
}

patch_cases!(Merge, Json, Strategic, Apply);

/// Preconditions of a delete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// Required UID.
    pub uid: Option<String>,
    /// Required resourceVersion.
    pub resource_version: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::{AccessError, Gvk};

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
            Err(AccessError::Invalid(message)) => message,
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
