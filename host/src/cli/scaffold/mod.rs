//! `krec new`: a guest project, ready to build, test and run, anywhere on disk — a Rust crate,
//! a Python or TypeScript project (`scripted.rs`), or a Go module (`golang.rs`).
//!
//! The crate has the SDK as a dependency (by path to this krec's sources when they are on this
//! machine, pinned to this release), a `.cargo/config.toml` with `cargo build-guest` (the
//! `wasm32-wasip2` release build) and `KREC` (this binary, for the integration test), a
//! reconciler with a configuration, its manifest (whose `module:` is where `cargo build-guest`
//! puts the `.wasm`), an example object, a unit test on the fake cluster and an integration test
//! in the real host.

use std::path::{Path, PathBuf};

mod golang;
mod scripted;
mod validator;

/// The language of a new guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Lang {
    /// A Rust crate over `krec-guest`, built with cargo.
    #[default]
    Rust,
    /// A Python project over `krec_guest`, built with componentize-py.
    Python,
    /// A TypeScript project over `@krec/guest`, built with componentize-js.
    TypeScript,
    /// A Go module over `krec.dev/guest`, built with `krec build`.
    Go,
}

/// What to scaffold.
#[derive(Clone, Debug)]
pub struct NewGuest {
    /// The guest's name (a DNS label): the crate, the manifest's `metadata.name`.
    pub name: String,
    /// The reconciled kind, `group/version/Kind` or `version/Kind` (`v1/ConfigMap`).
    pub kind: String,
    /// Whether the guest serves a validating and a mutating webhook too (with their tests).
    pub webhook: bool,
    /// Whether the guest is only a validating webhook: no reconciler, no configuration.
    pub webhook_only: bool,
    /// The guest's language.
    pub lang: Lang,
    /// Where the SDK comes from: a path to `guest-sdk` (`guest-sdk-python`, `guest-sdk-js`), or
    /// `None` for the language's package registry.
    pub sdk_path: Option<PathBuf>,
    /// The `krec` binary the integration test runs.
    pub krec: PathBuf,
}

/// A kind the template knows the `k8s-openapi` type of.
struct Known {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    rust: &'static str,
    plural: &'static str,
    namespaced: bool,
}

const KNOWN: &[Known] = &[
    known(
        "apps",
        "v1",
        "Deployment",
        "apps::v1::Deployment",
        "deployments",
    ),
    known(
        "apps",
        "v1",
        "StatefulSet",
        "apps::v1::StatefulSet",
        "statefulsets",
    ),
    known(
        "apps",
        "v1",
        "DaemonSet",
        "apps::v1::DaemonSet",
        "daemonsets",
    ),
    known(
        "apps",
        "v1",
        "ReplicaSet",
        "apps::v1::ReplicaSet",
        "replicasets",
    ),
    known("batch", "v1", "Job", "batch::v1::Job", "jobs"),
    known("batch", "v1", "CronJob", "batch::v1::CronJob", "cronjobs"),
    known("", "v1", "ConfigMap", "core::v1::ConfigMap", "configmaps"),
    known("", "v1", "Secret", "core::v1::Secret", "secrets"),
    known("", "v1", "Service", "core::v1::Service", "services"),
    known("", "v1", "Pod", "core::v1::Pod", "pods"),
    known(
        "",
        "v1",
        "ServiceAccount",
        "core::v1::ServiceAccount",
        "serviceaccounts",
    ),
    Known {
        group: "",
        version: "v1",
        kind: "Namespace",
        rust: "core::v1::Namespace",
        plural: "namespaces",
        namespaced: false,
    },
];

const fn known(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    rust: &'static str,
    plural: &'static str,
) -> Known {
    Known {
        group,
        version,
        kind,
        rust,
        plural,
        namespaced: true,
    }
}

