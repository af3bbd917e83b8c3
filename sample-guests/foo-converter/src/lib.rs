//! foo-converter: the conversion webhook between the two versions of the sample-controller's
//! `Foo` CRD (`spec.conversion.strategy: Webhook`).
//!
//! `v1alpha1` (the storage version, the one foo-controller reconciles) calls the Deployment's
//! size `spec.replicas`; `v1beta1` calls it `spec.instances`. The API server sends every object
//! read or written in the other version here, so `kubectl get foos.v1beta1.samplecontroller.k8s.io`
//! and `kubectl get foos.v1alpha1.samplecontroller.k8s.io` both show every Foo.

use krec_guest::prelude::*;
use krec_guest::serde_json::{Map, Value};

/// The Foo API group.
const GROUP: &str = "samplecontroller.k8s.io";

/// The `spec` field holding the size, per version.
fn size_field(version: &str) -> Result<&'static str, String> {
    match version {
        "v1alpha1" => Ok("replicas"),
        "v1beta1" => Ok("instances"),
        other => Err(format!(
            "foo-converter converts {GROUP} v1alpha1 and v1beta1, not {other:?}"
        )),
    }
}

/// The version of `api_version` (`group/version`), checking the group.
fn version_of(api_version: &str) -> Result<&str, String> {
    match api_version.split_once('/') {
        Some((GROUP, version)) => Ok(version),
        _ => Err(format!(
            "foo-converter converts {GROUP} objects, not {api_version:?}"
        )),
    }
}

#[derive(Default)]
struct FooConverter;

impl Converter for FooConverter {
    fn convert(&self, mut object: Value, desired_api_version: &str) -> Result<Value, String> {
        let from = version_of(object["apiVersion"].as_str().unwrap_or_default())?;
        let (from_field, to_field) = (
            size_field(from)?,
            size_field(version_of(desired_api_version)?)?,
        );
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            rename(spec, from_field, to_field);
        }
        object["apiVersion"] = Value::from(desired_api_version);
        Ok(object)
    }
}

/// Move `spec[from]` to `spec[to]` (nothing when they are the same field or `from` is unset).
fn rename(spec: &mut Map<String, Value>, from: &str, to: &str) {
    if from != to
        && let Some(value) = spec.remove(from)
    {
        spec.insert(to.to_owned(), value);
    }
}

export!(converter: FooConverter);

#[cfg(test)]
mod tests {
    use super::*;
    use krec_guest::serde_json::json;

    fn foo(version: &str, field: &str) -> Value {
        json!({"apiVersion": format!("{GROUP}/{version}"), "kind": "Foo",
            "metadata": {"name": "example-foo"},
            "spec": {"deploymentName": "example-foo", field: 2}})
    }

    #[test]
    fn replicas_and_instances_should_round_trip() {
        let beta = FooConverter.convert(
            foo("v1alpha1", "replicas"),
            "samplecontroller.k8s.io/v1beta1",
        );
        assert_eq!(beta, Ok(foo("v1beta1", "instances")));
        let alpha = FooConverter.convert(
            foo("v1beta1", "instances"),
            "samplecontroller.k8s.io/v1alpha1",
        );
        assert_eq!(alpha, Ok(foo("v1alpha1", "replicas")));
    }

    #[test]
    fn unknown_versions_should_fail_with_a_message() {
        let err = FooConverter.convert(foo("v1alpha1", "replicas"), "samplecontroller.k8s.io/v2");
        assert_eq!(
            err,
            Err(
                "foo-converter converts samplecontroller.k8s.io v1alpha1 and v1beta1, not \"v2\""
                    .into()
            )
        );
    }
}
