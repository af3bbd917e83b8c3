//! ValidatingAdmissionPolicy as kubectl users meet it: the Kubernetes docs' replica limit with
//! a parameter ConfigMap denies a Deployment with too many replicas in kube's words; a `Warn`
//! binding's failure is a warning kubectl prints; an `Audit` binding's is an annotation of the
//! request's audit event; a binding whose parameter is missing refuses as kube does.

use std::sync::Arc;

use krec_apiserver::Server;
use krec_apiserver::audit::AuditLog;

use crate::support::kubectl::{self, Kubectl};

const POLICIES: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replica-limit}
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
  validations:
  - expression: object.spec.replicas <= int(params.data.maxReplicas)
    messageExpression: \"'object.spec.replicas must be no greater than ' + params.data.maxReplicas\"
    reason: Invalid
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: replica-limit-binding}
spec:
  policyName: replica-limit
  validationActions: [Deny]
  paramRef: {name: replica-limit, namespace: default, parameterNotFoundAction: Deny}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-latest}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
  variables:
  - name: images
    expression: object.spec.template.spec.containers.map(c, c.image)
  validations:
  - expression: \"variables.images.all(i, !i.endsWith(':latest') && i.contains(':'))\"
    message: images must name a tag other than latest
  auditAnnotations:
  - key: images
    valueExpression: \"variables.images.join(',')\"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: no-latest-warn}
spec:
  policyName: no-latest
  validationActions: [Warn, Audit]
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_should_deny_warn_and_audit_as_kubes_do() {
    let audit = Arc::new(AuditLog::in_memory());
    let (cluster, dir, kubectl): (Server, _, Kubectl) =
        kubectl::start_with(Server::builder().audit(audit.clone())).await;
    let policies = dir.path().join("policies.yaml");
    std::fs::write(&policies, POLICIES).expect("write");
    kubectl.ok(&["apply", "-f", &policies.display().to_string()]);

    // The binding's parameter is missing: kube refuses, naming it.
    let out = kubectl.run(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:1.27",
        "--replicas=2",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "error: failed to create deployment: deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    );
    kubectl.ok(&[
        "create",
        "configmap",
        "replica-limit",
        "--from-literal=maxReplicas=3",
    ]);

    let out = kubectl.run(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:1.27",
        "--replicas=5",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "error: failed to create deployment: deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: object.spec.replicas must be no greater than 3"
    );
    let out = kubectl.run(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:1.27",
        "--replicas=3",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "");
    // An update is checked too (`kubectl scale` would not be: the rule names `deployments`,
    // not `deployments/scale`).
    let out = kubectl.run(&[
        "patch",
        "deployment",
        "web",
        "-p",
        r#"{"spec":{"replicas":4}}"#,
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("denied request: object.spec.replicas must be no greater than 3"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // `Warn` and `Audit`: the request goes through, with a warning and an annotation.
    let out = kubectl.run(&[
        "create",
        "deployment",
        "latest",
        "--image=nginx",
        "--replicas=1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "Warning: Validation failed for ValidatingAdmissionPolicy 'no-latest' with binding 'no-latest-warn': images must name a tag other than latest"
    );
    let event = audit
        .events()
        .into_iter()
        .rev()
        .find(|e| e["objectRef"]["resource"] == "deployments" && e["verb"] == "create")
        .expect("the create's event");
    assert_eq!(event["annotations"]["no-latest/images"], "nginx");
    let failures: serde_json::Value = serde_json::from_str(
        event["annotations"]["validation.policy.admission.k8s.io/validation_failure"]
            .as_str()
            .expect("the Audit decision"),
    )
    .expect("json");
    assert_eq!(
        failures,
        serde_json::json!([{"message": "images must name a tag other than latest",
            "policy": "no-latest", "binding": "no-latest-warn", "expressionIndex": 0,
            "validationActions": ["Warn", "Audit"]}])
    );

    // A policy whose expression does not compile is refused.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: bad}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  validations:
  - expression: frobnicate(object)
",
    )
    .expect("write");
    let out = kubectl.run(&["apply", "-f", &bad.display().to_string()]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "spec.validations[0].expression: Invalid value: \"frobnicate(object)\": compilation failed: ERROR: <input>: undeclared reference to 'frobnicate' (in container '')"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    kubectl.ok(&["get", "validatingadmissionpolicies"]);
    cluster.shutdown().await;
}

const MUTATING: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: defaults}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [deployments]
  matchConditions:
  - name: unlabelled
    expression: \"!has(object.metadata.labels) || !('team' in object.metadata.labels)\"
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{labels: {'team': params.data.team}}}
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: 'add', path: '/spec/template/metadata/annotations',
          value: {'mutated-by': 'defaults'}}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: defaults}
spec:
  policyName: defaults
  paramRef: {name: defaults, namespace: default, parameterNotFoundAction: Deny}
";

/// A MutatingAdmissionPolicy (GA and served by default in kube 1.36): an `ApplyConfiguration`
/// and a `JSONPatch` change what is created, with a parameter; its `matchConditions` skip what
/// they exclude; a missing parameter refuses the request as kube does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutating_policies_should_change_what_they_match() {
    let (cluster, dir, kubectl): (Server, _, Kubectl) = kubectl::start().await;
    let policies = dir.path().join("mutating.yaml");
    std::fs::write(&policies, MUTATING).expect("write");
    kubectl.ok(&["apply", "-f", &policies.display().to_string()]);
    let out = kubectl.run(&["create", "deployment", "web", "--image=nginx:1.27"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "error: failed to create deployment: policy 'defaults' with binding 'defaults' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    );
    kubectl.ok(&[
        "create",
        "configmap",
        "defaults",
        "--from-literal=team=blue",
    ]);
    kubectl.ok(&["create", "deployment", "web", "--image=nginx:1.27"]);
    let web: serde_json::Value =
        serde_json::from_str(&kubectl.ok(&["get", "deployment", "web", "-o", "json"]))
            .expect("json");
    assert_eq!(web["metadata"]["labels"]["team"], "blue");
    assert_eq!(web["metadata"]["labels"]["app"], "web", "the rest kept");
    assert_eq!(
        web["spec"]["template"]["metadata"]["annotations"]["mutated-by"],
        "defaults"
    );
    // Labelled already: the condition excludes it.
    let labelled = dir.path().join("labelled.yaml");
    std::fs::write(
        &labelled,
        "apiVersion: apps/v1
kind: Deployment
metadata: {name: red, labels: {team: red}}
spec:
  selector: {matchLabels: {app: red}}
  template:
    metadata: {labels: {app: red}}
    spec: {containers: [{name: c, image: nginx}]}
",
    )
    .expect("write");
    kubectl.ok(&["apply", "-f", &labelled.display().to_string()]);
    let red: serde_json::Value =
        serde_json::from_str(&kubectl.ok(&["get", "deployment", "red", "-o", "json"]))
            .expect("json");
    assert_eq!(red["metadata"]["labels"]["team"], "red");
    assert!(
        red["spec"]["template"]["metadata"]
            .get("annotations")
            .is_none()
    );
    kubectl.ok(&[
        "get",
        "mutatingadmissionpolicies,mutatingadmissionpolicybindings",
    ]);
    cluster.shutdown().await;
}
