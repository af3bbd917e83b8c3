//! [`Gvk`]: which kind an object is.

use std::fmt;

use serde_json::Value;

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
    ///
    /// # Errors
    ///
    /// [`MissingField`] naming the first of the two that is absent or empty.
    pub fn of_object(object: &Value) -> Result<Self, MissingField> {
        let field = |name: &'static str| {
            object
                .get(name)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or(MissingField(name))
        };
        Ok(Gvk::from_api_version(field("apiVersion")?, field("kind")?))
    }
}

/// An object without `apiVersion` or `kind` (the field named).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("object has no {0}")]
pub struct MissingField(pub &'static str);

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version(), self.kind)
    }
}
