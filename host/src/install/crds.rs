//! The CustomResourceDefinitions a manifest is an object of: `reconcilers.krec.dev`
//! (namespaced, kind `Reconciler`) and `clusterreconcilers.krec.dev` (cluster-scoped, kind
//! `ClusterReconciler`), whose `spec` is [`ReconcilerSpec`] — its OpenAPI schema generated from
//! the Rust type (schemars, rewritten into a structural schema as kube's `CustomResource`
//! derive does), never written by hand. `deploy/crds.yaml` is their YAML; a test keeps it equal
//! to what this module generates.

use serde_json::{Value, json};

use crate::manifest::API_VERSION;
use crate::manifest::types::ReconcilerSpec;

/// The API group of the two kinds.
pub const GROUP: &str = "krec.dev";

/// The OpenAPI schema of `spec`, structural as a CRD needs it.
pub fn spec_schema() -> Value {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube_core::schema::StructuralSchemaRewriter)
        .with_transform(kube_core::schema::OptionalEnum)
        .with_transform(kube_core::schema::OptionalIntOrString)
        .into_generator();
    let mut schema = serde_json::to_value(generator.into_root_schema_for::<ReconcilerSpec>())
        .unwrap_or_else(|_| json!({"type": "object"}));
    if let Some(fields) = schema.as_object_mut() {
        fields.remove("title");
        fields.remove("$schema");
    }
    drop_null_defaults(&mut schema);
    kube_formats(&mut schema);
    schema
}

/// The integer formats schemars writes for Rust's types (`uint8`, `uint32`, …) as kube reads
/// them: kube-apiserver knows only `int32` and `int64` for integers and warns `unrecognized
/// format` on every install of a CRD with another, so the format goes and its range stays (as
/// `minimum`/`maximum`).
fn kube_formats(schema: &mut Value) {
    match schema {
        Value::Object(fields) => {
            let is_integer = fields.get("type").and_then(Value::as_str) == Some("integer");
            let format = fields
                .get("format")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if let (true, Some(format)) = (is_integer, format)
                && !matches!(format.as_str(), "int32" | "int64")
            {
                fields.remove("format");
                let range: Option<(i64, i64)> = match format.as_str() {
                    "uint8" => Some((0, i64::from(u8::MAX))),
                    "uint16" => Some((0, i64::from(u16::MAX))),
                    "uint32" => Some((0, i64::from(u32::MAX))),
                    "int8" => Some((i64::from(i8::MIN), i64::from(i8::MAX))),
                    "int16" => Some((i64::from(i16::MIN), i64::from(i16::MAX))),
                    "uint64" | "uint" => Some((0, i64::MAX)),
                    _ => None,
                };
                if let Some((min, max)) = range {
                    fields.entry("minimum").or_insert(Value::from(min));
                    fields.entry("maximum").or_insert(Value::from(max));
                }
            }
            fields.values_mut().for_each(kube_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(kube_formats),
        _ => {}
    }
}

/// An optional field's `default: null` (schemars writes the Rust default): an absent field
/// needs none, and kube refuses a null default on a field that is not nullable. Whole numbers
/// written as floats (`50.0`) become integers, as any Kubernetes client writes them back.
fn drop_null_defaults(schema: &mut Value) {
    match schema {
        Value::Object(fields) => {
            if fields.get("default") == Some(&Value::Null) {
                fields.remove("default");
            }
            fields.values_mut().for_each(drop_null_defaults);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null_defaults),
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| !n.is_i64() && !n.is_u64())
                && f.fract() == 0.0
                && f.abs() < 9.0e15
            {
                #[allow(clippy::cast_possible_truncation)]
                let whole = f as i64;
                *schema = Value::from(whole);
            }
        }
        _ => {}
    }
}

