//! `krec fake-cluster`: the embedded API server's object store, answering a client's calls as
//! JSON lines on stdin and stdout — the one implementation behind the Python and TypeScript
//! SDKs' `FakeCluster`, so that a unit test's verdicts (names, labels, schemas, conflicts) are
//! the cluster's own, word for word.
//!
//! One request per line, one answer per line, in order:
//!
//! ```text
//! {"op":"create","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{…}}}
//! {"ok":{"apiVersion":"v1","kind":"ConfigMap","metadata":{…,"resourceVersion":"2"}}}
//! {"op":"get","apiVersion":"v1","kind":"ConfigMap","namespace":"default","name":"gone"}
//! {"error":{"case":"not_found","message":"configmaps \"gone\" not found"}}
//! ```
//!
//! `op` is `add` (fixtures: `object`, or `text` holding YAML or JSON documents; each namespace
//! created when missing and each `status` stored too; answers the objects stored), `get`, `list` (`labelSelector`, `fieldSelector`), `create`, `update` (`status`),
//! `patch` (`patchType`: `merge`, `json`, `strategic` or `apply`; `body` as text; `status`) or
//! `delete` (`uid`, `resourceVersion` preconditions); `namespace` is left out for
//! cluster-scoped kinds; `object` is the object, or its JSON text as a guest's call carries it. An error's `case` is the WIT error's (`not_found`, `already_exists`,
//! `conflict`, `forbidden`, `invalid`, …). The store ends with stdin.

use std::io::{BufRead, Write};
use std::sync::Arc;

use anyhow::Context as _;
use serde::Deserialize;
use serde_json::{Value, json};

use krec_apiserver::local::LocalClient;
use krec_apiserver::{ResourceType, ResourceTypes, Store, ensure_namespaces};
use krec_core::CallError;
use krec_core::PatchType;

/// The field manager the fake cluster's writes are recorded under (the Rust SDK's fake's).
const FIELD_MANAGER: &str = "krec-test";

/// The arguments of `krec fake-cluster` (none yet: stdin and stdout are the protocol).
#[derive(clap::Args)]
pub(super) struct Args {}

