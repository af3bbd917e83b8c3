//! Cluster access: the one seam between the guest plumbing and wherever objects live.
//!
//! The host side of the WIT `client` and `events` interfaces calls a [`ClusterAccess`] after
//! checking the guest's permissions. Implementations: [`MemoryCluster`] (an in-memory object set
//! for tests and the demo); the cache-backed client over the Kubernetes API server plugs in the
//! same way, without touching the guest plumbing.

pub mod api;
pub mod events;
pub mod fence;
pub mod live;
mod memory;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use krec_apiserver::ErrorKind;

pub use memory::{MAX_EVENTS, MemoryCluster, RecordedEvent};

/// A Kubernetes group/version/kind. The core group is `""`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvk {
    /// API group, `""` for core.
    pub group: String,
    /// Version within the group.
    pub version: String,
    /// Kind, CamelCase.
    pub kind: String,
}

impl Gvk {
    /// A GVK from its parts.
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Gvk {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// A GVK from an `apiVersion` (`v1`, `apps/v1`) and a kind.
    pub fn from_api_version(api_version: &str, kind: &str) -> Self {
        match api_version.split_once('/') {
            Some((group, version)) => Gvk::new(group, version, kind),
            None => Gvk::new("", api_version, kind),
        }
    }

    /// The `apiVersion` string: `version` for core, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The GVK of a JSON object from its `apiVersion` and `kind` fields.
    pub fn of_object(object: &Value) -> Result<Self, AccessError> {
        let field = |name: &str| {
            object
                .get(name)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| AccessError::Invalid(format!("object has no {name}")))
        };
        Ok(Gvk::from_api_version(field("apiVersion")?, field("kind")?))
    }
}

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version(), self.kind)
    }
}

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

/// Format of a patch body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// RFC 6902 JSON patch.
    Json,
    /// Kubernetes strategic merge patch.
    Strategic,
    /// Server-side apply.
    Apply,
}

/// Preconditions of a delete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// Required UID.
    pub uid: Option<String>,
    /// Required resourceVersion.
    pub resource_version: Option<String>,
}

/// Kind of a Kubernetes Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

impl EventType {
    /// The Event's `type` field.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The object an Event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectReference {
    /// Kind of the object.
    pub gvk: Gvk,
    /// Namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// UID, if known.
    pub uid: Option<String>,
}

/// An Event to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    /// The object the Event is about.
    pub regarding: ObjectReference,
    /// Normal or Warning.
    pub event_type: EventType,
    /// Short CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// The component reporting it: the guest's name.
    pub reporter: String,
}

/// Cut `text` to at most `max` bytes on a character boundary; whether anything was cut.
pub(crate) fn cut(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    true
}

/// Why a cluster call failed; mirrors the WIT `error` variant and Kubernetes' status reasons.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// 404 NotFound.
    #[error("not found: {0}")]
    NotFound(String),
    /// 409 AlreadyExists.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// 409 Conflict: stale resourceVersion or failed precondition.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Not permitted by the manifest or by the API server.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// 400/422: malformed or invalid.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The call timed out.
    #[error("timeout: {0}")]
    Timeout(String),
    /// The API server is unreachable or not ready.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl From<krec_apiserver::ApiError> for AccessError {
    fn from(err: krec_apiserver::ApiError) -> Self {
        AccessError::of(err.kind(), err.code, err.reason, err.message)
    }
}

impl AccessError {
    /// The error for a response of `kind` (with its `code`, `reason` and `message`).
    #[must_use]
    pub fn of(kind: ErrorKind, code: u16, reason: &str, message: String) -> Self {
        match kind {
            ErrorKind::NotFound => AccessError::NotFound(message),
            ErrorKind::AlreadyExists => AccessError::AlreadyExists(message),
            ErrorKind::Conflict => AccessError::Conflict(message),
            ErrorKind::Forbidden => AccessError::Forbidden(message),
            ErrorKind::Invalid => AccessError::Invalid(message),
            ErrorKind::Timeout => AccessError::Timeout(message),
            ErrorKind::Unavailable => AccessError::Unavailable(message),
            ErrorKind::Other => AccessError::Other(format!("{code} {reason}: {message}")),
        }
    }