/// Why a guest could not be scaffolded.
#[derive(Debug, thiserror::Error)]
pub enum NewError {
    /// The name is not a DNS label.
    #[error(
        "{0:?} is not a valid guest name: at most 63 lowercase letters, digits or '-', starting with a letter and ending alphanumeric"
    )]
    Name(String),
    /// The name is a Rust keyword or a crate every guest uses, which Cargo refuses as a
    /// package name.
    #[error(
        "{0:?} cannot name a crate (a Rust keyword or a crate the guest depends on); choose another name"
    )]
    Reserved(String),
    /// The kind is not `group/version/Kind` of a kind the template knows.
    #[error("--kind {kind:?}: {problem}")]
    Kind {
        /// As given.
        kind: String,
        /// What is wrong.
        problem: String,
    },
    /// The folder exists.
    #[error("{0}: already exists; krec new writes a new folder")]
    Exists(PathBuf),
    /// A Go guest needs the Go SDK's folder: its module is not published.
    #[error(
        "a Go guest needs the Go SDK's folder (guest-sdk-go in krec's sources): this krec was built without them; pass --sdk PATH/guest-sdk-go"
    )]
    NoGoSdk,
    /// Writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// Names Cargo refuses for a package, or that would hide a crate the guest uses.
const RESERVED: &[&str] = &[
    "abstract",
    "alloc",
    "as",
    "async",
    "await",
    "become",
    "box",
    "break",
    "const",
    "continue",
    "core",
    "crate",
    "do",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "final",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "krec_guest",
    "let",
    "loop",
    "macro",
    "match",
    "mod",
    "move",
    "mut",
    "override",
    "priv",
    "proc_macro",
    "pub",
    "ref",
    "return",
    "self",
    "serde",
    "static",
    "std",
    "struct",
    "super",
    "test",
    "trait",
    "true",
    "try",
    "type",
    "typeof",
    "unsafe",
    "unsized",
    "use",
    "virtual",
    "where",
    "while",
    "yield",
];

fn find_kind(text: &str) -> Result<&'static Known, NewError> {
    let problem = |p: String| NewError::Kind {
        kind: text.to_owned(),
        problem: p,
    };
    let parts: Vec<&str> = text.split('/').collect();
    let (group, version, kind) = match parts.as_slice() {
        [version, kind] => ("", *version, *kind),
        [group, version, kind] => (*group, *version, *kind),
        _ => {
            return Err(problem(
                "expected group/version/Kind (apps/v1/Deployment) or version/Kind (v1/ConfigMap)"
                    .into(),
            ));
        }
    };
    KNOWN
        .iter()
        .find(|k| k.group == group && k.version == version && k.kind == kind)
        .ok_or_else(|| {
            let known: Vec<String> = KNOWN
                .iter()
                .map(|k| {
                    if k.group.is_empty() {
                        format!("{}/{}", k.version, k.kind)
                    } else {
                        format!("{}/{}/{}", k.group, k.version, k.kind)
                    }
                })
                .collect();
            let known = known.join(", ");
            problem(format!(
                "the template knows {known}; start from one of them and change the type (any kind works in a guest, with DynamicObject for custom resources)"
            ))
        })
}

/// Write the guest crate into `dir` (which must not exist); returns the files written.
///
/// # Errors
///
/// A bad name or kind, an existing folder, or a failed write, each naming what.
pub fn scaffold(dir: &Path, new: &NewGuest) -> Result<Vec<PathBuf>, NewError> {
    if !krec_core::selector::is_dns_label(&new.name)
        || !new.name.starts_with(|c: char| c.is_ascii_lowercase())
    {
        return Err(NewError::Name(new.name.clone()));
    }
    if new.lang == Lang::Rust && RESERVED.contains(&new.name.replace('-', "_").as_str()) {
        return Err(NewError::Reserved(new.name.clone()));
    }
    let kind = find_kind(&new.kind)?;
    if dir.exists() {
        return Err(NewError::Exists(dir.to_owned()));
    }
    let mut files = match new.lang {
        Lang::Rust => rust_files(new, kind),
        Lang::Python => scripted::python_files(new, kind),
        Lang::TypeScript => scripted::typescript_files(new, kind),
        Lang::Go => golang::go_files(new, kind)?,
    };
    if new.webhook_only {
        validator::replace_files(new, kind, &mut files);
    }
    let mut written = Vec::new();
    for (relative, text) in files {
        let path = dir.join(relative);
        let io = |source| NewError::Io {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&path, text).map_err(io)?;
        written.push(path);
    }
    // Formatted as `cargo fmt` would, when rustfmt is installed (it is with rustup's default
    // profile); the code is valid either way.
    let rust: Vec<&PathBuf> = written
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    let _ = std::process::Command::new("rustfmt")
        .args(["--edition", "2024"])
        .args(&rust)
        .stderr(std::process::Stdio::null())
        .status();
    // And as gofmt would, when Go is installed (it is for a Go guest to build).
    let go: Vec<&PathBuf> = written
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "go"))
        .collect();
    if !go.is_empty() {
        let _ = std::process::Command::new("gofmt")
            .arg("-w")
            .args(&go)
            .stderr(std::process::Stdio::null())
            .status();
    }
    Ok(written)
}

