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

    /// The namespace, borrowed.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
}

/// `namespace/name`, or `name` for a cluster-scoped object (client-go's `MetaNamespaceKeyFunc`).
impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
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
