//! Guests registered as Kubernetes objects: `Reconciler` (namespaced) and `ClusterReconciler`
//! (cluster-scoped) objects read from the shared cache and turned into the same [`Manifest`]s a
//! file gives, so that the [`Manager`](crate::guests::Manager) starts, swaps and removes them
//! with exactly the guarantees of a manifest file edit.
//!
//! # Names
//!
//! A `ClusterReconciler`'s guest is named like a file's, by `metadata.name`; a `Reconciler`'s is
//! `<namespace>.<name>`. Guest names from files and `ClusterReconciler`s are DNS labels (no dot),
//! so a namespaced guest can never take another tenant's or a file's name. A file and a
//! `ClusterReconciler` naming the same guest: the file wins ([`merge`]), and the object is
//! reported as a duplicate of it.
//!
//! # Modules
//!
//! An object's relative `spec.module` is resolved against the host's `--module-dir`; absolute
//! paths and `..` are refused, since objects are written by whoever may create them, not by
//! whoever controls the host's disk.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::cluster::cache::{Cache, CachedObject, Event, EventSink, InformerUse, SYNC_TIMEOUT};
use crate::manifest::{API_VERSION, CLUSTER_KIND, KIND, Manifest, ManifestError};
use krec_core::{CallError, Gvk};

/// The longest guest name an object may give: the guest's field manager, `krec-<guest>`, is
/// limited to 128 bytes by the API server.
pub const MAX_GUEST_NAME: usize = 123;

/// The user the host's own watches of the two kinds are listed under in the cache.
const USER: &str = "krec (Reconciler objects)";

/// Where a host reading guests from the cluster finds their modules.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FromCluster {
    /// The base of objects' relative `spec.module` paths (`--module-dir`).
    pub module_dir: PathBuf,
    /// What the guests of one namespace may use together (`--tenant-quota`).
    pub quota: crate::manifest::tenancy::TenantQuota,
}

/// The kind `Reconciler`.
pub fn reconciler_gvk() -> Gvk {
    Gvk::from_api_version(API_VERSION, KIND)
}

/// The kind `ClusterReconciler`.
pub fn cluster_reconciler_gvk() -> Gvk {
    Gvk::from_api_version(API_VERSION, CLUSTER_KIND)
}

/// A `Reconciler` (with a namespace) or a `ClusterReconciler` (without).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// The `Reconciler`'s namespace; `None` for a `ClusterReconciler`.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectRef {
    /// The object's kind.
    pub fn kind(&self) -> &'static str {
        if self.namespace.is_some() {
            KIND
        } else {
            CLUSTER_KIND
        }
    }

    /// The object's group, version and kind.
    pub fn gvk(&self) -> Gvk {
        Gvk::from_api_version(API_VERSION, self.kind())
    }

    /// The guest it defines: `<namespace>.<name>`, or `<name>` for a `ClusterReconciler`.
    pub fn guest(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}.{}", self.name),
            None => self.name.clone(),
        }
    }

    /// How errors and the manifest's `path` name it: `Reconciler team-a/foo`,
    /// `ClusterReconciler foo`. No manifest file can have this path (files end in `.yaml`).
    pub fn path(&self) -> PathBuf {
        match &self.namespace {
            Some(ns) => PathBuf::from(format!("{KIND} {ns}/{}", self.name)),
            None => PathBuf::from(format!("{CLUSTER_KIND} {}", self.name)),
        }
    }

    /// The object a manifest was read from, if it was read from one (the inverse of
    /// [`path`](Self::path)).
    pub fn of_path(path: &Path) -> Option<ObjectRef> {
        let path = path.to_str()?;
        if let Some(rest) = path.strip_prefix(&format!("{KIND} ")) {
            let (namespace, name) = rest.split_once('/')?;
            return Some(ObjectRef {
                namespace: Some(namespace.to_owned()),
                name: name.to_owned(),
            });
        }
        let name = path.strip_prefix(&format!("{CLUSTER_KIND} "))?;
        (!name.contains('/')).then(|| ObjectRef {
            namespace: None,
            name: name.to_owned(),
        })
    }

    /// The object `object` of the kind `gvk` names.
    fn of(gvk: &Gvk, object: &CachedObject) -> ObjectRef {
        ObjectRef {
            namespace: object
                .namespace()
                .filter(|_| gvk.kind == KIND)
                .map(str::to_owned),
            name: object.name().unwrap_or_default().to_owned(),
        }
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.path().display().fmt(f)
    }
}

