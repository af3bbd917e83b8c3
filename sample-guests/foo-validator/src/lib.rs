//! foo-validator: a validating admission webhook for the sample-controller's `Foo`.
//!
//! A Foo is denied when its `spec.deploymentName` is not a valid Deployment name (a DNS-1123
//! subdomain) or is already used by another Foo in the same namespace — found with a `list`
//! from the host's cache, so two Foos never fight over one Deployment.

use krec_guest::CustomResource;
use krec_guest::prelude::*;
use serde::{Deserialize, Serialize};

/// The part of a Foo the validator reads.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "samplecontroller.k8s.io",
    version = "v1alpha1",
    kind = "Foo",
    namespaced,
    schema = "disabled",
    crates(
        kube_core = "::krec_guest::kube_core",
        k8s_openapi = "::krec_guest::k8s_openapi",
        serde_json = "::krec_guest::serde_json"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FooSpec {
    /// Name of the Deployment the Foo owns.
    #[serde(default)]
    pub deployment_name: String,
}

/// Why `name` is not a DNS-1123 subdomain (what a Deployment's name must be), if it is not.
fn dns_subdomain_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("must not be empty");
    }
    if name.len() > 253 {
        return Some("must be no more than 253 characters");
    }
    let valid = name.split('.').all(|label| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    });
    (!valid).then_some(
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
    )
}

#[derive(Default)]
struct FooValidator;

impl Validator for FooValidator {
    type Object = Foo;

    fn validate(&self, req: &AdmissionRequest<Foo>, ctx: &Context) -> Verdict {
        let Some(foo) = &req.object else {
            return Verdict::allow();
        };
        let wanted = &foo.spec.deployment_name;
        if let Some(problem) = dns_subdomain_problem(wanted) {
            return Verdict::invalid(format!(
                "spec.deploymentName: Invalid value: {wanted:?}: {problem}"
            ));
        }
        let namespace = req.namespace.as_deref();
        let others = match ctx.list::<Foo>(&ListParams::default().namespace(namespace)) {
            Ok(others) => others,
            // Cannot check: trap, so the API server's failurePolicy decides.
            Err(err) => panic!("listing Foos: {err}"),
        };
        let me = foo.metadata.name.as_deref().or(req.name.as_deref());
        if let Some(other) = others.iter().find(|other| {
            other.spec.deployment_name == *wanted && other.metadata.name.as_deref() != me
        }) {
            return Verdict::invalid(format!(
                "spec.deploymentName: Duplicate value: {wanted:?}: already used by Foo {:?} in namespace {:?}",
                other.metadata.name.as_deref().unwrap_or_default(),
                namespace.unwrap_or_default()
            ));
        }
        Verdict::allow()
    }
}

export!(validator: FooValidator);

#[cfg(test)]
mod tests {
    use super::*;
    use krec_guest::serde_json::json;
    use krec_guest::testing::FakeCluster;

    /// A cluster serving the Foo kind (its CRD, as `foo-controller/crd` defines it, reduced to
    /// what the validator needs), holding `foos`.
    fn cluster(foos: &[Foo]) -> FakeCluster {
        let mut cluster = FakeCluster::new().with_json(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "foos.samplecontroller.k8s.io",
                "annotations": {"api-approved.kubernetes.io": "unapproved, experimental-only"}},
            "spec": {"group": "samplecontroller.k8s.io", "scope": "Namespaced",
                "names": {"kind": "Foo", "plural": "foos", "singular": "foo", "listKind": "FooList"},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]}}));
        for foo in foos {
            cluster = cluster.with(foo);
        }
        cluster
    }

    fn foo(name: &str, deployment: &str) -> Foo {
        let mut foo = Foo::new(
            name,
            FooSpec {
                deployment_name: deployment.into(),
            },
        );
        foo.metadata.namespace = Some("default".into());
        foo
    }

    #[test]
    fn a_foo_naming_an_invalid_deployment_should_be_refused_as_invalid() {
        let verdict = cluster(&[]).validate(
            &FooValidator,
            &AdmissionRequest::create(foo("example", "Not_A_Name")),
        );
        assert!(!verdict.allowed);
        assert_eq!(verdict.code, Some(422));
        assert!(
            verdict.message.as_deref().is_some_and(
                |m| m.starts_with("spec.deploymentName: Invalid value: \"Not_A_Name\"")
            ),
            "{verdict:?}"
        );
    }

    #[test]
    fn a_deployment_another_foo_uses_should_be_refused_and_its_own_kept() {
        let taken = foo("first", "web");
        let cluster = cluster(std::slice::from_ref(&taken));
        let verdict = cluster.validate(
            &FooValidator,
            &AdmissionRequest::create(foo("second", "web")),
        );
        assert!(!verdict.allowed, "{verdict:?}");
        assert!(
            verdict
                .message
                .as_deref()
                .is_some_and(|m| m.contains("Duplicate value")),
            "{verdict:?}"
        );
        // The Foo that has it may keep it; another name is free.
        let mut changed = taken.clone();
        changed.metadata.labels = Some([("k".to_owned(), "v".to_owned())].into());
        assert!(
            cluster
                .validate(&FooValidator, &AdmissionRequest::update(taken, changed))
                .allowed
        );
        assert!(
            cluster
                .validate(
                    &FooValidator,
                    &AdmissionRequest::create(foo("third", "api"))
                )
                .allowed
        );
    }

    #[test]
    fn deployment_names_should_be_dns_subdomains() {
        assert_eq!(dns_subdomain_problem("web"), None);
        assert_eq!(dns_subdomain_problem("web-1.example"), None);
        assert!(dns_subdomain_problem("Web").is_some());
        assert!(dns_subdomain_problem("-web").is_some());
        assert!(dns_subdomain_problem("").is_some());
    }
}
