//! The manifest's types: what a `Reconciler` says, with its defaults and bounds.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use krec_core::{EventKind, Gvk};

use super::RolloutSpec;
use super::units::{de_cpu, de_duration, de_opt_duration, de_opt_quantity, de_quantity};

/// A validated manifest, with its module path resolved against the manifest's directory.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    /// Where the manifest was read from.
    pub path: PathBuf,
    /// The guest's name (`metadata.name`): names its logs, metrics, field manager and Events.
    pub name: String,
    /// The guest's configuration.
    pub spec: ReconcilerSpec,
    /// For a namespaced `Reconciler` object, its namespace: the guest is confined to it (see
    /// [`crate::manifest::tenancy`]). `None` for files and `ClusterReconciler`s.
    pub tenant: Option<String>,
    /// The registry module `spec.module` names (`oci://…`), once pulled into a file (see
    /// `guests::oci`); `spec` stays as it was written. [`Manifest::module_file`] is the file
    /// the guest runs.
    pub pulled: Option<PulledModule>,
    /// The registry module `spec.rollout.candidate` names, once pulled.
    pub candidate_pulled: Option<PulledModule>,
    /// Whether this is a rollout's candidate (its logs say `version=candidate`), not the live
    /// version.
    pub candidate: bool,
}

/// A module pulled from a registry: the reference it was named by, the file it is kept in
/// and the digest of the artifact it was pulled as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PulledModule {
    /// The `oci://` reference, as the manifest writes it.
    pub reference: PathBuf,
    /// Where the component is kept.
    pub file: PathBuf,
    /// The digest of the registry artifact (its manifest's) — what `krec push` prints and an
    /// `oci://…@sha256:` reference names.
    pub artifact_digest: Option<String>,
}

impl Manifest {
    /// The digest to show for the module whose file has `file_digest`: its artifact's when it
    /// was pulled (what a rollback names), else the file's.
    pub fn shown_digest<'a>(&'a self, file_digest: &'a str) -> &'a str {
        self.pulled_module()
            .and_then(|p| p.artifact_digest.as_deref())
            .unwrap_or(file_digest)
    }

    /// The registry module `spec.module` names, if it was pulled.
    pub fn pulled_module(&self) -> Option<&PulledModule> {
        self.pulled
            .as_ref()
            .filter(|p| p.reference == self.spec.module)
    }

    /// The file the guest runs: `spec.module`, or the file the registry module it names was
    /// pulled into.
    pub fn module_file(&self) -> &Path {
        self.pulled_module().map_or(&self.spec.module, |p| &p.file)
    }

    /// The file `spec.rollout`'s candidate runs from: the candidate as written, or the file the
    /// registry module it names was pulled into. `None` without `spec.rollout`.
    pub fn candidate_file(&self) -> Option<&Path> {
        let rollout = self.spec.rollout.as_ref()?;
        Some(
            self.candidate_pulled
                .as_ref()
                .filter(|p| p.reference == rollout.candidate)
                .map_or(&rollout.candidate, |p| &p.file),
        )
    }