/// The manifest of guest object `object` (as read: `apiVersion`, `kind`, `metadata`, `spec` and
/// perhaps `status`), its relative module resolved against `module_dir`. Errors name the object
/// and the field exactly as a file's name the file and the field.
pub fn manifest_of(
    reference: &ObjectRef,
    object: &Value,
    module_dir: &Path,
) -> Result<Manifest, ManifestError> {
    let path = reference.path();
    let invalid = |field: &str, problem: String| ManifestError::Invalid {
        path: path.clone(),
        field: field.to_owned(),
        problem,
    };
    let spec = object.get("spec").cloned().unwrap_or(Value::Null);
    // Modules are files of --module-dir (or registry references): the module and the
    // candidate alike.
    for (field, module) in [
        ("spec.module", spec.get("module")),
        ("spec.rollout.candidate", spec.pointer("/rollout/candidate")),
    ] {
        let Some(module) = module
            .and_then(Value::as_str)
            .filter(|m| !m.starts_with(crate::guests::oci::SCHEME))
        else {
            continue;
        };
        let module = Path::new(module);
        let escapes = module.is_absolute()
            || module
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
        if escapes {
            return Err(invalid(
                field,
                format!(
                    "{:?} must be a path inside the host's --module-dir ({}), without '..'",
                    module.display().to_string(),
                    module_dir.display()
                ),
            ));
        }
        // Nor through a symbolic link: what the path resolves to must be inside too.
        if let Ok(real) = std::fs::canonicalize(module_dir.join(module)) {
            let root = std::fs::canonicalize(module_dir).unwrap_or_else(|_| module_dir.to_owned());
            if !real.starts_with(&root) {
                return Err(invalid(
                    field,
                    format!(
                        "{:?} is a symbolic link to {}, outside the host's --module-dir ({})",
                        module.display().to_string(),
                        real.display(),
                        module_dir.display()
                    ),
                ));
            }
        }
    }
    // Only what a manifest file says: the server's metadata and the status are not the guest's.
    let text = json!({
        "apiVersion": API_VERSION,
        "kind": reference.kind(),
        "metadata": {"name": reference.name},
        "spec": spec,
    })
    .to_string();
    let mut manifest = Manifest::parse_in(&path, module_dir, &text).map_err(|err| match err {
        // Where in the text the host made up is no help to whoever wrote the object.
        ManifestError::Invalid {
            path,
            field,
            problem,
        } => ManifestError::Invalid {
            path,
            field,
            problem: without_location(&problem).to_owned(),
        },
        other => other,
    })?;
    manifest.name = reference.guest();
    if let Some(namespace) = &reference.namespace {
        crate::manifest::tenancy::confine(&mut manifest, namespace)?;
    }
    if manifest.name.len() > MAX_GUEST_NAME {
        return Err(invalid(
            "metadata.name",
            format!(
                "the guest name {:?} (namespace.name) is longer than {MAX_GUEST_NAME} bytes",
                manifest.name
            ),
        ));
    }
    Ok(manifest)
}

/// `problem` without the parser's trailing ` at line L column C`.
fn without_location(problem: &str) -> &str {
    match problem.rsplit_once(" at line ") {
        Some((head, tail))
            if tail
                .split_once(" column ")
                .is_some_and(|(l, c)| l.parse::<u64>().is_ok() && c.parse::<u64>().is_ok()) =>
        {
            head
        }
        _ => problem,
    }
}

/// The wanted set of guests from files and objects together: a `ClusterReconciler` whose guest
/// a file already defines is refused as a duplicate of that file (the file wins, so deleting it
/// hands the guest to the object by an ordinary swap).
pub fn merge(
    files: Vec<Result<Manifest, ManifestError>>,
    objects: Vec<Result<Manifest, ManifestError>>,
) -> Vec<Result<Manifest, ManifestError>> {
    let mut merged = files;
    for object in objects {
        let object = object.and_then(|manifest| {
            let first = merged.iter().flatten().find(|m| m.name == manifest.name);
            match first {
                Some(first) => Err(ManifestError::Duplicate {
                    path: manifest.path.clone(),
                    name: manifest.name.clone(),
                    first: first.path.clone(),
                }),
                None => Ok(manifest),
            }
        });
        merged.push(object);
    }
    merged
}

