//! CRD validation rules (`x-kubernetes-validations`) as kubectl users meet them: a CRD with
//! five rules — across fields, a transition rule, a `messageExpression`, a `reason`, one on
//! the resource itself — refuses each object that breaks one with kube's message, and takes
//! the objects that break none; a rule too expensive is refused when the CRD is created.

use krec_apiserver::Server;

use crate::support::kubectl::{self, Kubectl};

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: apps.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: apps, singular: app, kind: App, listKind: AppList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-validations:
        - rule: \"self.metadata.name.startsWith('app-')\"
          message: names start with app-
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: self.minReplicas <= self.replicas
              message: replicas must be at least minReplicas
              fieldPath: .replicas
            properties:
              replicas: {type: integer}
              minReplicas: {type: integer}
              mode:
                type: string
                x-kubernetes-validations:
                - {rule: self == oldSelf, message: mode is immutable}
              name:
                type: string
                maxLength: 63
                x-kubernetes-validations:
                - rule: \"self.matches('^[a-z]+$')\"
                  messageExpression: \"'name ' + self + ' must be lowercase letters'\"
              tags:
                type: array
                maxItems: 10
                items: {type: string, maxLength: 20}
                x-kubernetes-validations:
                - rule: \"self.all(t, t != 'forbidden')\"
                  reason: FieldValueForbidden
                  message: no tag may be 'forbidden'
";

fn app(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: App\nmetadata: {{name: {name}, namespace: default}}\nspec: {spec}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_rule_should_refuse_what_breaks_it_with_kubes_message() {
    let (cluster, dir, kubectl): (Server, _, Kubectl) = kubectl::start().await;
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path.display().to_string()
    };
    kubectl.ok(&["apply", "-f", &write("crd.yaml", CRD)]);
    kubectl.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/apps.example.com",
    ]);
    let refused = |name: &str, spec: &str| {
        let out = kubectl.run(&["apply", "-f", &write("app.yaml", &app(name, spec))]);
        assert!(!out.status.success(), "{name} {spec} was taken");
        String::from_utf8_lossy(&out.stderr).trim().to_owned()
    };
    let prefix = |name: &str| format!("The App \"{name}\" is invalid: ");
    for (name, spec, cause) in [
        (
            "app-a",
            "{replicas: 1, minReplicas: 2}",
            "spec.replicas: Invalid value: replicas must be at least minReplicas",
        ),
        (
            "app-b",
            "{replicas: 1, minReplicas: 1, name: Web}",
            "spec.name: Invalid value: \"Web\": name Web must be lowercase letters",
        ),
        (
            "app-c",
            "{replicas: 1, minReplicas: 1, tags: [a, forbidden]}",
            "spec.tags: Forbidden: no tag may be 'forbidden'",
        ),
        (
            "other",
            "{replicas: 1, minReplicas: 1}",
            "<nil>: Invalid value: names start with app-",
        ),
    ] {
        assert_eq!(refused(name, spec), format!("{}{cause}", prefix(name)));
    }
    // What breaks no rule is taken; the transition rule holds on create, then guards the field.
    kubectl.ok(&[
        "apply",
        "-f",
        &write(
            "app.yaml",
            &app(
                "app-ok",
                "{replicas: 2, minReplicas: 1, mode: fast, name: web, tags: [a]}",
            ),
        ),
    ]);
    let out = kubectl.run(&[
        "apply",
        "-f",
        &write(
            "app.yaml",
            &app(
                "app-ok",
                "{replicas: 2, minReplicas: 1, mode: slow, name: web, tags: [a]}",
            ),
        ),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            r#"The App "app-ok" is invalid: spec.mode: Invalid value: "slow": mode is immutable"#
        ),
        "{stderr}"
    );
    kubectl.ok(&[
        "apply",
        "-f",
        &write(
            "app.yaml",
            &app(
                "app-ok",
                "{replicas: 3, minReplicas: 1, mode: fast, name: web, tags: [a]}",
            ),
        ),
    ]);

    // A rule that could run for ever on unbounded lists is refused with the CRD.
    let expensive = CRD
        .replace("apps.example.com", "costs.example.com")
        .replace(
            "{plural: apps, singular: app, kind: App, listKind: AppList}",
            "{plural: costs, singular: cost, kind: Cost, listKind: CostList}",
        )
        .replace(
            "maxItems: 10\n                items: {type: string, maxLength: 20}",
            "items: {type: string}",
        )
        .replace(
            "self.all(t, t != 'forbidden')",
            "self.all(t, t.matches('^[a-z]+$') && self.exists(u, u.matches(t)))",
        );
    let out = kubectl.run(&["apply", "-f", &write("cost.yaml", &expensive)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("spec.validation.openAPIV3Schema.properties[spec].properties[tags].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"),
        "{stderr}"
    );
    cluster.shutdown().await;
}