/// One call, as a line of JSON.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Call {
    op: Op,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    namespace: Option<String>,
    #[serde(default)]
    name: String,
    object: Option<Value>,
    #[serde(default)]
    status: bool,
    label_selector: Option<String>,
    field_selector: Option<String>,
    patch_type: Option<Patch>,
    body: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    text: Option<String>,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Op {
    Add,
    Get,
    List,
    Create,
    Update,
    Patch,
    Delete,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Patch {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl From<Patch> for PatchType {
    fn from(patch: Patch) -> Self {
        match patch {
            Patch::Merge => PatchType::Merge,
            Patch::Json => PatchType::Json,
            Patch::Strategic => PatchType::Strategic,
            Patch::Apply => PatchType::Apply,
        }
    }
}

/// Answer calls from stdin until it ends.
pub(super) fn execute(Args {}: Args) -> anyhow::Result<()> {
    let cluster = Fake::new();
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let line = line.context("reading a call from stdin")?;
        if line.trim().is_empty() {
            continue;
        }
        let answer = match cluster.answer(&line) {
            Ok(value) => json!({ "ok": value }),
            Err(err) => json!({ "error": { "case": err.label(), "message": message(&err) } }),
        };
        serde_json::to_writer(&mut out, &answer).context("writing an answer to stdout")?;
        out.write_all(b"\n")
            .and_then(|()| out.flush())
            .context("writing an answer to stdout")?;
    }
    Ok(())
}

/// The message without the case's prefix (`not found: …`), as the WIT error carries it.
fn message(err: &CallError) -> String {
    let mut err = err.clone();
    std::mem::take(err.message_mut())
}

/// The store with the namespaces every cluster has.
struct Fake {
    client: LocalClient,
}

impl Fake {
    fn new() -> Self {
        let store = Arc::new(Store::new(Arc::new(ResourceTypes::new())));
        // The initial namespaces of an empty store cannot fail to be created.
        let _ = ensure_namespaces(&store);
        Fake {
            client: LocalClient::new(store, FIELD_MANAGER),
        }
    }

    fn resolve(&self, call: &Call) -> Result<ResourceType, CallError> {
        let (group, version) = call
            .api_version
            .split_once('/')
            .unwrap_or(("", &call.api_version));
        Ok(self.client.resolve(group, version, &call.kind)?)
    }

    fn answer(&self, line: &str) -> Result<Value, CallError> {
        let call: Call = serde_json::from_str(line)
            .map_err(|e| CallError::Invalid(format!("krec fake-cluster: a call: {e}")))?;
        let namespace = call.namespace.as_deref().filter(|ns| !ns.is_empty());
        // The object as a value, or as the JSON text a guest's call carries.
        let object = || match &call.object {
            Some(Value::String(text)) => Ok(serde_json::from_str::<Value>(text)?),
            Some(value) => Ok(value.clone()),
            None => Err(CallError::Invalid(
                "krec fake-cluster: the call has no object".into(),
            )),
        };
        Ok(match call.op {
            Op::Add => {
                let objects = match &call.text {
                    Some(text) => documents(text)?,
                    None => vec![object()?],
                };
                let mut added = Vec::with_capacity(objects.len());
                for object in objects {
                    added.push(self.add(object)?);
                }
                Value::Array(added)
            }
            Op::Get => {
                let rt = self.resolve(&call)?;
                Arc::unwrap_or_clone(self.client.get(&rt, namespace, &call.name)?)
            }
            Op::List => {
                let rt = self.resolve(&call)?;
                let items = self.client.list(
                    &rt,
                    namespace,
                    call.label_selector.as_deref(),
                    call.field_selector.as_deref(),
                )?;
                Value::Array(items.into_iter().map(Arc::unwrap_or_clone).collect())
            }
            Op::Create => Arc::unwrap_or_clone(self.client.create(object()?)?),
            Op::Update => Arc::unwrap_or_clone(self.client.update(object()?, call.status)?),
            Op::Patch => {
                let rt = self.resolve(&call)?;
                let patch_type = call.patch_type.ok_or_else(|| {
                    CallError::Invalid("krec fake-cluster: a patch needs its patchType".into())
                })?;
                let body: Value = serde_json::from_str(call.body.as_deref().unwrap_or(""))?;
                Arc::unwrap_or_clone(self.client.patch(
                    &rt,
                    namespace,
                    &call.name,
                    patch_type.into(),
                    &body,
                    call.status,
                )?)
            }
            Op::Delete => {
                let rt = self.resolve(&call)?;
                self.client.delete(
                    &rt,
                    namespace,
                    &call.name,
                    call.uid.clone(),
                    call.resource_version.clone(),
                )?;
                Value::Null
            }
        })
    }
}

impl Fake {
    /// Store a fixture: its namespace created when missing, its `status` kept (through the
    /// status subresource, which a create ignores).
    fn add(&self, mut object: Value) -> Result<Value, CallError> {
        let what = format!(
            "fixture {} {}",
            object
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("(no kind)"),
            [meta_str(&object, "namespace"), meta_str(&object, "name")]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("/")
        );
        let named = |mut err: CallError| {
            let message = err.message_mut();
            *message = format!("{what} refused: {message}");
            err
        };
        let rt = self.client.resolve_object(&object).map_err(|err| {
            let unserved = err.code == 404;
            let mut err = named(err.into());
            if unserved {
                err.message_mut()
                    .push_str(" (add its CustomResourceDefinition first)");
            }
            err
        })?;
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("resourceVersion");
        }
        if let Some(namespace) = meta_str(&object, "namespace").filter(|_| rt.namespaced) {
            let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": namespace}});
            match self.client.create(namespace) {
                Ok(_) | Err(krec_core::ApiError { code: 409, .. }) => {}
                Err(err) => return Err(named(err.into())),
            }
        }
        let status = object.get("status").cloned();
        let created = self.client.create(object).map_err(|e| named(e.into()))?;
        match status {
            Some(status) if created.get("status") != Some(&status) => {
                let mut with_status = Arc::unwrap_or_clone(created);
                with_status["status"] = status;
                let stored = self
                    .client
                    .update(with_status, true)
                    .map_err(|e| named(e.into()))?;
                Ok(Arc::unwrap_or_clone(stored))
            }
            _ => Ok(Arc::unwrap_or_clone(created)),
        }
    }
}

fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

/// The objects of YAML (or JSON) text with `---` between documents; empty documents skipped.
fn documents(text: &str) -> Result<Vec<Value>, CallError> {
    let mut objects = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value = Value::deserialize(document)
            .map_err(|e| CallError::Invalid(format!("krec fake-cluster: a document: {e}")))?;
        match value {
            Value::Null => {}
            Value::Array(items) => objects.extend(items),
            value => objects.push(value),
        }
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(fake: &Fake, call: Value) -> Result<Value, CallError> {
        fake.answer(&call.to_string())
    }

    #[test]
    fn calls_should_get_the_stores_answers_and_messages() {
        let fake = Fake::new();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "default", "labels": {"app": "web"}}});
        let created = answer(&fake, json!({"op": "create", "object": cm})).expect("created");
        assert!(
            created["metadata"]["resourceVersion"].is_string(),
            "{created}"
        );
        let taken = answer(&fake, json!({"op": "create", "object": cm}));
        assert_eq!(
            taken,
            Err(CallError::AlreadyExists(
                "configmaps \"a\" already exists".into()
            ))
        );
        let listed = answer(
            &fake,
            json!({"op": "list", "apiVersion": "v1", "kind": "ConfigMap",
                "namespace": "default", "labelSelector": "app=web"}),
        )
        .expect("listed");
        assert_eq!(listed.as_array().map(Vec::len), Some(1));
        let bad = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "b", "namespace": "default", "labels": {"a": "x,y"}}});
        let refused = answer(&fake, json!({"op": "create", "object": bad}));
        assert!(
            matches!(&refused, Err(CallError::Invalid(m)) if m.contains("metadata.labels")),
            "{refused:?}"
        );
        let patched = answer(
            &fake,
            json!({"op": "patch", "apiVersion": "v1", "kind": "ConfigMap", "namespace": "default",
                "name": "a", "patchType": "merge", "body": "{\"data\":{\"k\":\"v\"}}"}),
        )
        .expect("patched");
        assert_eq!(patched["data"]["k"], "v");
        let stale = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "default", "resourceVersion": created["metadata"]["resourceVersion"]}});
        assert!(matches!(
            answer(&fake, json!({"op": "update", "object": stale})),
            Err(CallError::Conflict(_))
        ));
        let gone = json!({"op": "delete", "apiVersion": "v1", "kind": "ConfigMap",
            "namespace": "default", "name": "a"});
        assert_eq!(answer(&fake, gone.clone()), Ok(Value::Null));
        assert!(matches!(answer(&fake, gone), Err(CallError::NotFound(_))));
        let fixtures = answer(
            &fake,
            json!({"op": "add", "text": "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: web, namespace: team-a}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx}]}\nstatus: {replicas: 3}\n---\n"}),
        )
        .expect("added");
        assert_eq!(fixtures[0]["status"]["replicas"], 3, "{fixtures}");
        let refused = answer(
            &fake,
            json!({"op": "add", "object": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "Bad", "namespace": "default"}}}),
        );
        assert!(
            matches!(&refused, Err(CallError::Invalid(m)) if m.starts_with("fixture ConfigMap default/Bad refused: ConfigMap \"Bad\" is invalid")),
            "{refused:?}"
        );
        assert!(matches!(
            fake.answer("{\"op\": \"fly\"}"),
            Err(CallError::Invalid(m)) if m.contains("krec fake-cluster")
        ));
    }
}