/// What the objects were at a scan: each one's uid and generation. Two are equal when no object
/// was created, deleted or had its spec changed (status and label edits do not count).
pub type Generations = BTreeMap<ObjectRef, (String, i64)>;

/// Wakes whoever waits on the source's changes.
struct Bump(tokio::sync::watch::Sender<u64>);

impl EventSink for Bump {
    fn on_event(&self, _: &Gvk, _: &Event<'_>) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// The `Reconciler` and `ClusterReconciler` objects of the cluster, as the shared cache holds
/// them. Dropping it stops its watches (unless a guest watches the kinds too).
pub struct ObjectSource {
    uses: Vec<InformerUse>,
    sink: Arc<dyn EventSink>,
    changes: tokio::sync::watch::Sender<u64>,
    module_dir: PathBuf,
    quota: crate::manifest::tenancy::TenantQuota,
}

impl std::fmt::Debug for ObjectSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectSource")
            .field("module_dir", &self.module_dir)
            .finish_non_exhaustive()
    }
}

impl ObjectSource {
    /// Watch both kinds in every namespace and wait until their caches have synced.
    ///
    /// # Errors
    ///
    /// When the API server does not serve the kinds (the CRDs are not installed), or the
    /// caches do not sync in time.
    pub async fn start(cache: &Arc<Cache>, from: &FromCluster) -> Result<Self, CallError> {
        let (changes, _) = tokio::sync::watch::channel(0);
        let sink: Arc<dyn EventSink> = Arc::new(Bump(changes.clone()));
        let mut uses = Vec::new();
        for gvk in [reconciler_gvk(), cluster_reconciler_gvk()] {
            let informer = cache
                .informer(&gvk, None, crate::cluster::cache::Content::Objects, USER)
                .await
                .map_err(|err| match err {
                    CallError::NotFound(message) => CallError::NotFound(format!(
                        "--from-cluster: {message}: install krec's CRDs first (`krec install`, or `kubectl apply -f deploy/crds.yaml`)"
                    )),
                    other => other,
                })?;
            informer.subscribe(sink.clone());
            uses.push(informer);
        }
        for informer in &uses {
            informer.wait_synced(SYNC_TIMEOUT).await?;
        }
        Ok(ObjectSource {
            uses,
            sink,
            changes,
            module_dir: from.module_dir.clone(),
            quota: from.quota,
        })
    }

    /// Every object, sorted by kind (`Reconciler`s first), namespace and name.
    pub fn objects(&self) -> Vec<(ObjectRef, Arc<CachedObject>)> {
        self.uses
            .iter()
            .flat_map(|u| {
                let gvk = u.informer().gvk().clone();
                u.informer()
                    .select(None, None, None)
                    .into_iter()
                    .map(move |o| (ObjectRef::of(&gvk, &o), o))
            })
            .collect()
    }

    /// The object `reference` names, as cached.
    pub fn object(&self, reference: &ObjectRef) -> Option<Arc<CachedObject>> {
        let kind = reference.kind();
        self.uses
            .iter()
            .find(|u| u.informer().gvk().kind == kind)
            .and_then(|u| {
                u.informer()
                    .cached(reference.namespace.as_deref(), &reference.name)
            })
    }

    /// Wait (at most `timeout`) until the cache reflects `resource_version` of the kind of
    /// `reference`, e.g. the host's own status write; whether it does.
    pub async fn wait_for_version(
        &self,
        reference: &ObjectRef,
        resource_version: u64,
        timeout: std::time::Duration,
    ) -> bool {
        let kind = reference.kind();
        match self.uses.iter().find(|u| u.informer().gvk().kind == kind) {
            Some(u) => {
                u.informer()
                    .wait_for_version(resource_version, timeout)
                    .await
            }
            None => false,
        }
    }