const UNIQUE_CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: tables.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: tables, singular: table, kind: Table, listKind: TableList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          data:
            type: object
            maxProperties: 400
            additionalProperties: {type: string, maxLength: 8}
            x-kubernetes-validations:
            - rule: self.all(k, self.filter(j, self[j] == self[k]).size() == 1)
              message: values must be unique (1)
            - rule: self.all(k, self.filter(j, self[j] == self[k]).size() == 1)
              message: values must be unique (2)
            - rule: self.all(k, self.filter(j, self[j] == self[k]).size() == 1)
              message: values must be unique (3)
            - rule: self.all(k, self.filter(j, self[j] == self[k]).size() == 1)
              message: values must be unique (4)
            - rule: self.all(k, self.filter(j, self[j] == self[k]).size() == 1)
              message: values must be unique (5)
            - rule: self.all(k, self.filter(j, self[j] == self[k]).size() == 1)
              message: values must be unique (6)
            - rule: self.all(k, self.filter(j, self[j] == self[k]).size() == 1)
              message: values must be unique (7)
            - rule: self.all(k, self.filter(j, self[j] == self[k]).size() == 1)
              message: values must be unique (8)
";

/// A CRD's rules run outside the store's lock (issue 52: they ran under it, so a tenant's
/// costly objects held every other request of the server): while writes of objects with
/// quadratic rules take their seconds, reads keep their pace — the slowest read is a small
/// part of the slowest write, where under the lock it was as long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costly_rules_should_hold_no_other_request() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let (cluster, dir, kubectl): (Server, _, Kubectl) = kubectl::start().await;
    let path = dir.path().join("crd.yaml");
    std::fs::write(&path, UNIQUE_CRD).expect("write");
    kubectl.ok(&["apply", "-f", &path.display().to_string()]);
    kubectl.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/tables.example.com",
    ]);
    let client = crate::support::raw::client_for(&cluster).await;
    let resource = kube::discovery::ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Table".into(),
        plural: "tables".into(),
    };
    let tables: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client.clone(), "default", &resource);
    let table = |name: &str, keys: usize, duplicate: bool| {
        let mut data: serde_json::Map<String, serde_json::Value> = (0..keys)
            .map(|i| (format!("k{i}"), serde_json::json!(format!("v{i}"))))
            .collect();
        if duplicate {
            data.insert("again".into(), serde_json::json!("v0"));
        }
        serde_json::from_value::<kube::api::DynamicObject>(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "Table",
            "metadata": {"name": name}, "data": data,
        }))
        .expect("a table")
    };
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "default");
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (stop, configmaps) = (stop.clone(), configmaps.clone());
        tokio::spawn(async move {
            let mut slowest = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                configmaps
                    .get("kube-root-ca.crt")
                    .await
                    .or_else(|_| Ok::<_, ()>(Default::default()))
                    .ok();
                slowest = slowest.max(started.elapsed());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            slowest
        })
    };
    // Keys enough for a costly rule within the per-call cost limit.
    const KEYS: usize = 190;
    let mut slowest_write = Duration::ZERO;
    for (i, duplicate) in [false, true, false].into_iter().enumerate() {
        let started = Instant::now();
        let written = tables
            .create(
                &Default::default(),
                &table(&format!("t{i}"), KEYS, duplicate),
            )
            .await;
        slowest_write = slowest_write.max(started.elapsed());
        match (duplicate, written) {
            (false, Ok(_)) => {}
            (true, Err(kube::Error::Api(status))) => assert_eq!(
                status.message,
                format!(
                    "Table.example.com \"t{i}\" is invalid: [{}]",
                    (1..=8)
                        .map(|rule| format!("data: Invalid value: values must be unique ({rule})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            ),
            (_, other) => panic!("t{i} (duplicate: {duplicate}): {other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let slowest_read = reader.await.expect("reader");
    eprintln!("slowest write {slowest_write:?}, slowest read meanwhile {slowest_read:?}");
    assert!(
        slowest_read * 4 < slowest_write,
        "reads waited on the rules: slowest read {slowest_read:?}, slowest write {slowest_write:?}"
    );
}
