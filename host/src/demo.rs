//! `krec dev` in its in-memory form: the sample objects, every guest run against them, and a
//! readable account of what each guest did.
//!
//! There are no watches here yet: each guest is run once per request its manifest implies
//! (every object of its `for` kind, each `watches[].mapTo` request, each ticker's request), then
//! the scene changes (a pod is deleted, a Deployment becomes available, a ConfigMap is added) and
//! the guests run again.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::cluster::{
    AccessError, ClusterAccess, EventRecord, Gvk, ListOptions, MemoryCluster, PatchType,
    Preconditions,
};
use crate::guest::{GuestModule, GuestWorker};
use crate::manifest::Manifest;

/// Longest line the demo prints about one write; patch bodies can be megabytes.
const MAX_NOTE_BYTES: usize = 300;

/// A [`ClusterAccess`] that reports every write a guest makes before passing it on.
struct Audited {
    guest: String,
    inner: Arc<MemoryCluster>,
    log: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Audited {
    fn note(&self, mut what: String) {
        if what.len() > MAX_NOTE_BYTES {
            let mut cut = MAX_NOTE_BYTES;
            while !what.is_char_boundary(cut) {
                cut -= 1;
            }
            what.truncate(cut);
            what.push_str(" …");
        }
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("  {:<18} {what}", self.guest));
    }
}

fn describe(object: &Value) -> String {
    let meta = |f: &str| {
        object
            .pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
    };
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("?");
    match meta("namespace") {
        Some(ns) => format!("{kind} {ns}/{}", meta("name").unwrap_or("?")),
        None => format!("{kind} {}", meta("name").unwrap_or("?")),
    }
}

/// The watched parts of an object that differ between two versions, with their new values.
fn changed_fields(before: &Value, after: &Value) -> String {
    [
        "/metadata/labels",
        "/metadata/annotations",
        "/spec",
        "/data",
        "/status",
    ]
    .iter()
    .filter(|p| before.pointer(p) != after.pointer(p))
    .map(|p| {
        format!(
            "{} = {}",
            &p[1..].replace('/', "."),
            after.pointer(p).unwrap_or(&Value::Null)
        )
    })
    .collect::<Vec<_>>()
    .join(", ")
}

fn outcome<T>(result: &Result<T, AccessError>) -> String {
    match result {
        Ok(_) => String::new(),
        Err(err) => format!(" -> {err}"),
    }
}

