//! The namespaces every cluster starts with.

use serde_json::json;

use super::Store;
use krec_core::error::ApiError;

/// Namespaces every cluster starts with.
pub const INITIAL_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Create the [`INITIAL_NAMESPACES`] that do not exist yet.
pub fn ensure_namespaces(store: &Store) -> Result<(), ApiError> {
    let Some(rt) = store.registry().by_plural("", "v1", "namespaces") else {
        return Err(ApiError::internal(
            "the namespaces resource is not registered",
        ));
    };
    for ns in INITIAL_NAMESPACES {
        if store.get(&rt, None, ns).is_err() {
            store.create(
                &rt,
                None,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                false,
            )?;
        }
    }
    Ok(())
}