    /// The same error with its message cut at `max` bytes (marked `[truncated]`).
    #[must_use]
    pub fn truncated(mut self, max: usize) -> Self {
        let message = match &mut self {
            AccessError::NotFound(m)
            | AccessError::AlreadyExists(m)
            | AccessError::Conflict(m)
            | AccessError::Forbidden(m)
            | AccessError::Invalid(m)
            | AccessError::Timeout(m)
            | AccessError::Unavailable(m)
            | AccessError::Other(m) => m,
        };
        if cut(message, max) {
            message.push_str(" [truncated]");
        }
        self
    }
}

/// Where guests' reads and writes go. Objects are JSON values with `apiVersion` and `kind`.
///
/// Implementations apply Kubernetes semantics: optimistic concurrency on `resourceVersion`,
/// `generateName`, the status subresource, finalizers. Permission checks happen before a call
/// reaches this trait.
#[async_trait]
pub trait ClusterAccess: Send + Sync + 'static {
    /// Get one object.
    async fn get(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, AccessError>;
    /// List objects.
    async fn list(&self, gvk: &Gvk, options: &ListOptions) -> Result<Vec<Value>, AccessError>;
    /// Whether objects of `gvk` live in namespaces (`false`: cluster-scoped), as the API server
    /// serves the kind. Permission checks use it: a namespace given for a cluster-scoped kind
    /// grants nothing.
    ///
    /// # Errors
    ///
    /// `not-found` when the kind is not served.
    async fn namespaced(&self, gvk: &Gvk) -> Result<bool, AccessError>;
    /// Get one object as JSON text, as a guest receives it. The default serializes what
    /// [`get`](Self::get) returns; a cache hands out the text it holds.
    async fn get_json(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<str>, AccessError> {
        json_text(&self.get(gvk, namespace, name).await?)
    }
    /// List objects as JSON text. The default serializes what [`list`](Self::list) returns.
    async fn list_json(
        &self,
        gvk: &Gvk,
        options: &ListOptions,
    ) -> Result<Vec<Arc<str>>, AccessError> {
        self.list(gvk, options)
            .await?
            .iter()
            .map(json_text)
            .collect()
    }
    /// Create an object; returns it as stored.
    async fn create(&self, object: Value) -> Result<Value, AccessError>;
    /// Replace an object (or only its status when `status` is true); returns it as stored.
    async fn update(&self, object: Value, status: bool) -> Result<Value, AccessError>;
    /// Patch an object (or its status); returns it as stored.
    async fn patch(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        body: Value,
        status: bool,
    ) -> Result<Value, AccessError>;
    /// Delete an object.
    async fn delete(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        preconditions: Option<&Preconditions>,
    ) -> Result<(), AccessError>;
    /// Record an Event.
    async fn record_event(&self, event: EventRecord) -> Result<(), AccessError>;
    /// Write an object given as JSON text (`head` read from it) and return it as stored, as
    /// JSON text. The default parses the text and calls [`create`](Self::create) or
    /// [`update`](Self::update); a client of the API server sends the text as it is.
    async fn write_json(
        &self,
        kind: WriteKind,
        _head: &ObjectHead,
        json: &str,
    ) -> Result<String, AccessError> {
        let object: Value = serde_json::from_str(json)
            .map_err(|e| AccessError::Invalid(format!("object is not valid JSON: {e}")))?;
        let stored = match kind {
            WriteKind::Create => self.create(object).await?,
            WriteKind::Update => self.update(object, false).await?,
            WriteKind::UpdateStatus => self.update(object, true).await?,
        };
        serde_json::to_string(&stored)
            .map_err(|e| AccessError::Other(format!("encoding object: {e}")))
    }
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