#[async_trait]
impl ClusterAccess for Audited {
    async fn get(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, AccessError> {
        self.inner.get(gvk, namespace, name).await
    }

    async fn list(&self, gvk: &Gvk, options: &ListOptions) -> Result<Vec<Value>, AccessError> {
        self.inner.list(gvk, options).await
    }

    async fn create(&self, object: Value) -> Result<Value, AccessError> {
        let what = describe(&object);
        let result = self.inner.create(object).await;
        self.note(format!("created {what}{}", outcome(&result)));
        result
    }

    async fn update(&self, object: Value, status: bool) -> Result<Value, AccessError> {
        let what = describe(&object);
        let before = match Gvk::of_object(&object) {
            Ok(gvk) => {
                let meta = |f: &str| {
                    object
                        .pointer(&format!("/metadata/{f}"))
                        .and_then(Value::as_str)
                };
                self.inner
                    .get(&gvk, meta("namespace"), meta("name").unwrap_or_default())
                    .await
                    .ok()
            }
            Err(_) => None,
        };
        let result = self.inner.update(object, status).await;
        let changes = match (&before, &result) {
            (Some(before), Ok(after)) => changed_fields(before, after),
            _ => String::new(),
        };
        let sub = if status { " status" } else { "" };
        self.note(format!(
            "updated {what}{sub}: {changes}{}",
            outcome(&result)
        ));
        result
    }

    async fn patch(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        body: Value,
        status: bool,
    ) -> Result<Value, AccessError> {
        let shown = format!(
            "patched {} {}/{name} with {body}",
            gvk.kind,
            namespace.unwrap_or("-")
        );
        let result = self
            .inner
            .patch(gvk, namespace, name, patch_type, body, status)
            .await;
        self.note(format!("{shown}{}", outcome(&result)));
        result
    }

    async fn delete(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        preconditions: Option<&Preconditions>,
    ) -> Result<(), AccessError> {
        let result = self.inner.delete(gvk, namespace, name, preconditions).await;
        self.note(format!(
            "deleted {} {}/{name}{}",
            gvk.kind,
            namespace.unwrap_or("-"),
            outcome(&result)
        ));
        result
    }

    async fn record_event(&self, event: EventRecord) -> Result<(), AccessError> {
        self.note(format!(
            "event {} {} on {} {}: {}",
            event.event_type.as_str(),
            event.reason,
            event.regarding.gvk.kind,
            event.regarding.name,
            event.message
        ));
        self.inner.record_event(event).await
    }
}

/// The sample objects the demo starts from.
pub fn sample_objects() -> Vec<Value> {
    let labels = json!({"app": "web"});
    let mut objects = vec![
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web", "namespace": "default", "labels": labels},
            "spec": {"replicas": 3, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}),
        json!({"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
            "metadata": {"name": "example-foo", "namespace": "default"},
            "spec": {"deploymentName": "example-foo", "replicas": 1}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "app-config", "namespace": "default"}, "data": {"color": "blue"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cluster-info", "namespace": "kube-public"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "old-cache", "namespace": "default",
                         "annotations": {"krec.dev/expires-at": "2020-01-01T00:00:00Z"}}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "session-cache", "namespace": "default",
                         "annotations": {"krec.dev/expires-at": "2999-01-01T00:00:00Z"}}}),
    ];
    for i in 0..3 {
        objects.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{i}"), "namespace": "default", "labels": labels},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]}}));
    }
    objects
}

/// Give the pods a controller owner reference to the ReplicaSet, as its controller would.
async fn adopt_pods(cluster: &MemoryCluster) -> Result<(), AccessError> {
    let rs = cluster
        .get(
            &Gvk::new("apps", "v1", "ReplicaSet"),
            Some("default"),
            "web",
        )
        .await?;
    let pod = Gvk::new("", "v1", "Pod");
    for mut p in cluster.list(&pod, &ListOptions::default()).await? {
        p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": "web", "uid": rs["metadata"]["uid"], "controller": true}]);
        cluster.update(p, false).await?;
    }
    Ok(())
}

