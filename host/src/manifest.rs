//! The `Reconciler` manifest: which module a guest runs, what it watches, its limits and
//! permissions. One YAML file per guest; a directory of them is the set of guests.
//!
//! Parsing is strict — unknown fields are errors — and every error names the file, the field and
//! the problem, e.g. `manifests/foo.yaml: spec.limits.memory: invalid quantity "64Xi"`.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::vocab::{EventKind, Gvk};
use krec_apiserver::selector::{LabelSelector, is_dns_label, is_dns_subdomain};

/// The manifest's `apiVersion`.
pub const API_VERSION: &str = "krec.dev/v1alpha1";
/// The manifest's `kind`.
pub const KIND: &str = "Reconciler";

/// A manifest that could not be read or is invalid.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("{path}: {error}")]
    Read {
        /// The manifest file.
        path: PathBuf,
        /// The I/O error (in the message, so not also a `source`: a chain would say it twice).
        error: std::io::Error,
    },
    /// The YAML does not describe a valid manifest.
    #[error("{path}: {field}{sep}{problem}", sep = if field.is_empty() { "" } else { ": " })]
    Invalid {
        /// The manifest file.
        path: PathBuf,
        /// Dotted path of the offending field, e.g. `spec.limits.memory`; empty for the whole file.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// Two manifests in one directory name the same guest.
    #[error("{path}: guest {name:?} is already defined by {first}")]
    Duplicate {
        /// The later manifest.
        path: PathBuf,
        /// The guest name.
        name: String,
        /// The manifest that defined it first.
        first: PathBuf,
    },
}

impl ManifestError {
    /// The manifest file at fault.
    pub fn path(&self) -> &Path {
        match self {
            ManifestError::Read { path, .. }
            | ManifestError::Invalid { path, .. }
            | ManifestError::Duplicate { path, .. } => path,
        }
    }
}

/// A validated manifest, with its module path resolved against the manifest's directory.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    /// Where the manifest was read from.
    pub path: PathBuf,
    /// The guest's name (`metadata.name`): names its logs, metrics, field manager and Events.
    pub name: String,
    /// The guest's configuration.
    pub spec: ReconcilerSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawManifest {
    api_version: String,
    kind: String,
    metadata: RawMetadata,
    spec: ReconcilerSpec,
}

#[derive(Deserialize)]
struct RawMetadata {
    name: String,
    #[serde(flatten)]
    _rest: serde_yaml_ng::Mapping,
}

/// `spec` of a manifest. Field names are those of the YAML, in camelCase.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReconcilerSpec {
    /// Path of the `.wasm` component; relative paths are resolved against the manifest's directory.
    pub module: PathBuf,
    /// The primary kind: its events enqueue the object itself (controller-runtime's `For`).
    #[serde(default, rename = "for")]
    pub for_kind: Option<KindRef>,
    /// Owned kinds: their events enqueue the controller owner if it is of the `for` kind.
    #[serde(default)]
    pub owns: Vec<KindRef>,
    /// Other watched kinds, mapped to requests.
    #[serde(default)]
    pub watches: Vec<Watch>,
    /// Event filters applied to events of the `for` kind (controller-runtime's
    /// `For(..., WithPredicates(...))`); owned and watched kinds are not filtered by them.
    #[serde(default)]
    pub predicates: Vec<Predicate>,
    /// Namespaces to cache and watch; empty means all.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Workers reconciling different keys at once.
    #[serde(default = "default_concurrency")]
    pub max_concurrent_reconciles: u32,
    /// Retry backoff and overall rate limit.
    #[serde(default)]
    pub rate_limiter: RateLimiterSpec,
    /// Re-enqueue every object of the `for` kind this often.
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub resync_period: Option<Duration>,
    /// Periodic generic sources, each enqueueing a fixed request.
    #[serde(default)]
    pub tickers: Vec<Ticker>,
    /// Sandbox limits per reconcile.
    #[serde(default)]
    pub limits: Limits,
    /// Whether a worker reuses its guest instance across reconciles.
    #[serde(default)]
    pub isolation: Isolation,
    /// Kinds whose reads always go to the API server (controller-runtime's `uncachedObjects`).
    #[serde(default)]
    pub uncached: Vec<KindRef>,
    /// Read-your-own-writes: a cached read of a kind the guest wrote waits (bounded) until the
    /// cache reflects that write, else reads the API server. `false` reads the cache as it is.
    #[serde(default = "default_true")]
    pub read_your_writes: bool,
    /// What the guest may do; every other call is `forbidden`.
    #[serde(default)]
    pub permissions: Vec<Permission>,
    /// Admission webhooks the guest serves (its `validate` and `mutate` exports).
    #[serde(default)]
    pub webhooks: Vec<WebhookSpec>,
    /// The CRD whose versions the guest's `convert` export converts (its conversion webhook).
    #[serde(default)]
    pub conversion: Option<ConversionSpec>,
    /// The guest's settings, any YAML: given to its `init` export (the SDK's `FromConfig`)
    /// once per instance, after `configSchema`'s defaults are filled in. A changed config
    /// swaps the guest like a changed module.
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    /// An OpenAPI v3 schema (as a CRD's `openAPIV3Schema`) `config` must match: types,
    /// `required`, `enum`, bounds, patterns, `default`s; fields it does not declare are refused
    /// unless `additionalProperties` or `x-kubernetes-preserve-unknown-fields` allows them.
    #[serde(default)]
    pub config_schema: Option<serde_json::Value>,
}

/// A CRD conversion webhook the guest serves.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConversionSpec {
    /// The CRD's name, `{plural}.{group}` (e.g. `foos.samplecontroller.k8s.io`).
    pub crd: String,
}

/// Whether a webhook judges or changes objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookType {
    /// Calls the guest's `validate`: allow or deny.
    Validating,
    /// Calls the guest's `mutate`: allow or deny, and a changed object.
    Mutating,
}

impl WebhookType {
    /// `validate` or `mutate`: the export called, and the path the host serves it at.
    pub fn export(self) -> &'static str {
        match self {
            WebhookType::Validating => "validate",
            WebhookType::Mutating => "mutate",
        }
    }
}

