//! [`ObjectKey`]: which object, within its kind — the key of the queue, the cache, the live
//! cluster and a reconcile request.

use std::fmt;

/// An object's namespace (none for a cluster-scoped object) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ObjectKey {
    /// The namespace; `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl ObjectKey {
    /// The key of `name` in `namespace` (`None`: cluster-scoped).
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        ObjectKey {
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// The key of `name` in `namespace` from outside the cache (a manual trigger, a guest's
    /// `map`): checked to be what an object could be called, so that it can be one URL segment
    /// and cannot forge a log line.
    ///
    /// # Errors
    ///
    /// [`BadObjectName`] saying what is wrong.
    pub fn checked(namespace: Option<&str>, name: &str) -> Result<Self, BadObjectName> {
        if let Some(ns) = namespace
            && !crate::selector::is_dns_label(ns)
        {
            return Err(BadObjectName::Namespace(ns.chars().take(64).collect()));
        }
        let valid = !name.is_empty()
            && name.len() <= MAX_NAME
            && name != "."
            && name != ".."
            && !name.chars().any(|c| c.is_control() || c == '/' || c == '%');
        if !valid {
            return Err(BadObjectName::Name(name.chars().take(64).collect()));
        }
        Ok(ObjectKey::new(namespace, name))
    }

    /// The namespace, borrowed.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
}

/// Longest object name a key from outside the cache may have: a DNS subdomain's 253 bytes.
pub const MAX_NAME: usize = 253;

/// A namespace or name no object could have (its first 64 characters).
#[derive(Debug, thiserror::Error)]
pub enum BadObjectName {
    /// Not a DNS label.
    #[error("{0:?} is not a valid namespace")]
    Namespace(String),
    /// Empty, too long, `.`, `..`, or with `/`, `%` or control characters.
    #[error(
        "{0:?} is not a valid object name: 1-{MAX_NAME} bytes, not `.` or `..`, no `/`, `%` or control characters"
    )]
    Name(String),
}

/// `namespace/name`, or `name` for a cluster-scoped object (client-go's `MetaNamespaceKeyFunc`).
impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        KeyRef {
            namespace: self.namespace.as_deref(),
            name: &self.name,
        }
        .fmt(f)
    }
}

/// An object's key borrowed from where its parts already are, to print as an [`ObjectKey`]
/// prints without copying them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyRef<'a> {
    /// The namespace; `None` for a cluster-scoped object.
    pub namespace: Option<&'a str>,
    /// The name.
    pub name: &'a str,
}

/// `namespace/name`, or `name` for a cluster-scoped object.
impl fmt::Display for KeyRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_should_print_as_client_go_does() {
        assert_eq!(
            ObjectKey::new(Some("default"), "web").to_string(),
            "default/web"
        );
        assert_eq!(
            ObjectKey::new(None, "kube-system").to_string(),
            "kube-system"
        );
    }
}