    /// `live` or `candidate`: the `version` field of the guest's log lines.
    pub fn version_role(&self) -> &'static str {
        if self.candidate { "candidate" } else { "live" }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawManifest {
    pub(super) api_version: String,
    pub(super) kind: String,
    pub(super) metadata: RawMetadata,
    pub(super) spec: ReconcilerSpec,
}

#[derive(Deserialize)]
pub(super) struct RawMetadata {
    pub(super) name: String,
    #[serde(flatten)]
    pub(super) _rest: serde_yaml_ng::Mapping,
}

/// `spec` of a manifest. Field names are those of the YAML, in camelCase.
#[derive(Clone, Debug, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReconcilerSpec {
    /// Path of the `.wasm` component; relative paths are resolved against the manifest's directory.
    #[schemars(with = "String")]
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
    #[serde(default)]
    pub max_concurrent_reconciles: Concurrency,
    /// Retry backoff and overall rate limit.
    #[serde(default)]
    pub rate_limiter: RateLimiterSpec,
    /// Re-enqueue every object of the `for` kind this often.
    #[serde(default, deserialize_with = "de_opt_duration")]
    #[schemars(with = "Option<String>")]
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
    /// How a module from a registry (`module: oci://…`) is pulled.
    #[serde(default)]
    pub pull: PullSpec,
    /// A `kubernetes.io/dockerconfigjson` Secret holding the registry's credentials (as a Pod's
    /// `imagePullSecrets`); a `Reconciler`'s is in its own namespace.
    #[serde(default)]
    pub pull_secret: Option<SecretRef>,
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
    #[schemars(schema_with = "crate::manifest::schema::any_value")]
    pub config: Option<serde_json::Value>,
    /// An OpenAPI v3 schema (as a CRD's `openAPIV3Schema`) `config` must match: types,
    /// `required`, `enum`, bounds, patterns, `default`s; fields it does not declare are refused
    /// unless `additionalProperties` or `x-kubernetes-preserve-unknown-fields` allows them.
    #[serde(default)]
    #[schemars(schema_with = "crate::manifest::schema::any_object")]
    pub config_schema: Option<serde_json::Value>,
    /// A candidate version run beside this one: in `shadow` mode on every request after the
    /// live version, its writes sent as dry runs and compared; in `canary` mode for real on a
    /// share of the keys. Promoted or rolled back by its policy (see [`crate::rollout`]).
    #[serde(default)]
    pub rollout: Option<RolloutSpec>,
}

/// A CRD conversion webhook the guest serves.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConversionSpec {
    /// The CRD's name, `{plural}.{group}` (e.g. `foos.samplecontroller.k8s.io`).
    pub crd: String,
}

/// Whether a webhook judges or changes objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
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
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema, serde::Serialize)]
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
#[derive(Clone, Debug, PartialEq, Deserialize, schemars::JsonSchema)]
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
    #[schemars(schema_with = "crate::manifest::schema::any_object")]
    pub namespace_selector: Option<serde_json::Value>,
    /// A label selector on the object.
    #[serde(default)]
    #[schemars(schema_with = "crate::manifest::schema::any_object")]
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

/// `maxConcurrentReconciles`: between 1 and [`MAX_CONCURRENT_RECONCILES`], checked when the
/// manifest is read, so a running guest never has zero (or absurdly many) workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Concurrency(std::num::NonZeroU32);

impl Concurrency {
    /// One worker: the default.
    pub const ONE: Concurrency = Concurrency(std::num::NonZeroU32::MIN);

    /// `workers`, if it is between 1 and [`MAX_CONCURRENT_RECONCILES`].
    pub fn new(workers: u64) -> Option<Self> {
        u32::try_from(workers)
            .ok()
            .filter(|w| *w <= MAX_CONCURRENT_RECONCILES)
            .and_then(std::num::NonZeroU32::new)
            .map(Concurrency)
    }

    /// The number of workers.
    pub fn get(self) -> u32 {
        self.0.get()
    }

    /// The number of workers, as a count of tasks.
    pub fn workers(self) -> usize {
        usize::try_from(self.0.get()).unwrap_or(1)
    }
}

impl Default for Concurrency {
    fn default() -> Self {
        Concurrency::ONE
    }
}

impl schemars::JsonSchema for Concurrency {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Concurrency".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "integer", "minimum": 1,
            "maximum": MAX_CONCURRENT_RECONCILES, "default": 1})
    }
}

impl<'de> Deserialize<'de> for Concurrency {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let workers = u64::deserialize(deserializer)?;
        Concurrency::new(workers).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "must be between 1 and {MAX_CONCURRENT_RECONCILES} (got {workers})"
            ))
        })
    }
}

/// A kind, written as `{ apiVersion: apps/v1, kind: ReplicaSet }`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KindRef {
    /// `v1`, `apps/v1`, `samplecontroller.k8s.io/v1alpha1`, ...
    pub api_version: String,
    /// CamelCase kind.
    pub kind: String,
    /// In `for` and `owns`: watch and cache only the objects' metadata (`PartialObjectMetadata`,
    /// as controller-runtime's `builder.OnlyMetadata`); the guest's cached reads of the kind get
    /// `apiVersion`, `kind` and `metadata` alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub metadata_only: bool,
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
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    /// Namespace; omitted for cluster-scoped or namespace-less requests.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