    /// The manifest of every object, or why it is refused (tenants' over their quota too).
    pub fn scan(&self) -> Vec<Result<Manifest, ManifestError>> {
        let mut tenants = Vec::new();
        let mut cluster = Vec::new();
        for (reference, object) in self.objects() {
            let manifest = manifest_of(&reference, &object.to_value(), &self.module_dir);
            match reference.namespace {
                Some(namespace) => tenants.push(crate::manifest::tenancy::Weighed {
                    namespace,
                    created: object
                        .metadata()
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0.to_string())
                        .unwrap_or_default(),
                    manifest,
                }),
                None => cluster.push(manifest),
            }
        }
        let mut scanned = crate::manifest::tenancy::within_quota(&self.quota, tenants);
        scanned.extend(cluster);
        scanned
    }

    /// What the objects are now: uid and generation of each.
    pub fn generations(&self) -> Generations {
        self.objects()
            .into_iter()
            .map(|(reference, object)| {
                let meta = object.metadata();
                let uid = meta.uid.clone().unwrap_or_default();
                (reference, (uid, meta.generation.unwrap_or_default()))
            })
            .collect()
    }

    /// Counts changes to the objects (any event, status writes included: compare
    /// [`Generations`] to tell a change that matters).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

impl Drop for ObjectSource {
    fn drop(&mut self) {
        for informer in &self.uses {
            informer.unsubscribe(&self.sink);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(kind: &str, namespace: Option<&str>, spec: Value) -> Value {
        let mut metadata = json!({"name": "foo", "uid": "u-1", "generation": 3,
            "managedFields": [{"manager": "kubectl"}]});
        if let Some(ns) = namespace {
            metadata["namespace"] = json!(ns);
        }
        json!({"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec,
            "status": {"conditions": []}})
    }

    fn spec() -> Value {
        json!({"module": "foo.wasm", "for": {"apiVersion": "v1", "kind": "ConfigMap"}})
    }

    fn namespaced(ns: &str, name: &str) -> ObjectRef {
        ObjectRef {
            namespace: Some(ns.into()),
            name: name.into(),
        }
    }

    fn cluster(name: &str) -> ObjectRef {
        ObjectRef {
            namespace: None,
            name: name.into(),
        }
    }

    #[test]
    fn names_and_paths_should_tell_the_kinds_apart_and_read_back() {
        let a = namespaced("team-a", "foo");
        assert_eq!(a.guest(), "team-a.foo");
        assert_eq!(a.path(), Path::new("Reconciler team-a/foo"));
        assert_eq!(a.gvk(), reconciler_gvk());
        let c = cluster("foo");
        assert_eq!(c.guest(), "foo");
        assert_eq!(c.path(), Path::new("ClusterReconciler foo"));
        assert_eq!(c.gvk(), cluster_reconciler_gvk());
        for r in [a, c] {
            assert_eq!(ObjectRef::of_path(&r.path()), Some(r.clone()));
        }
        assert_eq!(ObjectRef::of_path(Path::new("sample/foo.yaml")), None);
    }

    #[test]
    fn an_object_should_be_read_as_its_manifest_with_the_module_under_module_dir() {
        let r = namespaced("team-a", "foo");
        let manifest = manifest_of(
            &r,
            &object("Reconciler", Some("team-a"), spec()),
            Path::new("/guests"),
        )
        .expect("valid");
        assert_eq!(manifest.name, "team-a.foo");
        assert_eq!(manifest.path, Path::new("Reconciler team-a/foo"));
        assert_eq!(manifest.spec.module, Path::new("/guests/foo.wasm"));
        assert_eq!(manifest.tenant.as_deref(), Some("team-a"), "confined");
        assert_eq!(manifest.spec.namespaces, ["team-a"]);
        // A ClusterReconciler's is the same spec as a file gives.
        let manifest = manifest_of(
            &cluster("foo"),
            &object("ClusterReconciler", None, spec()),
            Path::new("/guests"),
        )
        .expect("valid");
        let file = Manifest::parse_in(
            Path::new("x.yaml"),
            Path::new("/guests"),
            &format!("apiVersion: {API_VERSION}\nkind: Reconciler\nmetadata: {{name: foo}}\nspec: {spec}", spec = spec()),
        )
        .expect("file");
        assert_eq!(manifest.spec, file.spec);
    }

    #[test]
    #[cfg(unix)]
    fn a_symbolic_link_out_of_module_dir_should_be_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("secret.wasm"), b"x").expect("write");
        std::os::unix::fs::symlink(
            outside.path().join("secret.wasm"),
            dir.path().join("link-out.wasm"),
        )
        .expect("symlink");
        std::fs::write(dir.path().join("inside.wasm"), b"x").expect("write");
        std::os::unix::fs::symlink(
            dir.path().join("inside.wasm"),
            dir.path().join("link-in.wasm"),
        )
        .expect("symlink");
        let reference = ObjectRef {
            namespace: None,
            name: "g".into(),
        };
        let object = |module: &str| json!({"spec": {"module": module, "tickers": [{"every": "1h", "request": {"name": "x"}}]}});
        let err = manifest_of(&reference, &object("link-out.wasm"), dir.path())
            .expect_err("a link out is refused");
        assert!(
            err.to_string()
                .contains("spec.module: \"link-out.wasm\" is a symbolic link to"),
            "{err}"
        );
        manifest_of(&reference, &object("link-in.wasm"), dir.path()).expect("a link within");
    }

