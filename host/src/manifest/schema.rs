//! The schemas of the manifest's free-form fields, for the CRDs' OpenAPI schema generated from
//! [`ReconcilerSpec`](super::types::ReconcilerSpec) (see `install::crds`).

use schemars::{Schema, SchemaGenerator, json_schema};

/// A value the host reads as it is written (a guest's `config`): any JSON.
pub(crate) fn any_value(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}

/// An object the host reads as it is written (a label selector, a schema).
pub(crate) fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// A Kubernetes quantity: an integer (`67108864`) or a string (`64Mi`, `500m`).
pub(crate) fn quantity(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"x-kubernetes-int-or-string": true,
        "anyOf": [{"type": "integer"}, {"type": "string"}]})
}