/// A watch on another kind and how its events map to requests.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
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
    /// Watch and cache only the objects' metadata (see [`KindRef::metadata_only`]); a `map`
    /// export gets the metadata alone.
    #[serde(default)]
    pub metadata_only: bool,
}

impl Watch {
    /// The watched kind.
    pub fn kind_ref(&self) -> KindRef {
        KindRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            metadata_only: self.metadata_only,
        }
    }
}

/// Map an object to the request named by one of its labels (or annotations).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LabelMapping {
    /// The label (or annotation) whose value names the request: `name`, or `namespace/name`;
    /// objects without it map to nothing.
    pub key: String,
    /// The request's namespace; default: the object's namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// A second label (or annotation) whose value names the request's namespace, for requests
    /// in other namespaces than the object's — a label's value cannot hold `namespace/name`.
    /// Objects without it use `namespace`, else their own.
    #[serde(default, rename = "namespaceKey")]
    pub namespace_key: Option<String>,
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

/// A predicate is a name or a one-key map: a value a structural schema cannot type, kept as
/// written and read by the host.
impl schemars::JsonSchema for Predicate {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Predicate".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"x-kubernetes-preserve-unknown-fields": true,
            "description": "GenerationChanged, LabelsChanged, AnnotationsChanged, ResourceVersionChanged, { labelSelector: ... } or { eventTypes: [create, update, delete, generic] }"})
    }
}

impl<'de> Deserialize<'de> for Predicate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        struct Map {
            #[serde(default)]
            label_selector: Option<Selector>,
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
            }) => Ok(Predicate::LabelSelector(
                s.text().map_err(D::Error::custom)?,
            )),
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

