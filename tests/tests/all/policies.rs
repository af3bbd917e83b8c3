//! A cluster's ValidatingAdmissionPolicy meets a guest's write: the foo controller's
//! Deployment with more replicas than the policy allows is refused, and the guest gets kube's
//! 422 as a typed error (`Invalid`), not a transport failure.

use krec::guest::ReconcileError;
use krec_core::CallError;
use krec_tests::{Live, sample_manifest, sample_objects};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_a_policy_denies_should_reach_the_guest_as_invalid() {
    let mut objects = sample_objects("foo-controller");
    objects.extend([
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "replica-limit"},
            "spec": {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
                "validations": [{"expression": "object.spec.replicas <= int(params.data.maxReplicas)",
                    "messageExpression": "'object.spec.replicas must be no greater than ' + params.data.maxReplicas"}]}}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "replica-limit-binding"},
            "spec": {"policyName": "replica-limit", "validationActions": ["Deny"],
                "paramRef": {"name": "replica-limit", "namespace": "default",
                    "parameterNotFoundAction": "Deny"}}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "replica-limit", "namespace": "default"},
            "data": {"maxReplicas": "3"}}),
        json!({"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
            "metadata": {"name": "big", "namespace": "default"},
            "spec": {"deploymentName": "big", "replicas": 5}}),
    ]);
    let live = Live::start(Vec::new(), objects).await;
    let mut worker = live.worker(sample_manifest("foo-controller"));
    match worker.reconcile(Some("default"), "big").await {
        Err(ReconcileError::Guest {
            error: CallError::Invalid(message),
            ..
        }) => assert!(
            message.contains(
                "ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: object.spec.replicas must be no greater than 3"
            ),
            "{message}"
        ),
        other => panic!("expected the policy's 422 as Invalid, got {other:?}"),
    }
}