/// The requests a guest's manifest implies against the current objects.
async fn requests_for(
    manifest: &Manifest,
    cluster: &MemoryCluster,
) -> Vec<(Option<String>, String)> {
    let mut requests = Vec::new();
    if let Some(kind) = &manifest.spec.for_kind
        && let Ok(objects) = cluster.list(&kind.gvk(), &ListOptions::default()).await
    {
        for o in objects {
            let meta = |f: &str| {
                o.pointer(&format!("/metadata/{f}"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            requests.push((meta("namespace"), meta("name").unwrap_or_default()));
        }
    }
    for w in &manifest.spec.watches {
        if let Some(r) = &w.map_to {
            requests.push((r.namespace.clone(), r.name.clone()));
        }
    }
    for t in &manifest.spec.tickers {
        requests.push((t.request.namespace.clone(), t.request.name.clone()));
    }
    requests.sort();
    requests.dedup();
    requests
}

/// Run the demo: load the guests in `manifests`, run them against the sample objects twice, and
/// write what each did to `out`.
pub async fn run(manifests: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let manifests_dir = manifests;
    let scanned = Manifest::scan_dir(manifests)?;
    anyhow::ensure!(
        !scanned.is_empty(),
        "{}: no Reconciler manifests found",
        manifests.display()
    );
    let mut manifests = Vec::new();
    for result in scanned {
        match result {
            Ok(manifest) => manifests.push(manifest),
            // One bad manifest must not stop the other guests.
            Err(err) => writeln!(out, "skipping a manifest: {err}")?,
        }
    }
    let engine = crate::engine::new_engine()?;
    let linker = crate::guest::new_linker(&engine)?;
    let cluster = Arc::new(MemoryCluster::new());
    // The guests' CRDs (e.g. sample-guests/foo-controller/crd/) come first.
    let crds = crate::local_cluster::read_objects(manifests_dir).map_err(anyhow::Error::msg)?;
    for crd in crds
        .into_iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
    {
        cluster
            .create(crd)
            .await
            .context("creating the guests' CRDs")?;
    }
    for object in sample_objects() {
        let what = describe(&object);
        if let Err(err) = cluster.create(object).await {
            // e.g. a Foo when no manifest directory brings the Foo CRD.
            writeln!(out, "not creating sample {what}: {err}")?;
        }
    }
    adopt_pods(&cluster).await?;
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));

    let mut workers = Vec::new();
    for manifest in manifests {
        let name = manifest.name.clone();
        let module = match GuestModule::load(&engine, &linker, Arc::new(manifest)) {
            Ok(module) => Arc::new(module),
            Err(err) => {
                // One bad guest must not stop the others.
                writeln!(out, "skipping guest {name}: {err}")?;
                continue;
            }
        };
        writeln!(out, "loaded guest {name} ({})", module.digest())?;
        let audited = Arc::new(Audited {
            guest: name,
            inner: cluster.clone(),
            log: log.clone(),
        });
        workers.push(GuestWorker::new(module, audited));
    }

    for round in 1..=2 {
        if round == 2 {
            writeln!(
                out,
                "\n== the scene changes: pod web-2 deleted, Deployment example-foo reports 1 available, ConfigMap extra added =="
            )?;
            let pod = Gvk::new("", "v1", "Pod");
            cluster.delete(&pod, Some("default"), "web-2", None).await?;
            let deployment = Gvk::new("apps", "v1", "Deployment");
            if cluster
                .get(&deployment, Some("default"), "example-foo")
                .await
                .is_ok()
            {
                let status = json!({"status": {"availableReplicas": 1, "replicas": 1}});
                cluster
                    .patch(
                        &deployment,
                        Some("default"),
                        "example-foo",
                        PatchType::Merge,
                        status,
                        true,
                    )
                    .await?;
            }
            cluster
                .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "extra", "namespace": "kube-public"}}))
                .await?;
        }
        writeln!(out, "\n== round {round} ==")?;
        for worker in &mut workers {
            let manifest = worker.module().manifest().clone();
            for (namespace, name) in requests_for(&manifest, &cluster).await {
                let key = namespace
                    .as_ref()
                    .map_or(name.clone(), |ns| format!("{ns}/{name}"));
                let result = worker.reconcile(namespace.as_deref(), &name).await;
                for line in log.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
                    writeln!(out, "{line}")?;
                }
                let shown = match result {
                    Ok(action) => format!("{action:?}"),
                    Err(err) => format!("error: {err}"),
                };
                writeln!(out, "  {:<18} reconciled {key}: {shown}", manifest.name)?;
            }
        }
    }
    writeln!(out, "\n== final state ==")?;
    for (gvk, show) in [
        (Gvk::new("apps", "v1", "ReplicaSet"), "/metadata/labels"),
        (Gvk::new("apps", "v1", "Deployment"), "/spec/replicas"),
        (
            Gvk::new("samplecontroller.k8s.io", "v1alpha1", "Foo"),
            "/status",
        ),
        (Gvk::new("", "v1", "ConfigMap"), "/data"),
    ] {
        for o in cluster.objects(&gvk) {
            writeln!(
                out,
                "  {:<40} {show}: {}",
                describe(&o),
                o.pointer(show).cloned().unwrap_or(Value::Null)
            )?;
        }
    }
    Ok(())
}