/// A label selector as a predicate takes it: the text form (`app=web,tier!=db`) or Kubernetes'
/// `{matchLabels, matchExpressions}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Selector {
    Text(String),
    Structured(StructuredSelector),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct StructuredSelector {
    #[serde(default)]
    match_labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    match_expressions: Vec<SelectorRequirement>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SelectorRequirement {
    key: String,
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

/// Why a structured label selector has no text form.
#[derive(Debug, thiserror::Error)]
enum SelectorError {
    /// `In` or `NotIn` without values (key, operator).
    #[error("labelSelector: {0} {1}: values must be non-empty")]
    ValuesRequired(String, String),
    /// `Exists` or `DoesNotExist` with values (key, operator).
    #[error("labelSelector: {0} {1}: values must be empty")]
    ValuesForbidden(String, String),
    /// An operator that is none of the four.
    #[error("labelSelector: {0:?} is not a valid operator: In, NotIn, Exists or DoesNotExist")]
    Operator(String),
}

impl Selector {
    /// The text form (what `kubectl get -l` takes), as `metav1.LabelSelectorAsSelector` reads
    /// the structured one.
    fn text(self) -> Result<String, SelectorError> {
        let structured = match self {
            Selector::Text(text) => return Ok(text),
            Selector::Structured(s) => s,
        };
        let mut parts: Vec<String> = structured
            .match_labels
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for r in structured.match_expressions {
            if matches!(r.operator.as_str(), "In" | "NotIn") && r.values.is_empty() {
                return Err(SelectorError::ValuesRequired(r.key, r.operator));
            }
            let values = r.values.join(",");
            parts.push(match r.operator.as_str() {
                "In" => format!("{} in ({values})", r.key),
                "NotIn" => format!("{} notin ({values})", r.key),
                "Exists" if r.values.is_empty() => r.key,
                "DoesNotExist" if r.values.is_empty() => format!("!{}", r.key),
                "Exists" | "DoesNotExist" => {
                    return Err(SelectorError::ValuesForbidden(r.key, r.operator));
                }
                _ => return Err(SelectorError::Operator(r.operator)),
            });
        }
        Ok(parts.join(","))
    }
}

/// Per-guest workqueue rate limiting: per-key exponential backoff and an overall token bucket.
#[derive(Clone, Debug, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RateLimiterSpec {
    /// First retry delay of a failing key; doubles on each failure.
    #[serde(default = "default_base_delay", deserialize_with = "de_duration")]
    #[schemars(with = "String", default = "base_delay_text")]
    pub base_delay: Duration,
    /// Cap of the per-key delay.
    #[serde(default = "default_max_delay", deserialize_with = "de_duration")]
    #[schemars(with = "String", default = "max_delay_text")]
    pub max_delay: Duration,
    /// Overall rate of rate-limited adds, per second.
    #[serde(default = "default_qps")]
    pub qps: f64,
    /// Token bucket size.
    #[serde(default = "default_burst")]
    pub burst: u32,
}

fn base_delay_text() -> String {
    show_duration(default_base_delay())
}
fn max_delay_text() -> String {
    show_duration(default_max_delay())
}
fn timeout_text() -> String {
    show_duration(default_timeout())
}
fn memory_text() -> String {
    format!("{}Mi", DEFAULT_MEMORY >> 20)
}
fn cpu_text() -> String {
    "1".into()
}

pub(super) fn default_base_delay() -> Duration {
    Duration::from_millis(5)
}
pub(super) fn default_max_delay() -> Duration {
    Duration::from_secs(1000)
}
pub(super) fn default_qps() -> f64 {
    10.0
}
pub(super) fn default_burst() -> u32 {
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
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ticker {
    /// Period, e.g. `10m`.
    #[serde(deserialize_with = "de_duration")]
    #[schemars(with = "String")]
    pub every: Duration,
    /// The request to enqueue.
    pub request: RequestSpec,
}

/// Sandbox limits of one reconcile.
#[derive(Clone, Debug, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Limits {
    /// Wall-clock limit of one reconcile, enforced by epoch interruption.
    #[serde(default = "default_timeout", deserialize_with = "de_duration")]
    #[schemars(with = "String", default = "timeout_text")]
    pub timeout: Duration,
    /// Total linear memory of the guest in bytes, over all its memories (a Kubernetes quantity:
    /// `64Mi`).
    #[serde(default = "default_memory", deserialize_with = "de_quantity")]
    #[schemars(
        schema_with = "crate::manifest::schema::quantity",
        default = "memory_text"
    )]
    pub memory: u64,
    /// Most linear memory all the guest's instances hold at once — its workers', its kept
    /// review and map instances' — in bytes (a Kubernetes quantity). A growth past it traps
    /// out-of-memory, as one past `memory` does. Unset: see [`ReconcilerSpec::total_memory`].
    #[serde(default, deserialize_with = "de_opt_quantity")]
    #[schemars(schema_with = "crate::manifest::schema::quantity")]
    pub total_memory: Option<u64>,
    /// Most CPU the guest's code may use, in cores (a Kubernetes CPU quantity: `500m`, `1`),
    /// over all its workers. When guests compete for the host's CPU each gets at most an equal
    /// share of it; see [`crate::guest::CpuGovernor`].
    #[serde(default = "default_cpu", deserialize_with = "de_cpu")]
    #[schemars(
        schema_with = "crate::manifest::schema::quantity",
        default = "cpu_text"
    )]
    pub cpu: f64,
    /// Writes (create, update, patch, delete, Events) per second the guest may send to the
    /// API server, over all its workers: client-go's `QPS`.
    #[serde(default = "default_write_qps")]
    pub write_qps: f64,
    /// Writes the guest may send at once before `writeQps` applies: client-go's `Burst`.
    #[serde(default = "default_write_burst")]
    pub write_burst: u32,
}