/// One rule of a webhook, as in a `*WebhookConfiguration`'s `rules`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookRule {
    /// API groups (`""` for the core group, `*` for all).
    pub api_groups: Vec<String>,
    /// API versions (`*` for all).
    pub api_versions: Vec<String>,
    /// Resources (plural, `pods/status` for a subresource, `*` for all).
    pub resources: Vec<String>,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT` or `*`.
    pub operations: Vec<String>,
    /// `Cluster`, `Namespaced` or `*` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// An admission webhook the guest serves: what a `*WebhookConfiguration` says of it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookSpec {
    /// `validating` or `mutating`.
    #[serde(rename = "type")]
    pub kind: WebhookType,
    /// The webhook's name, a domain of at least three labels; default
    /// `{type}.{guest}.krec.dev`.
    #[serde(default)]
    pub name: Option<String>,
    /// The requests it sees.
    pub rules: Vec<WebhookRule>,
    /// `Fail` (the default) or `Ignore`: what a trap, timeout or unreachable host means.
    #[serde(default)]
    pub failure_policy: Option<String>,
    /// `None` (the default) or `NoneOnDryRun`.
    #[serde(default)]
    pub side_effects: Option<String>,
    /// 1 to 30 seconds (default 10): how long the API server waits.
    #[serde(default)]
    pub timeout_seconds: Option<u32>,
    /// A label selector on the namespace.
    #[serde(default)]
    pub namespace_selector: Option<serde_json::Value>,
    /// A label selector on the object.
    #[serde(default)]
    pub object_selector: Option<serde_json::Value>,
    /// `Equivalent` (the default) or `Exact`.
    #[serde(default)]
    pub match_policy: Option<String>,
    /// Mutating webhooks: `Never` (the default) or `IfNeeded`.
    #[serde(default)]
    pub reinvocation_policy: Option<String>,
}

impl WebhookSpec {
    /// The webhook's name: its own, or `{type}.{guest}.krec.dev`.
    pub fn name_for(&self, guest: &str) -> String {
        self.name.clone().unwrap_or_else(|| {
            let kind = match self.kind {
                WebhookType::Validating => "validating",
                WebhookType::Mutating => "mutating",
            };
            format!("{kind}.{guest}.krec.dev")
        })
    }
}

fn default_concurrency() -> u32 {
    1
}

/// A kind, written as `{ apiVersion: apps/v1, kind: ReplicaSet }`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KindRef {
    /// `v1`, `apps/v1`, `samplecontroller.k8s.io/v1alpha1`, ...
    pub api_version: String,
    /// CamelCase kind.
    pub kind: String,
}

impl KindRef {
    /// The group/version/kind.
    pub fn gvk(&self) -> Gvk {
        Gvk::from_api_version(&self.api_version, &self.kind)
    }
}

impl fmt::Display for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version, self.kind)
    }
}

/// A fixed request, written as `{ namespace: default, name: x }`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    /// Namespace; omitted for cluster-scoped or namespace-less requests.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

/// A watch on another kind and how its events map to requests.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Watch {
    /// The watched kind's `apiVersion`.
    pub api_version: String,
    /// The watched kind.
    pub kind: String,
    /// Every event maps to this one request.
    #[serde(default)]
    pub map_to: Option<RequestSpec>,
    /// Events map to a request named by this label of the object.
    #[serde(default)]
    pub map_by_label: Option<LabelMapping>,
    /// Events map to a request named by this annotation of the object.
    #[serde(default)]
    pub map_by_annotation: Option<LabelMapping>,
    /// Events map to the object's namespace, as a cluster-scoped request (`name` is the
    /// namespace): for a guest reconciling Namespaces. Cluster-scoped objects map to nothing.
    #[serde(default)]
    pub map_to_namespace: bool,
    /// Events map to each of the object's owners of this kind (any owner reference, not only
    /// the controller), in the object's namespace.
    #[serde(default)]
    pub map_to_owner: Option<KindRef>,
    /// Events map to the requests the guest's `map` export returns for the object.
    #[serde(default)]
    pub map_by_guest: bool,
}

impl Watch {
    /// The watched kind.
    pub fn kind_ref(&self) -> KindRef {
        KindRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
        }
    }
}

/// Map an object to the request named by one of its labels (or annotations).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelMapping {
    /// The label (or annotation) whose value names the request: `name`, or `namespace/name`;
    /// objects without it map to nothing.
    pub key: String,
    /// The request's namespace; default: the object's namespace.
    #[serde(default)]
    pub namespace: Option<String>,
}

/// An event filter, as controller-runtime's predicates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Predicate {
    /// Updates pass only when `metadata.generation` changed (spec changes).
    GenerationChanged,
    /// Updates pass only when labels changed.
    LabelsChanged,
    /// Updates pass only when annotations changed.
    AnnotationsChanged,
    /// Updates pass only when `metadata.resourceVersion` changed (drops resyncs).
    ResourceVersionChanged,
    /// Only objects matching this label selector pass.
    LabelSelector(String),
    /// Only these event types pass.
    EventTypes(BTreeSet<EventKind>),
}

impl<'de> Deserialize<'de> for Predicate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        struct Map {
            #[serde(default)]
            label_selector: Option<String>,
            #[serde(default)]
            event_types: Option<BTreeSet<EventKind>>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Name(String),
            Map(Map),
        }
        let raw = Raw::deserialize(deserializer).map_err(|_| {
            D::Error::custom(
                "expected GenerationChanged, LabelsChanged, AnnotationsChanged, ResourceVersionChanged, { labelSelector: ... } or { eventTypes: [create, update, delete, generic] }",
            )
        })?;
        match raw {
            Raw::Name(name) => match name.as_str() {
                "GenerationChanged" => Ok(Predicate::GenerationChanged),
                "LabelsChanged" => Ok(Predicate::LabelsChanged),
                "AnnotationsChanged" => Ok(Predicate::AnnotationsChanged),
                "ResourceVersionChanged" => Ok(Predicate::ResourceVersionChanged),
                other => Err(D::Error::custom(format!(
                    "unknown predicate {other:?}; expected GenerationChanged, LabelsChanged, AnnotationsChanged or ResourceVersionChanged"
                ))),
            },
            Raw::Map(Map {
                label_selector: Some(s),
                event_types: None,
            }) => Ok(Predicate::LabelSelector(s)),
            Raw::Map(Map {
                label_selector: None,
                event_types: Some(t),
            }) => Ok(Predicate::EventTypes(t)),
            Raw::Map(_) => Err(D::Error::custom(
                "a predicate map has exactly one of labelSelector or eventTypes",
            )),
        }
    }
}

/// Per-guest workqueue rate limiting: per-key exponential backoff and an overall token bucket.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RateLimiterSpec {
    /// First retry delay of a failing key; doubles on each failure.
    #[serde(default = "default_base_delay", deserialize_with = "de_duration")]
    pub base_delay: Duration,
    /// Cap of the per-key delay.
    #[serde(default = "default_max_delay", deserialize_with = "de_duration")]
    pub max_delay: Duration,
    /// Overall rate of rate-limited adds, per second.
    #[serde(default = "default_qps")]
    pub qps: f64,
    /// Token bucket size.
    #[serde(default = "default_burst")]
    pub burst: u32,
}

fn default_base_delay() -> Duration {
    Duration::from_millis(5)
}
fn default_max_delay() -> Duration {
    Duration::from_secs(1000)
}
fn default_qps() -> f64 {
    10.0
}
fn default_burst() -> u32 {
    100
}

impl Default for RateLimiterSpec {
    fn default() -> Self {
        RateLimiterSpec {
            base_delay: default_base_delay(),
            max_delay: default_max_delay(),
            qps: default_qps(),
            burst: default_burst(),
        }
    }
}

/// A periodic generic source: enqueue `request` every `every`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ticker {
    /// Period, e.g. `10m`.
    #[serde(deserialize_with = "de_duration")]
    pub every: Duration,
    /// The request to enqueue.
    pub request: RequestSpec,
}

/// Sandbox limits of one reconcile.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Limits {
    /// Wall-clock limit of one reconcile, enforced by epoch interruption.
    #[serde(default = "default_timeout", deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// Total linear memory of the guest in bytes, over all its memories (a Kubernetes quantity:
    /// `64Mi`).
    #[serde(default = "default_memory", deserialize_with = "de_quantity")]
    pub memory: u64,
    /// Most CPU the guest's code may use, in cores (a Kubernetes CPU quantity: `500m`, `1`),
    /// over all its workers. When guests compete for the host's CPU each gets at most an equal
    /// share of it; see [`crate::guest::CpuGovernor`].
    #[serde(default = "default_cpu", deserialize_with = "de_cpu")]
    pub cpu: f64,
    /// Writes (create, update, patch, delete, Events) per second the guest may send to the
    /// API server, over all its workers: client-go's `QPS`.
    #[serde(default = "default_write_qps")]
    pub write_qps: f64,
    /// Writes the guest may send at once before `writeQps` applies: client-go's `Burst`.
    #[serde(default = "default_write_burst")]
    pub write_burst: u32,
}

fn default_true() -> bool {
    true
}

/// Default per-reconcile timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest `limits.timeout` accepted: a reconcile holds a worker (and a key) for that long.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// Smallest `limits.memory`: a Rust guest needs about this much to start.
pub const MIN_MEMORY: u64 = 1 << 20;
/// Largest `limits.memory`: all a wasm32 guest can address.
pub const MAX_MEMORY: u64 = 4 << 30;
/// Most workers (`maxConcurrentReconciles`) a guest may have; each holds an instance.
pub const MAX_CONCURRENT_RECONCILES: u32 = 256;
/// Highest `rateLimiter.qps`.
pub const MAX_QPS: f64 = 10_000.0;
/// Largest `rateLimiter.burst`.
pub const MAX_BURST: u32 = 100_000;
/// Most tickers one guest may have.
pub const MAX_TICKERS: usize = 64;
/// Shortest ticker period.
pub const MIN_TICKER: Duration = Duration::from_millis(100);
/// Shortest resync period: each resync enqueues every cached object of the `for` kind.
pub const MIN_PERIOD: Duration = Duration::from_secs(1);
/// Longest period or delay (tickers, resync, backoff cap): 30 days.
pub const MAX_PERIOD: Duration = Duration::from_secs(30 * 24 * 3600);
/// Largest manifest file read.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// A duration as the manifest would write it: `300s`, `100ms`, `720h`.
fn show_duration(d: Duration) -> String {
    if d.subsec_nanos() != 0 {
        format!("{}ms", d.as_millis())
    } else if d.as_secs().is_multiple_of(3600) && d.as_secs() >= 3600 {
        format!("{}h", d.as_secs() / 3600)
    } else {
        format!("{}s", d.as_secs())
    }
}
/// Default linear memory limit: 64 MiB.
pub const DEFAULT_MEMORY: u64 = 64 << 20;
/// Default CPU limit: one core.
pub const DEFAULT_CPU: f64 = 1.0;
/// Smallest CPU limit: 10 millicores.
pub const MIN_CPU: f64 = 0.01;
/// Largest CPU limit: 64 cores.
pub const MAX_CPU: f64 = 64.0;
/// Default writes per second (controller-runtime's client defaults to 20 for a whole manager;
/// a guest is one controller).
pub const DEFAULT_WRITE_QPS: f64 = 50.0;
/// Default write burst.
pub const DEFAULT_WRITE_BURST: u32 = 100;
/// Highest `writeQps` and `writeBurst`.
pub const MAX_WRITE_RATE: u32 = 100_000;

fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}
fn default_memory() -> u64 {
    DEFAULT_MEMORY
}
fn default_cpu() -> f64 {
    DEFAULT_CPU
}
fn default_write_qps() -> f64 {
    DEFAULT_WRITE_QPS
}
fn default_write_burst() -> u32 {
    DEFAULT_WRITE_BURST
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: DEFAULT_TIMEOUT,
            memory: DEFAULT_MEMORY,
            cpu: DEFAULT_CPU,
            write_qps: DEFAULT_WRITE_QPS,
            write_burst: DEFAULT_WRITE_BURST,
        }
    }
}

/// Instance reuse policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    /// Each worker keeps its instance across reconciles (fast); it is discarded on a trap, a limit
    /// breach or a module swap.
    #[default]
    Reuse,
    /// A fresh instance for every reconcile: no state can leak from one reconcile to the next.
    PerReconcile,
}

/// One permission: verbs on a kind, optionally only in some namespaces.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Permission {
    /// The kind's `apiVersion`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// Permitted verbs.
    pub verbs: Vec<Verb>,
    /// Namespaces the permission holds in; empty means all (and cluster-scoped objects).
    #[serde(default)]
    pub namespaces: Vec<String>,
}

/// A verb a guest can be permitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verb {
    /// Read one object.
    Get,
    /// List objects.
    List,
    /// Watch objects (the host's informers; implied for watched kinds in RBAC).
    Watch,
    /// Create objects (and record Events, for the Event kind).
    Create,
    /// Replace objects.
    Update,
    /// Replace the status subresource.
    UpdateStatus,
    /// Patch objects.
    Patch,
    /// Patch the status subresource.
    PatchStatus,
    /// Delete objects.
    Delete,
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::UpdateStatus => "update-status",
            Verb::Patch => "patch",
            Verb::PatchStatus => "patch-status",
            Verb::Delete => "delete",
        })
    }
}

impl Manifest {
    /// Whether the manifest permits `verb` on `gvk` in `namespace` (`None`: cluster-scoped or
    /// across all namespaces, which needs a permission without a namespace restriction).
    pub fn allows(&self, verb: Verb, gvk: &Gvk, namespace: Option<&str>) -> bool {
        self.spec.permissions.iter().any(|p| {
            p.verbs.contains(&verb)
                && Gvk::from_api_version(&p.api_version, &p.kind) == *gvk
                && (p.namespaces.is_empty()
                    || namespace.is_some_and(|ns| p.namespaces.iter().any(|n| n == ns)))
        })
    }

    /// Whether `gvk` is read from the API server rather than the cache.
    pub fn is_uncached(&self, gvk: &Gvk) -> bool {
        self.spec.uncached.iter().any(|k| k.gvk() == *gvk)
    }

    /// Read and validate a manifest file.
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let text = read_manifest(path).map_err(|error| ManifestError::Read {
            path: path.to_owned(),
            error,
        })?;
        Self::parse(path, &text)
    }

    /// Parse and validate manifest text; `path` names it in errors and anchors the module path.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ManifestError> {
        let invalid = |field: &str, problem: String| ManifestError::Invalid {
            path: path.to_owned(),
            field: field.to_owned(),
            problem,
        };
        let deserializer = serde_yaml_ng::Deserializer::from_str(text);
        let raw: RawManifest = serde_path_to_error::deserialize(deserializer).map_err(|err| {
            let field = err.path().to_string();
            let field = if field == "." { String::new() } else { field };
            invalid(&field, strip_location(&err.inner().to_string()))
        })?;
        if raw.api_version != API_VERSION {
            return Err(invalid(
                "apiVersion",
                format!("expected {API_VERSION:?}, found {:?}", raw.api_version),
            ));
        }
        if raw.kind != KIND {
            return Err(invalid(
                "kind",
                format!("expected {KIND:?}, found {:?}", raw.kind),
            ));
        }
        if !is_dns_label(&raw.metadata.name) {
            return Err(invalid(
                "metadata.name",
                format!(
                    "{:?} is not a valid guest name: at most 63 lowercase letters, digits or '-', starting and ending alphanumeric",
                    raw.metadata.name
                ),
            ));
        }
        let mut spec = raw.spec;
        validate_spec(&spec).map_err(|FieldProblem(field, problem)| invalid(&field, problem))?;
        configure(&mut spec).map_err(|FieldProblem(field, problem)| invalid(&field, problem))?;
        if spec.module.is_relative() {
            let dir = path.parent().unwrap_or(Path::new("."));
            spec.module = dir.join(&spec.module);
        }
        Ok(Manifest {
            path: path.to_owned(),
            name: raw.metadata.name,
            spec,
        })
    }

    /// Load every `*.yaml`/`*.yml` manifest under `dir` (recursively), sorted by path; fails on
    /// the first invalid one. Files that parse and whose `kind` is not `Reconciler` (CRDs, example
    /// objects) are skipped.
    pub fn load_dir(dir: &Path) -> Result<Vec<Manifest>, ManifestError> {
        Self::scan_dir(dir)?.into_iter().collect()
    }

    /// Like [`load_dir`](Self::load_dir), but with one result per manifest file, so that one bad
    /// manifest does not hide the others. Two manifests naming the same guest: the later is an
    /// error. Fails only if the directory cannot be read.
    pub fn scan_dir(dir: &Path) -> Result<Vec<Result<Manifest, ManifestError>>, ManifestError> {
        let mut files = Vec::new();
        // A single manifest file is a directory of one.
        if dir.is_file() {
            files.push(dir.to_owned());
        } else {
            collect_yaml(dir, &mut files).map_err(|error| ManifestError::Read {
                path: dir.to_owned(),
                error,
            })?;
        }
        files.sort();
        let mut results: Vec<Result<Manifest, ManifestError>> = Vec::new();
        for file in files {
            let text = match read_manifest(&file) {
                Ok(text) => text,
                Err(source) => {
                    results.push(Err(ManifestError::Read {
                        path: file,
                        error: source,
                    }));
                    continue;
                }
            };
            if declares_other_kind(&text) {
                continue;
            }
            let result = Self::parse(&file, &text).and_then(|manifest| {
                let first = results.iter().flatten().find(|m| m.name == manifest.name);
                match first {
                    Some(first) => Err(ManifestError::Duplicate {
                        path: file.clone(),
                        name: manifest.name.clone(),
                        first: first.path.clone(),
                    }),
                    None => Ok(manifest),
                }
            });
            results.push(result);
        }
        Ok(results)
    }
}

/// A manifest file's text: a regular file of at most [`MAX_MANIFEST_BYTES`].
fn read_manifest(path: &Path) -> std::io::Result<String> {
    crate::files::read_bounded_text(path, MAX_MANIFEST_BYTES)
}

/// Whether a YAML file clearly declares some other `kind` (a CRD, example objects) in its first
/// document. Files that do not parse, or have no `kind`, are treated as manifests so that their
/// errors are reported.
fn declares_other_kind(text: &str) -> bool {
    #[derive(Deserialize)]
    struct Head {
        kind: Option<String>,
    }
    // The first document decides: example files hold several objects.
    serde_yaml_ng::Deserializer::from_str(text)
        .next()
        .and_then(|first| Head::deserialize(first).ok())
        .and_then(|h| h.kind)
        .is_some_and(|k| k != KIND)
}

fn collect_yaml(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        // `file_type` does not follow symlinks, so a link loop cannot recurse forever.
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            // Build output is never a manifest and can be large.
            if path
                .file_name()
                .is_some_and(|n| n == "target" || n == "src")
            {
                continue;
            }
            collect_yaml(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
    Ok(())
}

/// serde_yaml_ng prefixes its own (coarser) path, `spec.limits: `; drop it, since the error
/// already names the field, but keep its "at line X column Y", which helps.
fn strip_location(message: &str) -> String {
    let message = message.trim();
    match message.split_once(": ") {
        Some((head, rest)) if !head.is_empty() && !head.contains(char::is_whitespace) => {
            rest.to_owned()
        }
        _ => message.to_owned(),
    }
}

/// A field of a manifest's spec that is wrong (its path, e.g. `spec.limits.timeout`) and
/// why; the manifest file is named when it becomes a [`ManifestError`].
#[derive(Debug)]
struct FieldProblem(String, String);

fn validate_kind(field: &str, kind: &KindRef) -> Result<(), FieldProblem> {
    validate_api_version(field, &kind.api_version)?;
    if kind.kind.is_empty()
        || !kind
            .kind
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_uppercase())
    {
        return Err(FieldProblem(
            format!("{field}.kind"),
            format!("{:?} is not a CamelCase kind", kind.kind),
        ));
    }
    Ok(())
}

fn validate_api_version(field: &str, api_version: &str) -> Result<(), FieldProblem> {
    let ok = match api_version.split_once('/') {
        Some((group, version)) => is_dns_subdomain(group) && is_dns_label(version),
        None => is_dns_label(api_version),
    };
    if ok {
        Ok(())
    } else {
        Err(FieldProblem(
            format!("{field}.apiVersion"),
            format!("{api_version:?} is not of the form `v1` or `group/version`"),
        ))
    }
}

/// The webhooks' fields, with the values kube-apiserver would accept in the configuration
/// the host registers for them (so a mistake is reported here, naming the manifest's field).
fn validate_webhooks(webhooks: &[WebhookSpec]) -> Result<(), FieldProblem> {
    let one_of = |field: String, value: &Option<String>, allowed: &[&str]| match value {
        Some(v) if !allowed.contains(&v.as_str()) => Err(FieldProblem(
            field,
            format!("{v:?} is not one of {}", allowed.join(", ")),
        )),
        _ => Ok(()),
    };
    let mut names = std::collections::HashSet::new();
    for (i, hook) in webhooks.iter().enumerate() {
        let field = format!("spec.webhooks[{i}]");
        if let Some(name) = &hook.name
            && (!is_dns_subdomain(name) || name.split('.').count() < 3)
        {
            return Err(FieldProblem(
                format!("{field}.name"),
                format!(
                    "{name:?} must be a domain of at least three labels, e.g. `foo.example.com`"
                ),
            ));
        }
        // Unnamed webhooks are named after their type and guest: two of a type need names.
        if !names.insert(hook.name_for("GUEST")) {
            return Err(FieldProblem(
                format!("{field}.name"),
                match &hook.name {
                    Some(name) => format!("{name:?} is used twice"),
                    None => "two webhooks of this type: give each a `name`".into(),
                },
            ));
        }
        if hook.rules.is_empty() {
            return Err(FieldProblem(
                format!("{field}.rules"),
                "at least one rule is required (apiGroups, apiVersions, resources, operations)"
                    .into(),
            ));
        }
        for (j, rule) in hook.rules.iter().enumerate() {
            let rule_field = format!("{field}.rules[{j}]");
            for (key, values) in [
                ("apiGroups", &rule.api_groups),
                ("apiVersions", &rule.api_versions),
                ("resources", &rule.resources),
                ("operations", &rule.operations),
            ] {
                if values.is_empty() {
                    return Err(FieldProblem(
                        format!("{rule_field}.{key}"),
                        "must not be empty".into(),
                    ));
                }
            }
            for op in &rule.operations {
                if !["*", "CREATE", "UPDATE", "DELETE", "CONNECT"].contains(&op.as_str()) {
                    return Err(FieldProblem(
                        format!("{rule_field}.operations"),
                        format!("{op:?} is not one of CREATE, UPDATE, DELETE, CONNECT, *"),
                    ));
                }
            }
            one_of(
                format!("{rule_field}.scope"),
                &rule.scope,
                &["*", "Cluster", "Namespaced"],
            )?;
        }
        one_of(
            format!("{field}.failurePolicy"),
            &hook.failure_policy,
            &["Fail", "Ignore"],
        )?;
        one_of(
            format!("{field}.sideEffects"),
            &hook.side_effects,
            &["None", "NoneOnDryRun"],
        )?;
        one_of(
            format!("{field}.matchPolicy"),
            &hook.match_policy,
            &["Equivalent", "Exact"],
        )?;
        one_of(
            format!("{field}.reinvocationPolicy"),
            &hook.reinvocation_policy,
            &["Never", "IfNeeded"],
        )?;
        if hook.reinvocation_policy.is_some() && hook.kind == WebhookType::Validating {
            return Err(FieldProblem(
                format!("{field}.reinvocationPolicy"),
                "only mutating webhooks are reinvoked".into(),
            ));
        }
        if let Some(timeout) = hook.timeout_seconds
            && !(1..=30).contains(&timeout)
        {
            return Err(FieldProblem(
                format!("{field}.timeoutSeconds"),
                format!("{timeout} is not between 1 and 30"),
            ));
        }
        for (key, selector) in [
            ("namespaceSelector", &hook.namespace_selector),
            ("objectSelector", &hook.object_selector),
        ] {
            if let Some(selector) = selector
                && !selector.is_object()
            {
                return Err(FieldProblem(
                    format!("{field}.{key}"),
                    "must be a label selector (matchLabels, matchExpressions)".into(),
                ));
            }
        }
    }
    Ok(())
}

/// Check `spec.config` against `spec.configSchema`, filling in the schema's defaults (an absent
/// config becomes `{}` with its defaults).
fn configure(spec: &mut ReconcilerSpec) -> Result<(), FieldProblem> {
    let Some(schema) = &spec.config_schema else {
        return Ok(());
    };
    if !schema.is_object() {
        return Err(FieldProblem(
            "spec.configSchema".into(),
            "must be an OpenAPI v3 schema (an object, e.g. {type: object, properties: …})".into(),
        ));
    }
    let config = spec
        .config
        .get_or_insert_with(|| serde_json::Value::Object(Default::default()));
    krec_apiserver::schema::apply_defaults(schema, config);
    let at = |path: &str| {
        if path.is_empty() {
            "spec.config".to_owned()
        } else {
            format!("spec.config.{path}")
        }
    };
    if let Some(path) = undeclared(schema, config, String::new()) {
        return Err(FieldProblem(
            at(&path),
            "unknown field: spec.configSchema does not declare it".into(),
        ));
    }
    if let Some((path, message)) = krec_apiserver::schema::validate(schema, config)
        .into_iter()
        .next()
    {
        let path = if path == "<root>" {
            String::new()
        } else {
            path
        };
        return Err(FieldProblem(
            at(&path),
            format!("{message} (spec.configSchema)"),
        ));
    }
    Ok(())
}

/// The path of the first field of `value` that `schema` does not declare, where it declares
/// `properties` and allows nothing else.
fn undeclared(
    schema: &serde_json::Value,
    value: &serde_json::Value,
    path: String,
) -> Option<String> {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match value {
        serde_json::Value::Object(map) => {
            let open = schema
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(serde_json::Value::as_bool)
                == Some(true);
            let properties = schema
                .get("properties")
                .and_then(serde_json::Value::as_object);
            let additional = schema.get("additionalProperties");
            for (key, child) in map {
                let child_schema = properties
                    .and_then(|p| p.get(key))
                    .or(additional.filter(|a| a.is_object()));
                match child_schema {
                    Some(child_schema) => {
                        if let Some(found) = undeclared(child_schema, child, join(key)) {
                            return Some(found);
                        }
                    }
                    None if open
                        || additional.and_then(serde_json::Value::as_bool) == Some(true) => {}
                    None if properties.is_none() && additional.is_none() => {}
                    None => return Some(join(key)),
                }
            }
            None
        }
        serde_json::Value::Array(items) => {
            let item_schema = schema.get("items")?;
            items
                .iter()
                .enumerate()
                .find_map(|(i, item)| undeclared(item_schema, item, format!("{path}[{i}]")))
        }
        _ => None,
    }
}

fn validate_spec(spec: &ReconcilerSpec) -> Result<(), FieldProblem> {
    let problem = |field: &str, p: String| Err(FieldProblem(field.to_owned(), p));
    if spec.module.as_os_str().is_empty() {
        return problem(
            "spec.module",
            "must name the guest's .wasm component".into(),
        );
    }
    if let Some(k) = &spec.for_kind {
        validate_kind("spec.for", k)?;
    }
    for (i, k) in spec.owns.iter().enumerate() {
        validate_kind(&format!("spec.owns[{i}]"), k)?;
        if spec.for_kind.is_none() {
            return problem(
                &format!("spec.owns[{i}]"),
                "owned kinds map to their controller owner of the `for` kind, so `for` is required"
                    .into(),
            );
        }
    }
    for (i, w) in spec.watches.iter().enumerate() {
        let field = format!("spec.watches[{i}]");
        validate_kind(&field, &w.kind_ref())?;
        let mappings = [
            w.map_to.is_some(),
            w.map_by_label.is_some(),
            w.map_by_annotation.is_some(),
            w.map_to_namespace,
            w.map_to_owner.is_some(),
            w.map_by_guest,
        ];
        if mappings.iter().filter(|m| **m).count() != 1 {
            return problem(
                &field,
                "needs exactly one of mapTo, mapByLabel, mapByAnnotation, mapToNamespace, mapToOwner or mapByGuest".into(),
            );
        }
        if let Some(m) = &w.map_to {
            validate_request(&format!("{field}.mapTo"), m)?;
        }
        if let Some(owner) = &w.map_to_owner {
            validate_kind(&format!("{field}.mapToOwner"), owner)?;
        }
        for (name, mapping) in [
            ("mapByLabel", &w.map_by_label),
            ("mapByAnnotation", &w.map_by_annotation),
        ] {
            if let Some(m) = mapping
                && m.key.is_empty()
            {
                return problem(&format!("{field}.{name}.key"), "must not be empty".into());
            }
        }
    }
    for (i, p) in spec.predicates.iter().enumerate() {
        if let Predicate::LabelSelector(s) = p
            && let Err(e) = LabelSelector::parse(s)
        {
            return problem(
                &format!("spec.predicates[{i}].labelSelector"),
                e.to_string(),
            );
        }
    }
    for (i, ns) in spec.namespaces.iter().enumerate() {
        if !is_dns_label(ns) {
            return problem(
                &format!("spec.namespaces[{i}]"),
                format!("{ns:?} is not a valid namespace"),
            );
        }
    }
    if spec.max_concurrent_reconciles == 0
        || spec.max_concurrent_reconciles > MAX_CONCURRENT_RECONCILES
    {
        return problem(
            "spec.maxConcurrentReconciles",
            format!(
                "must be between 1 and {MAX_CONCURRENT_RECONCILES} (got {})",
                spec.max_concurrent_reconciles
            ),
        );
    }
    let rl = &spec.rate_limiter;
    if rl.base_delay < Duration::from_millis(1) || rl.base_delay > rl.max_delay {
        return problem(
            "spec.rateLimiter.baseDelay",
            "must be at least 1ms and at most maxDelay".into(),
        );
    }
    if rl.max_delay > MAX_PERIOD {
        return problem(
            "spec.rateLimiter.maxDelay",
            format!("must be at most {}", show_duration(MAX_PERIOD)),
        );
    }
    if !(rl.qps.is_finite() && rl.qps > 0.0 && rl.qps <= MAX_QPS) {
        return problem(
            "spec.rateLimiter.qps",
            format!("must be a positive number, at most {MAX_QPS}"),
        );
    }
    if rl.burst == 0 || rl.burst > MAX_BURST {
        return problem(
            "spec.rateLimiter.burst",
            format!("must be between 1 and {MAX_BURST}"),
        );
    }
    if let Some(period) = spec.resync_period
        && !(MIN_PERIOD..=MAX_PERIOD).contains(&period)
    {
        return problem(
            "spec.resyncPeriod",
            format!(
                "must be between {} and {}",
                show_duration(MIN_PERIOD),
                show_duration(MAX_PERIOD)
            ),
        );
    }
    if spec.tickers.len() > MAX_TICKERS {
        return problem(
            "spec.tickers",
            format!("at most {MAX_TICKERS} tickers (got {})", spec.tickers.len()),
        );
    }
    for (i, t) in spec.tickers.iter().enumerate() {
        if !(MIN_TICKER..=MAX_PERIOD).contains(&t.every) {
            return problem(
                &format!("spec.tickers[{i}].every"),
                format!(
                    "must be between {} and {}",
                    show_duration(MIN_TICKER),
                    show_duration(MAX_PERIOD)
                ),
            );
        }
        validate_request(&format!("spec.tickers[{i}].request"), &t.request)?;
    }
    if spec.for_kind.is_none()
        && spec.watches.is_empty()
        && spec.tickers.is_empty()
        && spec.webhooks.is_empty()
        && spec.conversion.is_none()
    {
        return problem(
            "spec",
            "nothing would call the guest: set `for`, `watches`, `tickers`, `webhooks` or `conversion`"
                .into(),
        );
    }
    validate_webhooks(&spec.webhooks)?;
    if let Some(conversion) = &spec.conversion {
        let crd = &conversion.crd;
        let labels = crd.split('.').count();
        if labels < 3 || !is_dns_subdomain(crd) {
            return problem(
                "spec.conversion.crd",
                format!(
                    "{crd:?} is not a CRD name: {{plural}}.{{group}}, e.g. foos.samplecontroller.k8s.io"
                ),
            );
        }
    }
    if spec.limits.timeout.is_zero() || spec.limits.timeout > MAX_TIMEOUT {
        return problem(
            "spec.limits.timeout",
            format!(
                "must be positive and at most {}",
                show_duration(MAX_TIMEOUT)
            ),
        );
    }
    if !(MIN_MEMORY..=MAX_MEMORY).contains(&spec.limits.memory) {
        return problem(
            "spec.limits.memory",
            "must be between 1Mi and 4Gi (a wasm32 guest addresses at most 4Gi)".into(),
        );
    }
    if !(MIN_CPU..=MAX_CPU).contains(&spec.limits.cpu) {
        return problem(
            "spec.limits.cpu",
            format!("must be between 10m and {MAX_CPU} cores"),
        );
    }
    let max_rate = f64::from(MAX_WRITE_RATE);
    if !(spec.limits.write_qps.is_finite()
        && spec.limits.write_qps > 0.0
        && spec.limits.write_qps <= max_rate)
    {
        return problem(
            "spec.limits.writeQps",
            format!("must be a positive number, at most {MAX_WRITE_RATE}"),
        );
    }
    if spec.limits.write_burst == 0 || spec.limits.write_burst > MAX_WRITE_RATE {
        return problem(
            "spec.limits.writeBurst",
            format!("must be between 1 and {MAX_WRITE_RATE}"),
        );
    }
    for (i, k) in spec.uncached.iter().enumerate() {
        validate_kind(&format!("spec.uncached[{i}]"), k)?;
    }
    for (i, p) in spec.permissions.iter().enumerate() {
        let field = format!("spec.permissions[{i}]");
        validate_kind(
            &field,
            &KindRef {
                api_version: p.api_version.clone(),
                kind: p.kind.clone(),
            },
        )?;
        if p.verbs.is_empty() {
            return problem(
                &format!("{field}.verbs"),
                "must list at least one verb".into(),
            );
        }
        let gvk = Gvk::from_api_version(&p.api_version, &p.kind);
        if !p.namespaces.is_empty() && is_builtin_cluster_scoped(&gvk) {
            return problem(
                &format!("{field}.namespaces"),
                cluster_scoped_namespaces(&gvk),
            );
        }
        for (j, ns) in p.namespaces.iter().enumerate() {
            if !is_dns_label(ns) {
                return problem(
                    &format!("{field}.namespaces[{j}]"),
                    format!("{ns:?} is not a valid namespace"),
                );
            }
        }
    }
    Ok(())
}

/// Group and kind of the cluster-scoped kinds Kubernetes serves itself (any version). A
/// permission's `namespaces` cannot restrict them; custom resources are checked against
/// discovery when the guest starts.
const CLUSTER_SCOPED_BUILTINS: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "ComponentStatus"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicyBinding",
    ),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("storage.k8s.io", "VolumeAttributesClass"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("networking.k8s.io", "IngressClass"),
    ("networking.k8s.io", "IPAddress"),
    ("networking.k8s.io", "ServiceCIDR"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("resource.k8s.io", "DeviceClass"),
    ("resource.k8s.io", "ResourceSlice"),
];

/// Whether `gvk` is one of Kubernetes' own cluster-scoped kinds.
pub fn is_builtin_cluster_scoped(gvk: &Gvk) -> bool {
    CLUSTER_SCOPED_BUILTINS
        .iter()
        .any(|(group, kind)| gvk.group == *group && gvk.kind == *kind)
}

/// The problem with `namespaces` on a permission for the cluster-scoped kind `gvk`.
pub fn cluster_scoped_namespaces(gvk: &Gvk) -> String {
    format!(
        "{gvk} is cluster-scoped, so a namespace cannot restrict it: remove `namespaces` (the \
         permission then covers every {} in the cluster) or drop the permission",
        gvk.kind
    )
}

fn validate_request(field: &str, r: &RequestSpec) -> Result<(), FieldProblem> {
    if !is_dns_subdomain(&r.name) {
        return Err(FieldProblem(
            format!("{field}.name"),
            format!("{:?} is not a valid object name", r.name),
        ));
    }
    if let Some(ns) = &r.namespace
        && !is_dns_label(ns)
    {
        return Err(FieldProblem(
            format!("{field}.namespace"),
            format!("{ns:?} is not a valid namespace"),
        ));
    }
    Ok(())
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

fn de_opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}

fn de_quantity<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Int(u64),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Int(n) => Ok(n),
        Raw::Text(t) => parse_quantity(&t).map_err(serde::de::Error::custom),
    }
}

/// A duration or quantity that does not parse; says what was given and what is expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnitError(String);

/// Parse a Go-style duration: `300ms`, `5s`, `1m30s`, `1.5h`. Units: ns, us, µs, ms, s, m, h.
///
/// # Errors
///
/// A [`UnitError`] saying what is expected.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    krec_apiserver::duration::parse(text).map_err(UnitError)
}

fn de_cpu<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(f64),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Number(n) => Ok(n),
        Raw::Text(t) => parse_cpu(&t).map_err(serde::de::Error::custom),
    }
}

/// Parse a Kubernetes CPU quantity into cores: `500m`, `1`, `1.5`, `2000m`.
///
/// # Errors
///
/// A [`UnitError`] saying what is expected.
pub fn parse_cpu(text: &str) -> Result<f64, UnitError> {
    let bad = || {
        UnitError(format!(
            "invalid CPU quantity {text:?}: expected e.g. 500m, 1 or 1.5"
        ))
    };
    let t = text.trim();
    let (number, scale) = match t.strip_suffix('m') {
        Some(milli) => (milli, 1e-3),
        None => (t, 1.0),
    };
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad());
    }
    let value: f64 = number.parse().map_err(|_| bad())?;
    Ok(value * scale)
}

/// Parse a Kubernetes quantity of bytes: `64Mi`, `1Gi`, `500M`, `1048576`.
///
/// # Errors
///
/// A [`UnitError`] saying what is expected.
pub fn parse_quantity(text: &str) -> Result<u64, UnitError> {
    let bad = || {
        UnitError(format!(
            "invalid quantity {text:?}: expected e.g. 64Mi, 1Gi or 500M"
        ))
    };
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let mult: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GOOD: &str = r#"
apiVersion: krec.dev/v1alpha1
kind: Reconciler
metadata: { name: pod-counter }
spec:
  module: ../target/pod_counter.wasm
  for: { apiVersion: apps/v1, kind: ReplicaSet }
  owns: [ { apiVersion: v1, kind: Pod } ]
  watches:
    - { apiVersion: v1, kind: ConfigMap, mapTo: { namespace: bbb, name: abc } }
  predicates: [ GenerationChanged, { labelSelector: "app=web" }, { eventTypes: [create, update] } ]
  namespaces: [ default ]
  maxConcurrentReconciles: 2
  rateLimiter: { baseDelay: 5ms, maxDelay: 1000s, qps: 10, burst: 100 }
  resyncPeriod: 10m
  tickers: [ { every: 1m30s, request: { name: tick } } ]
  limits: { timeout: 5s, memory: 64Mi, cpu: 500m, writeQps: 20, writeBurst: 30 }
  isolation: per-reconcile
  permissions:
    - { apiVersion: v1, kind: Pod, verbs: [get, list] }
    - { apiVersion: apps/v1, kind: ReplicaSet, verbs: [get, list, update], namespaces: [default] }
"#;

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(Path::new("dir/m.yaml"), text)
    }

    #[test]
    fn parse_should_accept_every_documented_field() {
        let m = parse(GOOD).expect("valid manifest");
        assert_eq!(m.name, "pod-counter");
        assert_eq!(m.spec.module, Path::new("dir/../target/pod_counter.wasm"));
        assert_eq!(m.spec.max_concurrent_reconciles, 2);
        assert_eq!(m.spec.resync_period, Some(Duration::from_secs(600)));
        assert_eq!(m.spec.tickers[0].every, Duration::from_secs(90));
        assert_eq!(m.spec.limits.memory, 64 << 20);
        assert_eq!(m.spec.limits.cpu, 0.5);
        assert_eq!(m.spec.limits.write_qps, 20.0);
        assert_eq!(m.spec.limits.write_burst, 30);
        assert_eq!(m.spec.isolation, Isolation::PerReconcile);
        assert_eq!(m.spec.predicates.len(), 3);
        let rs = Gvk::new("apps", "v1", "ReplicaSet");
        assert!(m.allows(Verb::Update, &rs, Some("default")));
        assert!(!m.allows(Verb::Update, &rs, Some("other")));
        assert!(
            !m.allows(Verb::Update, &rs, None),
            "all-namespace access needs an unrestricted permission"
        );
        assert!(!m.allows(Verb::Delete, &rs, Some("default")));
        assert!(m.allows(Verb::List, &Gvk::new("", "v1", "Pod"), None));
    }

    #[test]
    fn errors_should_name_file_field_and_problem() {
        let cases = [
            (
                GOOD.replace("memory: 64Mi", "memory: 64Xi"),
                "dir/m.yaml: spec.limits.memory: invalid quantity \"64Xi\"",
            ),
            (
                GOOD.replace("timeout: 5s", "timeout: 5 parsecs"),
                "spec.limits.timeout: invalid duration",
            ),
            (
                GOOD.replace("maxConcurrentReconciles: 2", "maxConcurrentReconciles: 0"),
                "spec.maxConcurrentReconciles: must be between 1 and 256 (got 0)",
            ),
            // Every number has an upper bound: an absurd one is refused here, not by the
            // host aborting on an allocation (issue 18).
            (
                GOOD.replace(
                    "maxConcurrentReconciles: 2",
                    "maxConcurrentReconciles: 4000000000",
                ),
                "spec.maxConcurrentReconciles: must be between 1 and 256 (got 4000000000)",
            ),
            (
                GOOD.replace("memory: 64Mi", "memory: 1000000Gi"),
                "spec.limits.memory: must be between 1Mi and 4Gi",
            ),
            (
                GOOD.replace("cpu: 500m", "cpu: 1000"),
                "spec.limits.cpu: must be between 10m and 64 cores",
            ),
            (
                GOOD.replace("cpu: 500m", "cpu: lots"),
                "spec.limits.cpu: invalid CPU quantity \"lots\"",
            ),
            (
                GOOD.replace("writeQps: 20", "writeQps: 0"),
                "spec.limits.writeQps: must be a positive number, at most 100000",
            ),
            (
                GOOD.replace("timeout: 5s", "timeout: 600s"),
                "spec.limits.timeout: must be positive and at most 300s",
            ),
            (
                GOOD.replace("resyncPeriod: 10m", "resyncPeriod: 1ms"),
                "spec.resyncPeriod: must be between 1s and 720h",
            ),
            (
                GOOD.replace("every: 1m30s", "every: 100000000h"),
                "spec.tickers[0].every: must be between 100ms and 720h",
            ),
            (
                GOOD.replace("GenerationChanged,", "GenerationChnaged,"),
                "spec.predicates[0]: unknown predicate \"GenerationChnaged\"",
            ),
            (
                GOOD.replace("isolation: per-reconcile", "isolation: sometimes"),
                "spec.isolation",
            ),
            (
                GOOD.replace("resyncPeriod", "resyncPeriode"),
                "spec.resyncPeriode: unknown field `resyncPeriode`, expected one of",
            ),
            (
                GOOD.replace("name: pod-counter", "name: Pod_Counter"),
                "metadata.name: \"Pod_Counter\" is not a valid guest name",
            ),
            (
                GOOD.replace("kind: Reconciler", "kind: Reconciller"),
                "kind: expected \"Reconciler\"",
            ),
            (
                GOOD.replace("verbs: [get, list]", "verbs: [get, lsit]"),
                "spec.permissions[0].verbs[1]: unknown variant `lsit`",
            ),
            (
                GOOD.replace(
                    "mapTo: { namespace: bbb, name: abc }",
                    "mapTo: { name: abc }, mapByLabel: { key: x }",
                ),
                "spec.watches[0]: needs exactly one of mapTo, mapByLabel, mapByAnnotation, mapToNamespace, mapToOwner or mapByGuest",
            ),
            (
                GOOD.replace("app=web", "app in (web"),
                "spec.predicates[1].labelSelector: invalid selector",
            ),
            ("not: [valid".to_owned(), "dir/m.yaml: "),
        ];
        for (text, expected) in cases {
            let err = parse(&text).expect_err(expected).to_string();
            assert!(err.contains(expected), "expected {expected:?} in {err:?}");
            assert!(err.starts_with("dir/m.yaml"), "{err}");
        }
    }

    #[test]
    fn a_manifest_should_need_a_trigger() {
        let text = "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: idle}\nspec: {module: x.wasm}\n";
        let err = parse(text).expect_err("no trigger").to_string();
        assert!(err.contains("nothing would call the guest"), "{err}");
    }

    #[test]
    fn config_should_get_its_schemas_defaults_and_be_checked_against_it() {
        let with = |config: &str| {
            parse(&format!(
                "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: t}}\nspec:\n  module: x.wasm\n  for: {{apiVersion: v1, kind: Namespace}}\n{config}  configSchema:\n    type: object\n    properties:\n      annotation: {{type: string, pattern: '^[a-z.]+/[a-z]+$'}}\n      period: {{type: integer, minimum: 1, default: 30}}\n      tiers: {{type: array, items: {{type: object, properties: {{name: {{type: string}}}}}}}}\n      extra: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n    required: [annotation]\n"
            ))
        };
        let manifest =
            with("  config: {annotation: example.com/x, extra: {any: [1]}}\n").expect("valid");
        assert_eq!(
            manifest.spec.config,
            Some(json!({"annotation": "example.com/x", "period": 30, "extra": {"any": [1]}}))
        );
        for (config, expected) in [
            ("", "spec.config.annotation: Required value"),
            ("  config: {annotation: nope}\n", "spec.config.annotation: "),
            (
                "  config: {annotation: a.b/c, period: 0}\n",
                "spec.config.period: ",
            ),
            (
                "  config: {annotation: a.b/c, period: x}\n",
                "spec.config.period: ",
            ),
            (
                "  config: {annotation: a.b/c, colour: red}\n",
                "spec.config.colour: unknown field",
            ),
            (
                "  config: {annotation: a.b/c, tiers: [{name: a, size: 1}]}\n",
                "spec.config.tiers[0].size: unknown field",
            ),
        ] {
            let err = with(config)
                .err()
                .unwrap_or_else(|| panic!("{config:?} should be refused"))
                .to_string();
            assert!(
                err.starts_with("dir/m.yaml: ") && err.contains(expected),
                "{config:?}: {err}"
            );
        }
        let err = with("  config: {annotation: a.b/c, period: 0}\n")
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains("spec.configSchema"),
            "names the rule's origin: {err}"
        );
    }

    #[test]
    fn webhooks_should_be_validated_naming_the_field() {
        let manifest = |webhooks: &str| {
            format!(
                "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: hooks}}\nspec:\n  module: x.wasm\n  webhooks: {webhooks}\n"
            )
        };
        let rule = "{apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [CREATE]}";
        let ok = parse(&manifest(&format!("[{{type: mutating, rules: [{rule}]}}]")))
            .expect("a webhook alone is a trigger");
        assert_eq!(
            ok.spec.webhooks[0].name_for("hooks"),
            "mutating.hooks.krec.dev"
        );
        let cases = [
            (
                format!("[{{type: validating, rules: [{rule}], failurePolicy: Sometimes}}]"),
                "spec.webhooks[0].failurePolicy",
            ),
            (
                format!("[{{type: validating, rules: [{rule}]}}, {{type: validating, rules: [{rule}]}}]"),
                "spec.webhooks[1].name: two webhooks of this type",
            ),
            ("[{type: validating, rules: []}]".to_owned(), "spec.webhooks[0].rules"),
            (
                format!("[{{type: validating, rules: [{rule}], timeoutSeconds: 31}}]"),
                "spec.webhooks[0].timeoutSeconds",
            ),
            (
                format!("[{{type: validating, name: short, rules: [{rule}]}}]"),
                "spec.webhooks[0].name",
            ),
            (
                "[{type: validating, rules: [{apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [GET]}]}]".to_owned(),
                "spec.webhooks[0].rules[0].operations",
            ),
        ];
        for (webhooks, expected) in cases {
            let err = parse(&manifest(&webhooks)).expect_err(expected).to_string();
            assert!(err.contains(expected), "expected {expected:?} in {err:?}");
        }
    }

    #[test]
    fn durations_and_quantities_should_parse_like_kubernetes() {
        assert_eq!(parse_duration("5ms"), Ok(Duration::from_millis(5)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("-5s").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(parse_quantity("64Mi"), Ok(64 << 20));
        assert_eq!(parse_quantity("500M"), Ok(500_000_000));
        assert_eq!(parse_quantity("1024"), Ok(1024));
        assert!(parse_quantity("64XB").is_err());
        assert!(parse_quantity("99999999999999Gi").is_err());
    }

    proptest::proptest! {
        /// Manifest text is untrusted input (a file dropped on a guest volume): any text, and
        /// any single-line change of a valid manifest, parses or fails with an error naming
        /// the file, and never panics.
        #[test]
        fn any_manifest_text_should_parse_or_be_refused(text in ".{0,300}") {
            if let Err(err) = Manifest::parse(Path::new("m.yaml"), &text) {
                proptest::prop_assert!(err.to_string().starts_with("m.yaml"));
            }
        }

        #[test]
        fn numbers_and_units_should_parse_or_be_refused(text in "[0-9.]{0,40}(ns|us|ms|s|m|h|Ki|Mi|Gi|k|M|G|x|)") {
            let _ = parse_duration(&text);
            let _ = parse_quantity(&text);
            let _ = parse_cpu(&text);
        }

        #[test]
        fn a_changed_line_of_a_valid_manifest_should_parse_or_be_refused(
            line in 0usize..40,
            replacement in "[ -~]{0,60}",
        ) {
            let mut lines: Vec<String> = GOOD.lines().map(str::to_owned).collect();
            if line < lines.len() {
                lines[line] = replacement;
            }
            let text = lines.join("\n");
            if let Err(err) = Manifest::parse(Path::new("dir/m.yaml"), &text) {
                proptest::prop_assert!(err.to_string().starts_with("dir/m.yaml"));
            }
        }
    }
}
