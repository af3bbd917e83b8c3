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

const UNIQUE_VALUES: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: unique-values}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ['']
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [configmaps]
  validations:
  - expression: \"!has(object.data) || object.data.all(k, object.data.filter(k2, object.data[k2] == object.data[k]).size() == 1)\"
    message: values must be unique
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: unique-values}
spec:
  policyName: unique-values
  validationActions: [Deny]
";

/// A policy quadratic in the object (kube's runtime cost limits stop it): a namespace admin's
/// ConfigMap of 1 000 keys is refused in kube's words, quickly, while other requests keep
/// being answered; 100 keys pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_over_its_runtime_cost_should_be_refused_and_stall_no_one() {
    let (cluster, dir, kubectl) = kubectl::start().await;
    let policies = dir.path().join("unique.yaml");
    std::fs::write(&policies, UNIQUE_VALUES).expect("write");
    kubectl.ok(&["apply", "-f", &policies.display().to_string()]);
    let client = crate::support::raw::client_for(&cluster).await;
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "default");
    let configmap = |name: &str, keys: usize| k8s_openapi::api::core::v1::ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            (0..keys)
                .map(|i| (format!("k{i}"), format!("v{i}")))
                .collect(),
        ),
        ..Default::default()
    };
    configmaps
        .create(&Default::default(), &configmap("small", 100))
        .await
        .expect("100 keys are within the cost limit");
    // Reads go on meanwhile: the slowest of them stays short.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (stop, configmaps) = (stop.clone(), configmaps.clone());
        tokio::spawn(async move {
            let mut slowest = std::time::Duration::ZERO;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let started = std::time::Instant::now();
                configmaps.get("small").await.expect("get");
                slowest = slowest.max(started.elapsed());
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            slowest
        })
    };
    let started = std::time::Instant::now();
    let refused = configmaps
        .create(&Default::default(), &configmap("big", 1000))
        .await
        .expect_err("over the cost limit");
    eprintln!("refused after {:?}", started.elapsed());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let slowest = reader.await.expect("reader");
    let kube::Error::Api(status) = refused else {
        panic!("{refused:?}");
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert_eq!(
        status.message,
        "configmaps \"big\" is forbidden: ValidatingAdmissionPolicy 'unique-values' with binding 'unique-values' denied request: expression '!has(object.data) || object.data.all(k, object.data.filter(k2, object.data[k2] == object.data[k]).size() == 1)' resulted in error: operation cancelled: actual cost limit exceeded"
    );
    // Not a speed figure: before the meter, every other request waited minutes.
    eprintln!("slowest read meanwhile {slowest:?}");
    assert!(slowest < std::time::Duration::from_secs(5), "{slowest:?}");
}