pub(super) fn default_true() -> bool {
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
pub(super) fn show_duration(d: Duration) -> String {
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

pub(super) fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}
pub(super) fn default_memory() -> u64 {
    DEFAULT_MEMORY
}
pub(super) fn default_cpu() -> f64 {
    DEFAULT_CPU
}
pub(super) fn default_write_qps() -> f64 {
    DEFAULT_WRITE_QPS
}
pub(super) fn default_write_burst() -> u32 {
    DEFAULT_WRITE_BURST
}

impl ReconcilerSpec {
    /// The budget of all the guest's instances together: `limits.totalMemory`, or
    /// [`TOTAL_MEMORY_INSTANCES`] instances at `limits.memory` — at least
    /// [`MEMORY_PER_INSTANCE`] for each worker and each kept review instance.
    pub fn total_memory(&self) -> u64 {
        self.limits.total_memory.unwrap_or_else(|| {
            let instances = u64::from(self.max_concurrent_reconciles.get()) + KEPT_REVIEW_INSTANCES;
            self.limits
                .memory
                .saturating_mul(TOTAL_MEMORY_INSTANCES)
                .max(instances.saturating_mul(MEMORY_PER_INSTANCE))
        })
    }
}

/// How many instances at `limits.memory` a guest's instances may hold together when
/// `limits.totalMemory` is not set.
pub const TOTAL_MEMORY_INSTANCES: u64 = 4;
/// What the default `limits.totalMemory` leaves at least for each instance a guest keeps (a
/// Rust guest idles at 1–3 MiB).
pub const MEMORY_PER_INSTANCE: u64 = 8 << 20;
/// Review and map instances a guest keeps between calls, at most.
pub const KEPT_REVIEW_INSTANCES: u64 = 8;
/// Largest `limits.totalMemory`.
pub const MAX_TOTAL_MEMORY: u64 = 64 << 30;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: DEFAULT_TIMEOUT,
            memory: DEFAULT_MEMORY,
            total_memory: None,
            cpu: DEFAULT_CPU,
            write_qps: DEFAULT_WRITE_QPS,
            write_burst: DEFAULT_WRITE_BURST,
        }
    }
}

/// How a module from a registry is pulled (see [`crate::guests::oci`]).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PullSpec {
    /// `Always` (a tag is resolved again every `every`: moving it swaps the guest),
    /// `IfNotPresent` (a tag is resolved once per host) or `Never` (only what the host keeps).
    #[serde(default)]
    pub policy: PullPolicy,
    /// How often `Always` resolves a tag again.
    #[serde(default = "default_pull_every", deserialize_with = "de_duration")]
    #[schemars(with = "String", default = "pull_every_text")]
    pub every: Duration,
}

impl Default for PullSpec {
    fn default() -> Self {
        PullSpec {
            policy: PullPolicy::default(),
            every: default_pull_every(),
        }
    }
}

/// A Secret, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecretRef {
    /// The Secret's name.
    pub name: String,
    /// Its namespace: required but in a `Reconciler`, whose own it is.
    #[serde(default)]
    pub namespace: Option<String>,
}

/// When a module's tag is resolved, as Kubernetes' `imagePullPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
pub enum PullPolicy {
    /// Resolve the tag again every `pull.every`.
    #[default]
    Always,
    /// Resolve the tag once; a digest is pulled once.
    IfNotPresent,
    /// Use only what the host keeps already.
    Never,
}

/// How often a tag is resolved again by default.
pub const DEFAULT_PULL_EVERY: Duration = Duration::from_secs(60);

fn default_pull_every() -> Duration {
    DEFAULT_PULL_EVERY
}

fn pull_every_text() -> String {
    show_duration(DEFAULT_PULL_EVERY)
}

/// Instance reuse policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
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
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
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
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Deserialize,
    serde::Serialize,
    schemars::JsonSchema,
)]
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

impl Verb {
    /// The Kubernetes RBAC verb this is, and the subresource it acts on (`status` for
    /// `update-status` and `patch-status`).
    pub fn rbac(self) -> (&'static str, Option<&'static str>) {
        match self {
            Verb::Get => ("get", None),
            Verb::List => ("list", None),
            Verb::Watch => ("watch", None),
            Verb::Create => ("create", None),
            Verb::Update => ("update", None),
            Verb::UpdateStatus => ("update", Some("status")),
            Verb::Patch => ("patch", None),
            Verb::PatchStatus => ("patch", Some("status")),
            Verb::Delete => ("delete", None),
        }
    }
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