/// A TOML string (basic, escaped).
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `apps/v1` for `apps`, `v1`; `v1` for the core group.
fn api_version(kind: &Known) -> String {
    if kind.group.is_empty() {
        kind.version.to_owned()
    } else {
        format!("{}/{}", kind.group, kind.version)
    }
}

/// The guest's manifest: it reconciles `kind` with its settings (`spec.config.annotation`),
/// from `module` (which `built_by` builds), within `memory`; with a validating and a mutating
/// webhook when asked.
fn manifest(new: &NewGuest, kind: &Known, module: &str, built_by: &str, memory: &str) -> String {
    let name = &new.name;
    let api_version = api_version(kind);
    let ty = kind.kind;
    let webhook_manifest = if new.webhook {
        format!(
            r#"  webhooks:
    - type: validating
      rules:
        - {{ apiGroups: ["{group}"], apiVersions: [{version}], resources: [{plural}], operations: [CREATE, UPDATE] }}
      failurePolicy: Fail
    - type: mutating
      rules:
        - {{ apiGroups: ["{group}"], apiVersions: [{version}], resources: [{plural}], operations: [CREATE] }}
      failurePolicy: Fail
"#,
            group = kind.group,
            version = kind.version,
            plural = kind.plural
        )
    } else {
        String::new()
    };
    format!(
        r#"# {name}: what the guest reconciles, what it may touch, and its settings.
apiVersion: krec.dev/v1alpha1
kind: Reconciler
metadata:
  name: {name}
spec:
  # {built_by} builds it here.
  module: {module}
  for: {{ apiVersion: {api_version}, kind: {ty} }}
  config:
    annotation: example.com/generation
  configSchema:
    type: object
    properties:
      annotation: {{ type: string, pattern: '^[a-z0-9.-]+/[A-Za-z0-9._-]+$' }}
    required: [annotation]
  limits: {{ timeout: 5s, memory: {memory} }}
  permissions:
    - {{ apiVersion: {api_version}, kind: {ty}, verbs: [get, list, watch, patch] }}
{webhook_manifest}"#
    )
}

/// The Go package alias and import path of `kind`'s type in k8s.io/api.
fn go_package(kind: &Known) -> (String, String) {
    let group = if kind.group.is_empty() {
        "core"
    } else {
        kind.group
    };
    (
        format!("{group}{}", kind.version),
        format!("k8s.io/api/{group}/{}", kind.version),
    )
}

/// The example object of `kind` — the one `examples/example.yaml` holds, valid as the cluster
/// judges it — as a literal: JSON for TypeScript, a dict for Python.
fn example_literal(kind: &Known, python: bool) -> String {
    // The example is our own YAML: it parses.
    let value: serde_json::Value = serde_yaml_ng::from_str(&example(kind)).unwrap_or_default();
    if python {
        python_literal(&value)
    } else {
        value.to_string()
    }
}