    #[test]
    fn a_module_outside_module_dir_should_be_refused_naming_the_field() {
        for module in ["/etc/passwd", "../x.wasm", "a/../../x.wasm"] {
            let mut spec = spec();
            spec["module"] = json!(module);
            let err = manifest_of(
                &cluster("foo"),
                &object("ClusterReconciler", None, spec),
                Path::new("/guests"),
            )
            .expect_err(module);
            let text = err.to_string();
            assert!(
                text.starts_with("ClusterReconciler foo: spec.module: ")
                    && text.contains("inside the host's --module-dir (/guests)"),
                "{text}"
            );
        }
    }

    #[test]
    fn an_invalid_object_should_read_as_an_invalid_file_does() {
        let mut bad = spec();
        bad["limits"] = json!({"timeout": "5 parsecs"});
        let err = manifest_of(
            &namespaced("default", "foo"),
            &object("Reconciler", Some("default"), bad.clone()),
            Path::new("."),
        )
        .expect_err("invalid");
        let file = Manifest::parse(
            Path::new("m.yaml"),
            &format!(
                "apiVersion: {API_VERSION}\nkind: Reconciler\nmetadata: {{name: foo}}\nspec: {bad}"
            ),
        )
        .expect_err("invalid file");
        let object_text = err.to_string();
        let file_text = file.to_string();
        assert_eq!(
            object_text.strip_prefix("Reconciler default/foo: "),
            file_text
                .strip_prefix("m.yaml: ")
                .map(|t| t.trim_end_matches(" at line 4 column 62")),
            "the same text, without a place in text the host made up"
        );
        assert!(object_text.contains("spec.limits.timeout"), "{object_text}");
        // A name that is no guest name.
        let mut dotted = object("ClusterReconciler", None, spec());
        dotted["metadata"]["name"] = json!("a.b");
        let err = manifest_of(&cluster("a.b"), &dotted, Path::new(".")).expect_err("dotted");
        assert!(
            err.to_string().starts_with(
                "ClusterReconciler a.b: metadata.name: \"a.b\" is not a valid guest name"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_file_should_win_over_a_cluster_reconciler_of_the_same_name() {
        let read = |r: &ObjectRef| {
            let ns = r.namespace.as_deref();
            let kind = r.kind();
            manifest_of(r, &object(kind, ns, spec()), Path::new("."))
        };
        let file = Manifest::parse(
            Path::new("foo.yaml"),
            &format!(
                "apiVersion: {API_VERSION}\nkind: Reconciler\nmetadata: {{name: foo}}\nspec: {}",
                spec()
            ),
        );
        let merged = merge(
            vec![file],
            vec![
                read(&namespaced("a", "foo")),
                read(&namespaced("b", "foo")),
                read(&cluster("foo")),
            ],
        );
        let names: Vec<String> = merged.iter().flatten().map(|m| m.name.clone()).collect();
        assert_eq!(names, ["foo", "a.foo", "b.foo"]);
        let refused: Vec<String> = merged
            .iter()
            .filter_map(|r| r.as_ref().err())
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            refused,
            ["ClusterReconciler foo: guest \"foo\" is already defined by foo.yaml"]
        );
    }

    proptest::proptest! {
        #[test]
        fn any_object_should_be_read_or_refused_never_panic(
            name in "[a-z.]{0,8}",
            module in "[a-z./]{0,12}",
            timeout in "[0-9a-z ]{0,6}",
        ) {
            let spec = json!({"module": module, "limits": {"timeout": timeout}});
            let _ = manifest_of(&cluster(&name), &object("ClusterReconciler", None, spec), Path::new("."));
        }
    }
}