/// The schema of `status`, as [`crate::guests::status`] writes it.
fn status_schema() -> Value {
    let string = |description: &str| json!({"type": "string", "description": description});
    let integer = |description: &str| json!({"type": "integer", "format": "int64", "description": description});
    json!({
        "type": "object",
        "description": "What the host did with the guest, written by the replica that runs it.",
        "properties": {
            "observedGeneration": integer("The generation the host last acted on."),
            "replica": string("The replica whose workers run the guest."),
            "module": string("The module it runs, resolved."),
            "digest": string("The digest of the module it runs: its registry artifact's (what krec push prints and an oci://…@sha256: reference names) when pulled, else its file's."),
            "moduleDigest": string("The sha256 of the component file itself, when the module was pulled from a registry."),
            "version": integer("1 for the first version loaded, then counting swaps."),
            "reconciles": {
                "type": "object",
                "description": "Reconciles on the replica that runs it, since it started there.",
                "properties": {
                    "total": integer("All reconciles."),
                    "errors": integer("Reconciles that returned an error."),
                    "traps": integer("Reconciles that trapped."),
                    "quarantinedKeys": integer("Keys trapping in a row, retried slowly."),
                },
            },
            "usage": {
                "type": "object",
                "description": "What the guest has used on the replica that runs it, since its module was loaded there.",
                "properties": {
                    "cpuMilliseconds": {
                        "type": "object",
                        "description": "CPU time charged to the guest.",
                        "properties": {
                            "wasm": integer("In its own code."),
                            "host": integer("In host work done for it: permission checks, cache reads, copying objects, encoding writes, logging."),
                        },
                    },
                    "hostCalls": {
                        "type": "object",
                        "description": "Host calls by kind (get, list, create, update, update_status, patch, delete, event, log).",
                        "additionalProperties": {"type": "integer", "format": "int64"},
                    },
                    "bytesToGuest": integer("Objects' text copied into the guest."),
                    "bytesFromGuest": integer("Text taken from the guest: objects written, patches, Events, log lines."),
                    "memoryBytes": integer("Its instances' linear memory now."),
                    "instancesStarted": integer("Instances started (cold starts)."),
                },
            },
            "lastError": {
                "type": "object",
                "description": "The last refusal or reconcile error.",
                "properties": {
                    "message": string("What went wrong."),
                    "time": {"type": "string", "format": "date-time"},
                },
            },
            "rollout": {
                "type": "object",
                "description": "The candidate of spec.rollout: its phase (Shadowing, Canary, Promoted, RolledBack), counts against the live version and the last divergence kept.",
                "properties": {
                    "candidate": string("The candidate module."),
                    "digest": string("Its digest."),
                    "mode": string("shadow or canary."),
                    "phase": string("Shadowing, Canary, Promoted or RolledBack."),
                    "reason": string("Why it was promoted or rolled back."),
                    "counts": {
                        "type": "object",
                        "description": "Reconciles of the live version and of the candidate while it is tried.",
                        "x-kubernetes-preserve-unknown-fields": true,
                    },
                    "lastDivergence": {
                        "type": "object",
                        "description": "The last divergence kept: the request and where the candidate's reconcile differed.",
                        "properties": {
                            "key": string("The request, namespace/name."),
                            "diff": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                },
            },
            "conditions": {
                "type": "array",
                "description": "Ready, ModuleResolved, Degraded and, with spec.rollout, RolloutProgressing.",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
                "items": {
                    "type": "object",
                    "required": ["type", "status"],
                    "properties": {
                        "type": {"type": "string"},
                        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                        "reason": {"type": "string"},
                        "message": {"type": "string"},
                        "observedGeneration": {"type": "integer", "format": "int64"},
                        "lastTransitionTime": {"type": "string", "format": "date-time"},
                    },
                },
            },
        },
    })
}

/// The two CRDs, as `kubectl apply -f` takes them.
pub fn crds() -> Vec<Value> {
    let (_, version) = API_VERSION.split_once('/').unwrap_or((GROUP, API_VERSION));
    let schema = json!({
        "type": "object",
        "description": "A reconciler krec runs: the guest's module, what it watches and may do, and its limits.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
    });
    let columns = json!([
        {"name": "Ready", "type": "string",
            "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
        {"name": "Reason", "type": "string",
            "jsonPath": ".status.conditions[?(@.type==\"Ready\")].reason"},
        {"name": "Replica", "type": "string", "jsonPath": ".status.replica"},
        {"name": "Module", "type": "string", "jsonPath": ".spec.module"},
        {"name": "Version", "type": "integer", "jsonPath": ".status.version", "priority": 1},
        {"name": "Digest", "type": "string", "jsonPath": ".status.digest", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]);
    [
        ("reconcilers", "Reconciler", "Namespaced", vec!["rec"]),
        (
            "clusterreconcilers",
            "ClusterReconciler",
            "Cluster",
            vec!["crec"],
        ),
    ]
    .into_iter()
    .map(|(plural, kind, scope, short)| {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{GROUP}")},
            "spec": {
                "group": GROUP,
                "scope": scope,
                "names": {
                    "plural": plural,
                    "singular": kind.to_lowercase(),
                    "kind": kind,
                    "listKind": format!("{kind}List"),
                    "shortNames": short,
                    "categories": ["krec"],
                },
                "versions": [{
                    "name": version,
                    "served": true,
                    "storage": true,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                }],
            },
        })
    })
    .collect()
}

/// krec's own API, as a cluster gets it: the two CRDs, the admission policy that confines
/// `Reconciler`s to their namespace ([`super::tenancy::admission_policy`]) and the roles that
/// give namespace admins and editors `Reconciler`s ([`super::tenancy::aggregated_roles`]).
pub fn api_objects() -> Vec<Value> {
    let mut objects = crds();
    objects.extend(super::tenancy::admission_policy());
    objects.extend(super::tenancy::aggregated_roles());
    objects
}

/// krec's API ([`api_objects`]) as one YAML stream (what `deploy/crds.yaml` holds).
pub fn crds_yaml() -> String {
    let mut out = String::from(
        "# Generated from the manifest's Rust type (host/src/manifest/crd.rs); a test keeps this\n# file equal to it.\n",
    );
    for crd in api_objects() {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&crd).unwrap_or_default());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deployed_crds_should_be_the_generated_ones() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds.yaml");
        if std::env::var_os("KREC_WRITE_CRDS").is_some() {
            std::fs::write(&path, crds_yaml()).expect("write deploy/crds.yaml");
        }
        let deployed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            deployed == crds_yaml(),
            "{} drifted from the manifest's type: regenerate it with `KREC_WRITE_CRDS=1 cargo test -p krec --lib crd`",
            path.display()
        );
    }

    /// Whether `stored` holds everything `given` says (defaults may add to it).
    #[cfg(feature = "embedded-apiserver")]
    fn holds(stored: &Value, given: &Value) -> bool {
        match (stored, given) {
            (Value::Object(stored), Value::Object(given)) => given
                .iter()
                .all(|(k, v)| stored.get(k).is_some_and(|s| holds(s, v))),
            (Value::Array(stored), Value::Array(given)) => {
                stored.len() == given.len() && stored.iter().zip(given).all(|(s, g)| holds(s, g))
            }
            (stored, given) => stored == given,
        }
    }

    /// kube-apiserver takes them without a warning: every schema format is one it knows.
    #[cfg(feature = "embedded-apiserver")]
    #[test]
    fn the_crds_should_use_only_formats_kube_knows() {
        for crd in crds() {
            let unknown = krec_apiserver::unrecognized_crd_formats(&crd);
            assert!(
                unknown.is_empty(),
                "{}: {unknown:?}",
                crd["metadata"]["name"]
            );
        }
        let spec = spec_schema();
        let workers = &spec["properties"]["maxConcurrentReconciles"];
        assert!(workers.get("format").is_none(), "{workers}");
    }

    /// The embedded API server (validating CRDs as kube-apiserver does) takes them.
    #[cfg(feature = "embedded-apiserver")]
    #[test]
    fn the_embedded_api_server_should_take_the_crds() {
        use krec_apiserver::{ResourceTypes, Store};
        let store = Store::new(std::sync::Arc::new(ResourceTypes::new()));
        let rt = store
            .registry()
            .by_kind("apiextensions.k8s.io", "v1", "CustomResourceDefinition")
            .expect("served");
        for crd in crds() {
            if let Err(err) = store.create(&rt, None, crd, false) {
                panic!("{}", err.message);
            }
        }
        assert!(
            store
                .registry()
                .by_kind(GROUP, "v1alpha1", "ClusterReconciler")
                .is_some()
        );
        // Every sample manifest is a valid object of both kinds.
        krec_apiserver::ensure_namespaces(&store).expect("namespaces");
        let samples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-guests");
        let mut seen = 0;
        for entry in std::fs::read_dir(&samples).expect("samples").flatten() {
            let path = entry.path().join("manifest.yaml");
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let object: Value = serde_yaml_ng::from_str(&text).expect("yaml");
            for (kind, namespace) in [("Reconciler", Some("default")), ("ClusterReconciler", None)]
            {
                let mut object = object.clone();
                object["kind"] = json!(kind);
                let rt = store
                    .registry()
                    .by_kind(GROUP, "v1alpha1", kind)
                    .expect("served");
                let spec = object["spec"].clone();
                match store.create(&rt, namespace, object, false) {
                    Err(err) => panic!("{} as a {kind}: {}", path.display(), err.message),
                    // Nothing the manifest says is pruned (the schema knows every field).
                    Ok(stored) => assert!(
                        holds(&stored["spec"], &spec),
                        "{} lost fields as a {kind}: {}",
                        path.display(),
                        stored["spec"]
                    ),
                }
            }
            seen += 1;
        }
        assert!(seen >= 9, "{seen} sample manifests");
    }

    #[test]
    fn the_spec_schema_should_be_structural_and_typed_as_the_manifest() {
        let schema = spec_schema();
        assert_eq!(schema["type"], "object");
        let properties = &schema["properties"];
        assert_eq!(properties["module"]["type"], "string");
        assert_eq!(properties["maxConcurrentReconciles"]["type"], "integer");
        assert_eq!(
            properties["limits"]["properties"]["memory"]["x-kubernetes-int-or-string"],
            true
        );
        assert_eq!(
            properties["limits"]["properties"]["timeout"]["type"],
            "string"
        );
        assert_eq!(
            properties["permissions"]["items"]["properties"]["verbs"]["items"]["type"],
            "string"
        );
        assert_eq!(
            properties["config"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert!(
            properties.get("for").is_some(),
            "serde's names: `for`, not `for_kind`"
        );
    }
}