/// `value` written as a Python literal.
fn python_literal(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(_) | Value::String(_) => value.to_string(),
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(python_literal)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Object(fields) => format!(
            "{{{}}}",
            fields
                .iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), python_literal(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// An example object of `kind`, which `krec dev --manifests .` applies.
fn example(kind: &Known) -> String {
    let example_ns = if kind.namespaced {
        "\n  namespace: default"
    } else {
        ""
    };
    format!(
        "# An example {ty}: `krec dev --manifests .` applies it, and the guest marks it.\napiVersion: {api_version}\nkind: {ty}\nmetadata:\n  name: example{example_ns}\n{example_body}",
        ty = kind.kind,
        api_version = api_version(kind),
        example_body = example_body(kind),
    )
}

fn rust_files(new: &NewGuest, kind: &Known) -> Vec<(&'static str, String)> {
    let name = &new.name;
    let krate = name.replace('-', "_");
    let version = env!("CARGO_PKG_VERSION");
    let sdk = match &new.sdk_path {
        Some(path) => format!(
            "{{ path = {}, version = \"={version}\" }}",
            toml_string(&path.display().to_string())
        ),
        None => format!("\"={version}\""),
    };
    let sdk_testing = match &new.sdk_path {
        Some(path) => format!(
            "{{ path = {}, version = \"={version}\", features = [\"envtest\"] }}",
            toml_string(&path.display().to_string())
        ),
        None => format!("{{ version = \"={version}\", features = [\"envtest\"] }}"),
    };
    let api_version = api_version(kind);
    let ty = kind.kind;
    let namespace_arg = if kind.namespaced {
        "req.namespace()"
    } else {
        "None"
    };
    let test_ns = if kind.namespaced {
        "Some(\"default\")"
    } else {
        "None"
    };
    let request = if kind.namespaced {
        "Request::new(\"default\", \"example\")"
    } else {
        "Request::cluster(\"example\")"
    };
    let namespace_field = if kind.namespaced {
        "\n    object.metadata.namespace = Some(\"default\".into());"
    } else {
        ""
    };
    let webhook_use = if new.webhook {
        "\nuse krec_guest::{AdmissionRequest, Mutator, Validator, Verdict};"
    } else {
        ""
    };
    let webhook_code = if new.webhook {
        format!(
            r#"

{guard}
/// The mutating webhook: labels every {ty} it admits `example.com/defaulted: "true"`.
#[derive(Default)]
struct Defaults;

impl Mutator for Defaults {{
    type Object = {ty};

    fn mutate(&self, _req: &AdmissionRequest<{ty}>, object: &mut {ty}, _ctx: &Context) -> Verdict {{
        object.labels_mut().insert("example.com/defaulted".into(), "true".into());
        Verdict::allow()
    }}
}}
"#,
            guard = validator::rust_guard(ty),
        )
    } else {
        String::new()
    };
    // The webhooks' unit tests: typed requests on the fake cluster.
    let webhook_tests = if new.webhook {
        format!(
            r#"{guard_test}

    #[test]
    fn defaults_should_label_what_it_admits() {{
        let mutated = FakeCluster::new().mutate(&Defaults, &AdmissionRequest::create(example()));
        assert!(mutated.verdict.allowed);
        let object = mutated.object.expect("the object");
        assert_eq!(object.labels().get("example.com/defaulted").map(String::as_str), Some("true"));
    }}"#,
            guard_test = validator::rust_guard_test(kind),
        )
    } else {
        String::new()
    };
    let export = if new.webhook {
        format!(
            "export!(reconciler: {}Reconciler, validator: Guard, mutator: Defaults);",
            camel(name)
        )
    } else {
        format!("export!({}Reconciler);", camel(name))
    };
    // Suffixed, so that no name (`deployment`, `settings`, `guard`, `request`…) meets a type
    // the template imports or defines.
    let reconciler = format!("{}Reconciler", camel(name));
    let lib = format!(
        r##"//! {name}: a krec guest reconciling {api_version} {ty}.
//!
//! It marks every {ty} with an annotation — the manifest's `spec.config.annotation` — set to
//! the object's generation. Replace `reconcile` with your logic; the unit test below runs it on
//! a fake cluster, `tests/integration.rs` in the real host.

use krec_guest::k8s_openapi::api::{rust};
use krec_guest::prelude::*;
use krec_guest::serde_json::json;{webhook_use}

/// The guest's settings: the manifest's `spec.config`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {{
    /// The annotation the reconciler writes.
    annotation: String,
}}

/// The reconciler, built once per instance from its settings.
struct {reconciler} {{
    settings: Settings,
}}

impl FromConfig for {reconciler} {{
    type Config = Settings;

    fn from_config(settings: Settings) -> Result<Self> {{
        Ok({reconciler} {{ settings }})
    }}
}}

impl Reconciler for {reconciler} {{
    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {{
        // The object may be gone by the time we run: nothing to do then.
        let Some(object) = ctx.get_opt::<{ty}>({namespace_arg}, &req.name)? else {{
            return Ok(Action::done());
        }};
        let generation = object.metadata.generation.unwrap_or_default().to_string();
        if object.annotations().get(&self.settings.annotation) == Some(&generation) {{
            return Ok(Action::done()); // already in the desired state
        }}
        info!("marking {{req}} at generation {{generation}}");
        let patch = json!({{ "metadata": {{ "annotations": {{ &self.settings.annotation: generation }} }} }});
        ctx.patch::<{ty}>({namespace_arg}, &req.name, &Patch::Merge(patch))?;
        Ok(Action::done())
    }}
}}
{webhook_code}
{export}

#[cfg(test)]
mod tests {{
    use super::*;
    use krec_guest::testing::FakeCluster;

    fn reconciler() -> {reconciler} {{
        FakeCluster::configure(r#"{{"annotation": "example.com/generation"}}"#).expect("config")
    }}

    #[test]
    fn reconcile_should_mark_the_object_once() {{
        let mut object = {ty}::default();
        object.metadata.name = Some("example".into());{namespace_field}
        {example_fixture}
        let cluster = FakeCluster::new().with(&object);

        assert_eq!(cluster.reconcile(&reconciler(), {request}), Ok(Action::done()));
        let marked: {ty} = cluster.get({test_ns}, "example").expect("still there");
        assert!(marked.annotations().contains_key("example.com/generation"));
        assert_eq!(cluster.writes().len(), 1);

        // Reconciling again changes nothing: reconciles are idempotent.
        cluster.clear_log();
        assert_eq!(cluster.reconcile(&reconciler(), {request}), Ok(Action::done()));
        assert!(cluster.writes().is_empty());
    }}

    #[test]
    fn a_gone_object_should_be_done() {{
        let cluster = FakeCluster::new();
        assert_eq!(cluster.reconcile(&reconciler(), {request}), Ok(Action::done()));
    }}{webhook_tests}
}}
"##,
        rust = kind.rust,
        example_fixture = example_fixture(kind),
    );
    let manifest = manifest(
        new,
        kind,
        &format!("target/wasm32-wasip2/release/{krate}.wasm"),
        "`cargo build-guest` (an alias in .cargo/config.toml)",
        "32Mi",
    );
    let example = example(kind);
    let webhook_integration = if new.webhook {
        format!(
            r#"
/// The guest's webhooks, registered by the host with the cluster: what the cluster is asked to
/// create, they judge (and label) — as `kubectl apply` would see.
#[test]
fn the_webhooks_should_judge_what_the_cluster_is_asked_to_create() {{
    use krec_guest::ResourceExt as _;
    use krec_guest::k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let dir = env!("CARGO_MANIFEST_DIR");
    let cluster = TestCluster::start().expect("the embedded API server");
    cluster.run_guests(format!("{{dir}}/manifest.yaml")).expect("the krec host");
    let example = |name: &str| {{
        let mut object = {ty}::default();
        object.metadata.name = Some(name.into());{namespace_field}
        {example_fixture}
        object
    }};
    // The host registers the webhooks once its guest runs; the API server asks them from then.
    cluster.eventually("the host to register the webhooks", || {{
        cluster.objects().get::<ValidatingWebhookConfiguration>(None, "krec-{name}")
    }});
    let mut attempt = 0;
    let refused = cluster.eventually("the guard to refuse a frozen object", || {{
        attempt += 1;
        let mut frozen = example(&format!("frozen-{{attempt}}"));
        frozen.annotations_mut().insert("example.com/frozen".into(), "true".into());
        cluster.create(&frozen).err()
    }});
    assert!(refused.to_string().contains("this object is frozen"), "{{refused}}");
    let admitted = cluster.create(&example("admitted")).expect("admitted");
    assert_eq!(
        admitted.labels().get("example.com/defaulted").map(String::as_str),
        Some("true")
    );
}}
"#,
            example_fixture = example_fixture(kind),
        )
    } else {
        String::new()
    };
    let integration = format!(
        r#"//! The guest's built `.wasm` in the real krec host, against krec's embedded API server:
//! run `cargo build-guest` first (it builds `target/wasm32-wasip2/release/{krate}.wasm`).

use krec_guest::k8s_openapi::api::{rust};
use krec_guest::testing::TestCluster;

#[test]
fn the_guest_should_mark_an_object_in_the_host() {{
    let dir = env!("CARGO_MANIFEST_DIR");
    let module = format!("{{dir}}/target/wasm32-wasip2/release/{krate}.wasm");
    assert!(
        std::path::Path::new(&module).exists(),
        "{{module}} is missing: run `cargo build-guest` first"
    );
    let cluster = TestCluster::start().expect("the embedded API server");
    cluster.run_guests(format!("{{dir}}/manifest.yaml")).expect("the krec host");

    let mut object = {ty}::default();
    object.metadata.name = Some("example".into());{namespace_field}
    {example_fixture}
    cluster.objects().add(&object).expect("created");
    cluster.eventually("the guest to mark the object", || {{
        let object: {ty} = cluster.objects().get({test_ns}, "example")?;
        object.metadata.annotations?.get("example.com/generation").cloned()
    }});
}}
{webhook_integration}"#,
        rust = kind.rust,
        example_fixture = example_fixture(kind),
    );
    let cargo = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
krec-guest = {sdk}
serde = {{ version = "1", features = ["derive"] }}

[dev-dependencies]
krec-guest = {sdk_testing}

[profile.release]
opt-level = "s"
strip = "debuginfo"
# `cargo build-guest` after an edit in ~1 s, not ~4 s (the module is no bigger); a clean
# build for shipping can say CARGO_INCREMENTAL=0.
incremental = true

# A crate of its own, wherever it is created.
[workspace]
"#
    );
    let config = format!(
        r#"# `cargo build-guest`: the guest as a wasm32-wasip2 component, where manifest.yaml's
# `module:` points. `cargo test` runs the unit and integration tests natively.
[alias]
build-guest = "build --release --target wasm32-wasip2"

[env]
# The krec host the integration test runs (the one that made this crate).
KREC = {krec}
"#,
        krec = toml_string(&new.krec.display().to_string())
    );
    let readme = format!(
        r#"# {name}

A krec guest reconciling `{api_version} {ty}`, made by `krec new`.

```sh
rustup target add wasm32-wasip2   # once
cargo build-guest                   # build target/wasm32-wasip2/release/{krate}.wasm
cargo test                        # unit tests (fake cluster) and the integration test (real host)
krec dev --manifests .            # a local cluster, with examples/ applied, reconciling live
```

`src/lib.rs` is the reconciler, `manifest.yaml` what it watches, may touch and its settings.

To run it in a cluster where krec is installed (`krec install`), publish the module and register
the manifest as an object, its `module` the reference `krec push` prints:

```sh
krec push target/wasm32-wasip2/release/{krate}.wasm oci://REGISTRY/{name}:v1
# in manifest.yaml: module: oci://REGISTRY/{name}:v1   (a tag: pushing again swaps it live)
kubectl apply -f manifest.yaml    # a Reconciler, confined to its namespace
kubectl wait --for=condition=Ready reconciler/{name}
```
"#
    );
    vec![
        ("Cargo.toml", cargo),
        (".cargo/config.toml", config),
        (".gitignore", "/target\n".into()),
        ("README.md", readme),
        ("src/lib.rs", lib),
        ("manifest.yaml", manifest),
        ("examples/example.yaml", example),
        ("tests/integration.rs", integration),
    ]
}

/// `FooBar` for `foo-bar`.
fn camel(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// The rest of an example object of `kind` in YAML (what validation requires).
fn example_body(kind: &Known) -> String {
    let pod_template = "    metadata:\n      labels: { app: example }\n    spec:\n      containers:\n        - { name: app, image: registry.example.com/app:1.0 }\n";
    match kind.kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => format!(
            "spec:\n  selector:\n    matchLabels: {{ app: example }}\n  template:\n{pod_template}"
        ),
        "Job" => "spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - { name: app, image: registry.example.com/app:1.0 }\n".into(),
        "CronJob" => "spec:\n  schedule: \"*/5 * * * *\"\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          containers:\n            - { name: app, image: registry.example.com/app:1.0 }\n".into(),
        "Pod" => "spec:\n  containers:\n    - { name: app, image: registry.example.com/app:1.0 }\n".into(),
        "Service" => "spec:\n  ports:\n    - { port: 80 }\n".into(),
        "ConfigMap" => "data:\n  greeting: hello\n".into(),
        _ => String::new(),
    }
}

/// Rust that fills in what validation requires of an object of `kind` named `object`.
fn example_fixture(kind: &Known) -> String {
    let container = "krec_guest::k8s_openapi::api::core::v1::Container { name: \"app\".into(), image: Some(\"registry.example.com/app:1.0\".into()), ..Default::default() }";
    let template = format!(
        "krec_guest::k8s_openapi::api::core::v1::PodTemplateSpec {{ metadata: Some(krec_guest::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {{ labels: Some([(\"app\".to_owned(), \"example\".to_owned())].into()), ..Default::default() }}), spec: Some(krec_guest::k8s_openapi::api::core::v1::PodSpec {{ containers: vec![{container}], ..Default::default() }}) }}"
    );
    let selector = "krec_guest::k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector { match_labels: Some([(\"app\".to_owned(), \"example\".to_owned())].into()), ..Default::default() }";
    match kind.kind {
        "Deployment" => format!(
            "object.spec = Some(krec_guest::k8s_openapi::api::apps::v1::DeploymentSpec {{ selector: {selector}, template: {template}, ..Default::default() }});"
        ),
        "StatefulSet" => format!(
            "object.spec = Some(krec_guest::k8s_openapi::api::apps::v1::StatefulSetSpec {{ selector: {selector}, template: {template}, ..Default::default() }});"
        ),
        "DaemonSet" => format!(
            "object.spec = Some(krec_guest::k8s_openapi::api::apps::v1::DaemonSetSpec {{ selector: {selector}, template: {template}, ..Default::default() }});"
        ),
        "ReplicaSet" => format!(
            "object.spec = Some(krec_guest::k8s_openapi::api::apps::v1::ReplicaSetSpec {{ selector: {selector}, template: Some({template}), ..Default::default() }});"
        ),
        "Pod" => format!(
            "object.spec = Some(krec_guest::k8s_openapi::api::core::v1::PodSpec {{ containers: vec![{container}], ..Default::default() }});"
        ),
        "Service" => "object.spec = Some(krec_guest::k8s_openapi::api::core::v1::ServiceSpec { ports: Some(vec![krec_guest::k8s_openapi::api::core::v1::ServicePort { port: 80, ..Default::default() }]), ..Default::default() });".into(),
        "Job" => format!(
            "object.spec = Some(krec_guest::k8s_openapi::api::batch::v1::JobSpec {{ template: krec_guest::k8s_openapi::api::core::v1::PodTemplateSpec {{ metadata: None, spec: Some(krec_guest::k8s_openapi::api::core::v1::PodSpec {{ restart_policy: Some(\"Never\".into()), containers: vec![{container}], ..Default::default() }}) }}, ..Default::default() }});"
        ),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(kind: &str) -> NewGuest {
        NewGuest {
            name: "my-guest".into(),
            kind: kind.into(),
            webhook: false,
            webhook_only: false,
            lang: Lang::Rust,
            sdk_path: None,
            krec: PathBuf::from("/usr/bin/krec"),
        }
    }

    #[test]
    fn bad_names_kinds_and_folders_should_be_refused_with_the_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut bad = new("apps/v1/Deployment");
        bad.name = "My_Guest".into();
        assert!(matches!(
            scaffold(&dir.path().join("x"), &bad),
            Err(NewError::Name(_))
        ));
        for reserved in ["test", "self", "core", "type"] {
            bad.name = reserved.into();
            assert!(matches!(
                scaffold(&dir.path().join("x"), &bad),
                Err(NewError::Reserved(_))
            ));
        }
        let err = scaffold(&dir.path().join("x"), &new("apps/v1/Deploymnet"))
            .expect_err("unknown kind")
            .to_string();
        assert!(
            err.contains("Deploymnet") && err.contains("apps/v1/Deployment"),
            "{err}"
        );
        let err = scaffold(dir.path(), &new("v1/ConfigMap")).expect_err("exists");
        assert!(matches!(err, NewError::Exists(_)));
    }

    #[test]
    fn the_manifest_should_be_valid_for_every_known_kind_and_language() {
        let languages = [
            (Lang::Rust, 8, "target/wasm32-wasip2/release/my_guest.wasm"),
            (Lang::Python, 7, "my_guest.wasm"),
            (Lang::TypeScript, 8, "my_guest.wasm"),
            (Lang::Go, 8, "my-guest.wasm"),
        ];
        for (lang, files, module) in languages {
            for kind in KNOWN {
                for webhook_only in [false, true] {
                    let dir = tempfile::tempdir().expect("tempdir");
                    let text = if kind.group.is_empty() {
                        format!("{}/{}", kind.version, kind.kind)
                    } else {
                        format!("{}/{}/{}", kind.group, kind.version, kind.kind)
                    };
                    let mut guest = new(&text);
                    guest.webhook = !webhook_only;
                    guest.webhook_only = webhook_only;
                    guest.lang = lang;
                    if lang == Lang::Go {
                        guest.sdk_path = Some(go_sdk());
                    }
                    let written = scaffold(&dir.path().join("g"), &guest).expect("scaffolded");
                    assert_eq!(written.len(), files, "{lang:?}");
                    let manifest =
                        crate::manifest::Manifest::load(&dir.path().join("g/manifest.yaml"))
                            .unwrap_or_else(|e| panic!("{lang:?} {text}: {e}"));
                    assert_eq!(manifest.name, "my-guest");
                    assert_eq!(manifest.spec.module, dir.path().join("g").join(module));
                    if webhook_only {
                        // One validating webhook on the kind; nothing reconciled, no settings.
                        assert_eq!(manifest.spec.webhooks.len(), 1);
                        assert!(manifest.spec.for_kind.is_none(), "{lang:?} {text}");
                        assert!(manifest.spec.permissions.is_empty(), "{lang:?} {text}");
                        let readme = std::fs::read_to_string(dir.path().join("g/README.md"))
                            .expect("README");
                        assert!(readme.contains("with a validating webhook"), "{readme}");
                        assert!(readme.contains("```sh\n"), "{readme}");
                    } else {
                        assert_eq!(manifest.spec.webhooks.len(), 2);
                    }
                }
            }
        }
    }

    fn go_sdk() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk-go")
    }

    #[test]
    fn a_go_guest_should_require_the_sdks_folder_and_carry_its_requirements() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut guest = new("apps/v1/ReplicaSet");
        guest.lang = Lang::Go;
        let err = scaffold(&dir.path().join("none"), &guest).expect_err("no SDK");
        assert!(matches!(err, NewError::NoGoSdk), "{err}");
        guest.sdk_path = Some(go_sdk());
        scaffold(&dir.path().join("g"), &guest).expect("scaffolded");
        let go_mod = std::fs::read_to_string(dir.path().join("g/go.mod")).expect("go.mod");
        let sdk_go_mod = std::fs::read_to_string(go_sdk().join("go.mod")).expect("SDK go.mod");
        for required in sdk_go_mod
            .lines()
            .filter(|l| l.starts_with('\t'))
            .filter_map(|l| l.split_whitespace().next())
        {
            assert!(
                go_mod.contains(&format!("\t{required} ")),
                "{required}: {go_mod}"
            );
        }
        assert!(go_mod.contains("replace krec.dev/guest => "), "{go_mod}");
        let main = std::fs::read_to_string(dir.path().join("g/main.go")).expect("main.go");
        assert!(main.contains("appsv1 \"k8s.io/api/apps/v1\""), "{main}");
        assert!(main.contains("obj := &appsv1.ReplicaSet{}"), "{main}");
    }

    #[test]
    fn python_typescript_and_go_guests_may_take_names_rust_reserves() {
        let dir = tempfile::tempdir().expect("tempdir");
        for lang in [Lang::Python, Lang::TypeScript, Lang::Go] {
            let mut guest = new("v1/ConfigMap");
            guest.name = "test".into();
            guest.lang = lang;
            guest.sdk_path = (lang == Lang::Go).then(go_sdk);
            scaffold(&dir.path().join(format!("{lang:?}")), &guest).expect("scaffolded");
        }
    }
}
