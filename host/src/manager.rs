//! The [`Manager`]: the set of running guests over one shared cache — started from a manifest
//! set, and changed live by [`reload`](Manager::reload) when manifests or modules change.
//!
//! Each guest is a [`Controller`] wired to the informers of the kinds it watches; its workers
//! start once those caches have synced. One bad guest (a module that does not load, a kind the
//! server does not serve) is reported with its name and skipped; the others run.
//!
//! # Reload and hot-swap
//!
//! [`reload`](Manager::reload) compares a manifest directory with what runs:
//!
//! - a new manifest starts its guest without disturbing the others;
//! - a changed manifest or module is compiled and validated off the hot path (a blocking
//!   thread; the module cache makes a swap back to a known version cheap) and instantiated
//!   once, then swapped in atomically ([`Controller::swap`]): running reconciles finish on the
//!   old version, queued keys and backoff state carry over, changed `for` / `owns` / `watches`
//!   take effect (new watches start, unneeded ones stop), and every watched object is
//!   enqueued again so the new version reconciles the whole state, as a restart would;
//! - a module that fails to load, does not implement the world or traps on instantiation is
//!   rejected with a clear error and the old version keeps running; so does a guest whose
//!   manifest became invalid;
//! - a removed manifest stops its guest (running reconciles finish) and releases the watches no
//!   other guest needs.
//!
//! [`watch`](Manager::watch) runs `reload` when files in the manifest directory or the module
//! files change (debounced), and on SIGHUP.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::cache::{Cache, EventSink, Informer, InformerUse, SYNC_TIMEOUT};
use crate::client::ApiClient;
use crate::cluster::ClusterAccess;
use crate::cluster::live::{LiveCluster, Reads};
use crate::controller::Controller;
use crate::guest::{
    CpuGovernor, Engines, GuestModule, GuestWorker, MemoryPool, ModuleCache, Runner,
};
use crate::manifest::{Manifest, ManifestError};
use crate::metrics::Metrics;
use crate::sources::{FromCluster, Generations, ObjectSource};
use crate::vocab::Gvk;

/// How long [`Manager::shutdown`] waits for running reconciles by default.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long file changes settle before a reload: editors and `cargo build` write in bursts.
pub const RELOAD_DEBOUNCE: Duration = Duration::from_millis(100);

/// The running manifest watcher of [`Manager::watch`].
#[derive(Debug)]
pub struct Watcher {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    /// Stop watching, letting a reload in progress finish first.
    pub async fn stop(self) {
        self.stop.send_replace(true);
        let _ = self.task.await;
    }
}

/// A guest that could not be started, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The guest (or the manifest file, if it has no valid name).
    pub guest: String,
    /// What is wrong, naming the file or kind.
    pub reason: String,
    /// What kind of problem, in one CamelCase word (a status condition's reason):
    /// [`ManifestError::code`] or [`StartError::code`].
    pub code: &'static str,
}

/// Why a guest, or a new version of one, could not start; each names the manifest file, the
/// module or the kind.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Code compiled into the host takes no configuration and has no `map` export.
    #[error(
        "{path}: guest {guest} runs code compiled into the host: spec.config and mapByGuest need a component"
    )]
    RunnerUnsupported {
        /// The manifest file.
        path: PathBuf,
        /// The guest.
        guest: String,
    },
    /// Loading the module panicked.
    #[error("loading the module panicked: {0}")]
    LoadPanicked(String),
    /// The module could not be read, compiled or checked against the world.
    #[error(transparent)]
    Load(#[from] crate::guest::LoadError),
    /// The module's first instance failed (a start function trapped, the configuration was
    /// refused).
    #[error(transparent)]
    Instantiate(#[from] crate::guest::ReconcileError),
    /// A kind it watches is not served, or its informer could not start.
    #[error("cannot watch {gvk}: {source}")]
    Watch {
        /// The kind.
        gvk: Gvk,
        /// Why.
        source: crate::vocab::AccessError,
    },
    /// A permission restricted to namespaces names a cluster-scoped kind.
    #[error("{path}: spec.permissions[{index}].namespaces: {message}")]
    ClusterScoped {
        /// The manifest file.
        path: PathBuf,
        /// The permission's index.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// An informer did not sync in time.
    #[error(transparent)]
    Sync(crate::vocab::AccessError),
    /// The guest asks for something the host itself may not do.
    #[error("{path}: {field}: {problem}")]
    PermissionRefused {
        /// The manifest file or object.
        path: PathBuf,
        /// The manifest field asking for it.
        field: String,
        /// What the host may not do.
        problem: String,
    },
    /// A namespaced `Reconciler` asks for more than its namespace.
    #[error("{path}: {message}")]
    Confined {
        /// The object.
        path: PathBuf,
        /// What it asks for.
        message: String,
    },
}

impl StartError {
    /// What kind of problem, in one CamelCase word (a status condition's reason).
    pub fn code(&self) -> &'static str {
        match self {
            StartError::RunnerUnsupported { .. }
            | StartError::ClusterScoped { .. }
            | StartError::Confined { .. } => "Invalid",
            StartError::LoadPanicked(_) | StartError::Load(_) => "LoadFailed",
            StartError::Instantiate(_) => "InstantiateFailed",
            StartError::Watch { .. } => "WatchFailed",
            StartError::Sync(_) => "SyncFailed",
            StartError::PermissionRefused { .. } => "PermissionRefused",
        }
    }
}

/// What a [`reload`](Manager::reload) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadReport {
    /// Guests started.
    pub started: Vec<String>,
    /// Guests now running a new version.
    pub swapped: Vec<String>,
    /// Guests stopped because their manifest is gone.
    pub removed: Vec<String>,
    /// Changes refused (the old version, if any, keeps running): guest or file, and why.
    pub rejected: Vec<Skipped>,
    /// Guests whose new version still loads in the background (the old one, if any, keeps
    /// running): taken up by the reload that its end starts.
    pub loading: Vec<String>,
}

impl Skipped {
    /// A manifest (file or object) refused, named by its path.
    fn refused(err: &ManifestError) -> Self {
        Skipped {
            guest: err.path().display().to_string(),
            reason: err.to_string(),
            code: err.code(),
        }
    }
}

impl ReloadReport {
    /// Whether nothing changed and nothing was refused.
    pub fn is_empty(&self) -> bool {
        self.started.is_empty()
            && self.swapped.is_empty()
            && self.removed.is_empty()
            && self.rejected.is_empty()
            && self.loading.is_empty()
    }
}

/// One running guest.
struct Guest {
    controller: Arc<Controller>,
    manifest: Arc<Manifest>,
    /// Digest of the module file it runs.
    digest: String,
    /// Digest of its `spec.rollout` candidate's file, as loaded (empty: none, or not loaded).
    candidate_digest: String,
    /// Its uses of the informers it watches: dropped, they stop the watches no guest needs.
    informers: Vec<InformerUse>,
    /// The informers its reads go through, kept across its versions.
    reads: Arc<Reads>,
}

/// Running guests over one shared cache. Cheap to clone; clones share the guests.
#[derive(Clone)]
pub struct Manager {
    inner: Arc<Inner>,
}

/// The digest of `manifest`'s rollout candidate's file (empty: none, or unreadable).
fn candidate_digest(manifest: &Manifest) -> String {
    manifest
        .spec
        .rollout
        .as_ref()
        .and_then(|r| crate::guest::read_module(&r.candidate).ok())
        .map(|b| crate::guest::module_cache::digest(&b))
        .unwrap_or_default()
}

/// The digests of `manifest`'s module file and its candidate's (empty: unreadable, none).
fn module_digests(manifest: &Manifest) -> (String, String) {
    let module = crate::guest::read_module(&manifest.spec.module)
        .map(|b| crate::guest::module_cache::digest(&b))
        .unwrap_or_default();
    (module, candidate_digest(manifest))
}

/// How a [`Manager`] runs.
#[derive(Clone, Debug, Default)]
pub struct ManagerOptions {
    /// Where compiled modules are kept.
    pub module_cache: ModuleCache,
    /// Workers reconcile only while this is `true` (leader election); `None`: always.
    pub gate: Option<tokio::sync::watch::Receiver<bool>>,
    /// Guests sharded across replicas: each guest runs only while its tenure is granted (its
    /// own gate, and a fence on its writes); overrides `gate`.
    pub tenures: Option<Arc<crate::tenure::Tenures>>,
    /// Where to record metrics; `None`: a registry of the manager's own.
    pub metrics: Option<Arc<Metrics>>,
    /// Code compiled into the host, by guest name: a guest named here runs its [`Runner`]
    /// reconciler in place of the module its manifest names, with the same cache, queue, client
    /// and permission checks. No sandbox (see [`Runner`]): for benchmarks and tests.
    pub runners: BTreeMap<String, Arc<dyn Runner>>,
    /// Most linear memory all guests' instances hold together, in bytes; `None`:
    /// [`crate::memory::default_guest_memory`].
    pub guest_memory: Option<u64>,
    /// Also run the guests of the cluster's `Reconciler` and `ClusterReconciler` objects
    /// (see [`crate::sources`]); `None`: only those of the manifests given.
    pub from_cluster: Option<FromCluster>,
    /// Where modules named `oci://…` are pulled from and kept; `None`: a store of this
    /// process's own, every registry over HTTPS.
    pub registries: Option<Arc<crate::oci::Registries>>,
    /// How long a worker keeps its guest's instance with no key to reconcile before it gives it
    /// back; `None`: [`crate::controller::IDLE_INSTANCE`].
    pub instance_idle: Option<Duration>,
}

struct Inner {
    metrics: Arc<Metrics>,
    /// How long an idle worker keeps its instance.
    instance_idle: Duration,
    gate: tokio::sync::watch::Receiver<bool>,
    /// Keeps the always-open gate's channel alive when there is no leader election.
    _open: Option<tokio::sync::watch::Sender<bool>>,
    tenures: Option<Arc<crate::tenure::Tenures>>,
    engines: Engines,
    module_cache: ModuleCache,
    runners: BTreeMap<String, Arc<dyn Runner>>,
    /// Shares the host's CPU between its guests.
    governor: Arc<CpuGovernor>,
    /// Bounds the linear memory of all guests' instances together.
    host_memory: Arc<MemoryPool>,
    cache: Arc<Cache>,
    /// The guests; the lock also serialises reloads.
    guests: tokio::sync::Mutex<BTreeMap<String, Guest>>,
    /// The controllers, readable without waiting for a reload to finish.
    controllers: RwLock<BTreeMap<String, Arc<Controller>>>,
    /// Counts changes of [`controllers`](Self::controllers) (guests started, swapped, removed).
    changes: tokio::sync::watch::Sender<u64>,
    skipped: RwLock<Vec<Skipped>>,
    /// The manifests refused because the host may not do what they ask: checked again every
    /// [`PERMISSION_RECHECK`], so that the RBAC that allows one starts it within seconds.
    permission_refused: RwLock<Vec<Arc<Manifest>>>,
    /// The cluster's guest objects, with `--from-cluster`.
    objects: Option<ObjectSource>,
    /// What the guest objects were when the running set was last brought in line with them:
    /// each one's `observedGeneration`.
    applied: RwLock<Generations>,
    /// Modules from registries.
    registries: Arc<crate::oci::Registries>,
    /// Pulls from slow registries going on in the background, by guest and reference
    /// ([`LOOP_WAIT`]).
    pulling: std::sync::Mutex<HashMap<String, PullTask>>,
    /// Versions loading in the background, by guest name ([`LOOP_WAIT`]).
    loading: std::sync::Mutex<HashMap<String, Loading>>,
    /// Counts the background loads that ended: the watch loop reloads to take them up.
    loads_done: tokio::sync::watch::Sender<u64>,
    /// Each tenant's bound on its loads at once ([`TENANT_LOADS_AT_ONCE`]).
    tenant_loads: std::sync::Mutex<HashMap<Option<String>, Arc<tokio::sync::Semaphore>>>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("guests", &self.controllers().keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The namespace scopes a guest's informers use: its `namespaces`, or all.
fn scopes(manifest: &Manifest) -> Vec<Option<String>> {
    if manifest.spec.namespaces.is_empty() {
        vec![None]
    } else {
        manifest.spec.namespaces.iter().cloned().map(Some).collect()
    }
}

/// Whether `manifest`'s guest reconciles: it names a kind, a watch or a ticker (otherwise it
/// only answers webhooks or converts).
pub fn reconciles(manifest: &Manifest) -> bool {
    let spec = &manifest.spec;
    spec.for_kind.is_some() || !spec.watches.is_empty() || !spec.tickers.is_empty()
}

/// What a guest that does not reconcile serves: `serving webhooks (validate, mutate), converting
/// foos.example.com`.
fn serves(manifest: &Manifest) -> String {
    let mut served = Vec::new();
    let exports: BTreeSet<&str> = manifest
        .spec
        .webhooks
        .iter()
        .map(|w| w.kind.export())
        .collect();
    if !exports.is_empty() {
        served.push(format!(
            "serving webhooks ({})",
            exports.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if let Some(conversion) = &manifest.spec.conversion {
        served.push(format!("converting {}", conversion.crd));
    }
    if served.is_empty() {
        "nothing to do".to_owned()
    } else {
        served.join(", ")
    }
}

fn describe_all(informers: &[InformerUse]) -> String {
    if informers.is_empty() {
        return "nothing (generic sources only)".into();
    }
    informers
        .iter()
        .map(|i| i.describe())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the informer of `gvk` holds for `manifest`'s guest: metadata when every mention of the
/// kind in its manifest asks for metadata only.
fn content_of(manifest: &Manifest, gvk: &Gvk) -> crate::cache::Content {
    if manifest.metadata_only_kinds().contains(gvk) {
        crate::cache::Content::Metadata
    } else {
        crate::cache::Content::Objects
    }
}

/// Whether `uses` holds a use of `informer`.
fn holds(uses: &[InformerUse], informer: &Arc<Informer>) -> bool {
    uses.iter().any(|u| Arc::ptr_eq(u.informer(), informer))
}

/// The informers behind `uses`, as the controller holds them.
fn shared(uses: &[InformerUse]) -> Vec<Arc<Informer>> {
    uses.iter().map(|u| u.informer().clone()).collect()
}

/// A loaded, instantiated version of a guest, not yet running.
struct Prepared {
    module: Arc<GuestModule>,
    cluster: Arc<dyn ClusterAccess>,
    /// `spec.rollout`'s candidate, loaded and instantiated as the module is — or why it could
    /// not be (the live version runs regardless).
    candidate: Option<Result<Arc<GuestModule>, String>>,
}

/// A version of a guest ready to run: loaded, instantiated, its watches started and synced.
struct Version {
    manifest: Arc<Manifest>,
    prepared: Prepared,
    informers: Vec<InformerUse>,
    for_informers: Vec<Arc<Informer>>,
    reads: Arc<Reads>,
}

/// Guests loaded at once, at start and on a reload: each compiles on a blocking thread and
/// may take up to its `limits.timeout` in `init`, so one slow guest delays no other; the
/// bound keeps the memory of compiling many large components at once in check.
pub const LOADS_AT_ONCE: usize = 4;

/// Versions one tenant (a namespace's `Reconciler`s; the files and `ClusterReconciler`s are one
/// more) loads at once on a reload: a tenant whose guests block in `init` holds its own loads
/// only — every other tenant's load in parallel.
pub const TENANT_LOADS_AT_ONCE: usize = 2;

/// How long a reload the watch loop makes (on a changed file or object) waits for the modules
/// it pulls and the versions it loads before it goes on without the slow ones: each guest
/// starts or swaps as its own load ends, and a pull or load still running then carries on in
/// the background and is taken up by the reload its end starts — so a tenant's slow registry
/// or blocking `init` never holds another's guest. [`Manager::reload`] waits for all.
pub const LOOP_WAIT: Duration = Duration::from_secs(1);

/// How long the host's start waits for the modules it pulls before it starts without the guests
/// whose registries are slower (the watch loop starts them once pulled).
pub const START_PULL_WAIT: Duration = Duration::from_secs(30);

/// How long [`Manager::reload`] and [`Manager::apply`] wait for their pulls and loads: past
/// any guest's `init` time limit, so they answer what became of every guest.
pub const FULL_WAIT: Duration = Duration::from_secs(600);

/// The longest a pull may take in all (a registry answering a byte at a time): past it, the
/// pull fails as a registry that does not answer does.
pub const PULL_DEADLINE: Duration = Duration::from_secs(120);

/// A pull going on in the background: the module's file and manifest digest, or why not.
type PullTask = (
    tokio::task::JoinHandle<Result<(PathBuf, String), crate::oci::OciError>>,
    Background,
);

/// Whether a pull or load was left to finish in the background: only then does its end wake
/// the watch loop (`loads_done`). A pull or load a reload waited for and took up itself must
/// not — the reload its end started would start the same again: a loop, hot when it fails.
#[derive(Clone, Debug, Default)]
struct Background(Arc<std::sync::atomic::AtomicBool>);

impl Background {
    /// At the task's end: tell the watch loop, if no reload waits for it.
    fn ended(&self, done: &tokio::sync::watch::Sender<u64>) {
        if self.0.load(std::sync::atomic::Ordering::Acquire) {
            done.send_modify(|n| *n += 1);
        }
    }

    /// Left to finish alone: its end wakes the watch loop (now, if it ended meanwhile).
    fn detach(&self, finished: bool, done: &tokio::sync::watch::Sender<u64>) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
        if finished {
            done.send_modify(|n| *n += 1);
        }
    }
}

/// A version a reload loads: its manifest, the read set of the guest it replaces (if any), and
/// its module's and candidate's digests.
type ToLoad = (Manifest, Option<Arc<Reads>>, (String, String));

/// A version still loading after the reload that started it.
struct Loading {
    /// The manifest it loads, and its module's and candidate's digests: a reload wanting the
    /// same takes it up, one wanting another starts again.
    manifest: Manifest,
    digests: (String, String),
    task: tokio::task::JoinHandle<Result<Version, StartError>>,
    background: Background,
}

/// First wait before a refused reload is retried without a change to its files (a kind not
/// served yet may be by then); doubled after every refusal up to [`MAX_RELOAD_RETRY`].
pub const FIRST_RELOAD_RETRY: Duration = Duration::from_secs(1);
/// Longest wait between retries of a refused reload.
pub const MAX_RELOAD_RETRY: Duration = Duration::from_secs(300);

/// When a reload that refused something is tried again: after a delay that doubles with every
/// refusal (a change to the files reloads at once, and a reload that refuses nothing resets it).
#[derive(Default)]
struct Retry {
    delay: Duration,
    at: Option<tokio::time::Instant>,
}

impl Retry {
    /// Schedule the next retry after a reload (`refused`: it refused something), or none.
    fn after(&mut self, refused: bool) {
        if !refused {
            *self = Retry::default();
            return;
        }
        self.delay = if self.delay.is_zero() {
            FIRST_RELOAD_RETRY
        } else {
            (self.delay * 2).min(MAX_RELOAD_RETRY)
        };
        self.at = Some(tokio::time::Instant::now() + self.delay);
    }

    /// Resolves when the retry is due; never when none is scheduled.
    async fn due(&self) {
        match self.at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

/// When the modules pulled by tag are next resolved again: a deadline kept across the watch
/// loop's turns, so that the loop waking for anything else (a status write, a file event that
/// changes nothing) never postpones it.
#[derive(Debug, Default)]
struct Period {
    at: Option<tokio::time::Instant>,
}

impl Period {
    /// Keep the deadline for a period of `every` (none: no deadline); a period shorter than
    /// the one the deadline was set for brings it forward, never back.
    fn arm(&mut self, every: Option<Duration>) {
        self.at = every.map(|every| {
            let next = tokio::time::Instant::now() + every;
            self.at.map_or(next, |at| at.min(next))
        });
    }

    /// The deadline has been met (the modules were resolved): the next one is a period on.
    fn restart(&mut self) {
        self.at = None;
    }

    /// Resolves when the deadline is due; never when there is none.
    async fn due(&self) {
        match self.at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

/// How often the manifests refused for the host's permissions are checked again (a few access
/// reviews each): a Role or binding that allows one starts it within this.
pub const PERMISSION_RECHECK: Duration = Duration::from_secs(2);

/// The manifest files of a directory and the module files they name, as the file system
/// describes them (size, modification time, inode) without opening them: two are equal when
/// no file was written, replaced, added or removed.
#[derive(Debug, Default, PartialEq, Eq)]
struct Fingerprint(BTreeMap<PathBuf, Option<(u64, Option<std::time::SystemTime>, u64)>>);

impl Fingerprint {
    fn of(dir: Option<&Path>, modules: &[PathBuf]) -> Self {
        let files = dir
            .and_then(|dir| Manifest::files(dir).ok())
            .unwrap_or_default();
        let stat = |path: &Path| {
            let meta = std::fs::metadata(path).ok()?;
            #[cfg(unix)]
            let inode = std::os::unix::fs::MetadataExt::ino(&meta);
            #[cfg(not(unix))]
            let inode = 0;
            Some((meta.len(), meta.modified().ok(), inode))
        };
        Fingerprint(
            files
                .iter()
                .chain(modules)
                .map(|path| (path.clone(), stat(path)))
                .collect(),
        )
    }
}

impl Manager {
    /// Load `manifests`, start their informers, wait for the caches to sync and start the
    /// workers. Guests that cannot start are logged and listed in [`skipped`](Self::skipped).
    ///
    /// # Errors
    ///
    /// Only when the Wasm engine cannot be created; guest problems never fail the manager.
    pub async fn start(api: Arc<ApiClient>, manifests: Vec<Manifest>) -> anyhow::Result<Self> {
        Self::start_with(api, manifests, ManagerOptions::default()).await
    }

    /// Like [`start`](Self::start), with `options`.
    ///
    /// # Errors
    ///
    /// When the Wasm engine cannot be created, or with
    /// [`from_cluster`](ManagerOptions::from_cluster) when the guest objects cannot be watched
    /// (the CRDs are not installed).
    pub async fn start_with(
        api: Arc<ApiClient>,
        manifests: Vec<Manifest>,
        options: ManagerOptions,
    ) -> anyhow::Result<Self> {
        let engines = Engines::new()?;
        let (gate, open) = match options.gate {
            Some(gate) => (gate, None),
            None => {
                let (open, gate) = tokio::sync::watch::channel(true);
                (gate, Some(open))
            }
        };
        let module_cache = options.module_cache;
        let cache = Cache::new(api);
        let (objects, wanted) = match &options.from_cluster {
            Some(from) => {
                let source = ObjectSource::start(&cache, from).await?;
                let files = manifests.into_iter().map(Ok).collect();
                let wanted = crate::sources::merge(files, source.scan());
                (Some(source), wanted)
            }
            None => (None, manifests.into_iter().map(Ok).collect()),
        };
        let applied = RwLock::new(
            objects
                .as_ref()
                .map(ObjectSource::generations)
                .unwrap_or_default(),
        );
        let manager = Manager {
            inner: Arc::new(Inner {
                metrics: options.metrics.unwrap_or_default(),
                instance_idle: options
                    .instance_idle
                    .unwrap_or(crate::controller::IDLE_INSTANCE),
                gate,
                _open: open,
                tenures: options.tenures,
                engines,
                module_cache,
                runners: options.runners,
                governor: CpuGovernor::new(),
                host_memory: MemoryPool::new(
                    "--guest-memory (all guests' instances)",
                    usize::try_from(
                        options
                            .guest_memory
                            .unwrap_or_else(crate::memory::default_guest_memory),
                    )
                    .unwrap_or(usize::MAX),
                ),
                cache,
                guests: tokio::sync::Mutex::new(BTreeMap::new()),
                controllers: RwLock::new(BTreeMap::new()),
                changes: tokio::sync::watch::channel(0).0,
                skipped: RwLock::new(Vec::new()),
                permission_refused: RwLock::new(Vec::new()),
                loading: std::sync::Mutex::new(HashMap::new()),
                pulling: std::sync::Mutex::new(HashMap::new()),
                loads_done: tokio::sync::watch::channel(0).0,
                tenant_loads: std::sync::Mutex::new(HashMap::new()),
                objects,
                applied,
                registries: options
                    .registries
                    .unwrap_or_else(|| Arc::new(crate::oci::Registries::private())),
            }),
        };
        // A registry too slow for this holds only its own guests: the watch loop starts them.
        let wanted = manager.pull_modules(wanted, START_PULL_WAIT).await;
        let mut manifests = Vec::new();
        for result in wanted {
            match result {
                Ok(manifest) => manifests.push(manifest),
                // Started once its pull is done (the watch loop's reload).
                Err(err @ ManifestError::Pulling { .. }) => tracing::info!("{err}"),
                Err(err) => {
                    tracing::error!("not started: {err}");
                    manager.skip(Skipped::refused(&err));
                }
            }
        }
        let mut guests = manager.inner.guests.lock().await;
        let progress = crate::progress::Progress::new("starting guests", manifests.len());
        let loads = manifests.into_iter().map(|manifest| (manifest, None));
        let mut done = 0;
        let loaded = manager
            .load_versions(loads, |name| {
                progress.working(done, &format!("{name}: loaded"));
                done += 1;
            })
            .await;
        for (name, version) in loaded {
            match version {
                Ok(version) => manager.start_guest(&mut guests, version),
                Err(reason) => {
                    tracing::error!("guest {name} not started: {reason}");
                    manager.skip(Skipped {
                        guest: name,
                        reason: reason.to_string(),
                        code: reason.code(),
                    });
                }
            }
        }
        manager.publish(&guests);
        progress.finish();
        drop(guests);
        Ok(manager)
    }

    /// Load each manifest's version ([`LOADS_AT_ONCE`] at a time), with the guest's read set
    /// when it runs already (a swap) or a new one; `loaded` is told each guest's name as it is
    /// done. Results come back in the order given.
    async fn load_versions(
        &self,
        manifests: impl IntoIterator<Item = (Manifest, Option<Arc<Reads>>)>,
        mut loaded: impl FnMut(&str),
    ) -> Vec<(String, Result<Version, StartError>)> {
        use futures::StreamExt as _;
        let mut results: Vec<(usize, String, Result<Version, StartError>)> =
            futures::stream::iter(manifests.into_iter().enumerate())
                .map(|(index, (manifest, reads))| async move {
                    let name = manifest.name.clone();
                    let reads = reads.unwrap_or_default();
                    (index, name, self.load_version(manifest, reads).await)
                })
                .buffer_unordered(LOADS_AT_ONCE)
                .inspect(|(_, name, _)| loaded(name))
                .collect()
                .await;
        results.sort_by_key(|(index, _, _)| *index);
        results
            .into_iter()
            .map(|(_, name, result)| (name, result))
            .collect()
    }

    /// Load and instantiate `manifest`'s module and start (and sync) the watches it needs.
    async fn load_version(
        &self,
        manifest: Manifest,
        reads: Arc<Reads>,
    ) -> Result<Version, StartError> {
        // Refused before anything is compiled or watched: what the host may not do, the guest
        // never could.
        if let Some((field, problem)) =
            crate::access::first_missing(self.inner.cache.api(), &manifest).await
        {
            self.inner
                .permission_refused
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .push(Arc::new(manifest.clone()));
            return Err(StartError::PermissionRefused {
                path: manifest.path.clone(),
                field,
                problem,
            });
        }
        let manifest = Arc::new(manifest);
        let prepared = self.prepare(manifest.clone(), reads.clone()).await?;
        // On an error, `wire` has dropped its uses: what it started for this version only is
        // stopped again.
        let (informers, for_informers) = self.wire(&manifest).await?;
        Ok(Version {
            manifest,
            prepared,
            informers,
            for_informers,
            reads,
        })
    }

    fn skip(&self, skipped: Skipped) {
        self.inner
            .skipped
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(skipped);
    }

    fn publish(&self, guests: &BTreeMap<String, Guest>) {
        *self
            .inner
            .controllers
            .write()
            .unwrap_or_else(|e| e.into_inner()) = guests
            .iter()
            .map(|(name, g)| (name.clone(), g.controller.clone()))
            .collect();
        self.inner.changes.send_modify(|n| *n += 1);
    }

    /// Wakes when the running guests may have changed (a guest started, stopped or swapped to a
    /// new version: after every reload), e.g. to register the webhooks of the guests running now.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Load and instantiate `manifest`'s module on a blocking thread (compiling is CPU-bound).
    async fn prepare(
        &self,
        manifest: Arc<Manifest>,
        reads: Arc<Reads>,
    ) -> Result<Prepared, StartError> {
        let module = self.load_module(manifest.clone()).await?;
        let mut live = LiveCluster::new(self.inner.cache.clone(), &manifest)
            .with_reads(reads)
            .with_metrics(self.inner.metrics.clone());
        if let Some(tenures) = &self.inner.tenures {
            live = live.with_fence(tenures.fence(&manifest.name));
        }
        let cluster: Arc<dyn ClusterAccess> = Arc::new(live);
        // Instantiate once: a module whose start function traps is refused here.
        GuestWorker::new(module.clone(), cluster.clone())
            .warm_up()
            .await?;
        let candidate = match &manifest.spec.rollout {
            Some(rollout) => Some(self.load_candidate(&manifest, rollout, &cluster).await),
            None => None,
        };
        Ok(Prepared {
            module,
            cluster,
            candidate,
        })
    }

    /// `rollout`'s candidate for `manifest`'s guest, loaded and instantiated; a shadow's `init`
    /// runs on dry runs as its reconciles do (a canary's writes are real).
    async fn load_candidate(
        &self,
        manifest: &Arc<Manifest>,
        rollout: &crate::manifest::RolloutSpec,
        cluster: &Arc<dyn ClusterAccess>,
    ) -> Result<Arc<GuestModule>, String> {
        let mut candidate = (**manifest).clone();
        candidate.spec.module = rollout.candidate.clone();
        if rollout.config.is_some() {
            candidate.spec.config = rollout.config.clone();
        }
        candidate.spec.rollout = None;
        candidate.candidate = true;
        candidate.module_ref = manifest.candidate_ref.clone();
        let module = self
            .load_module(Arc::new(candidate))
            .await
            .map_err(|e| e.to_string())?;
        let access: Arc<dyn ClusterAccess> = match rollout.mode {
            crate::manifest::RolloutMode::Shadow => Arc::new(crate::rollout::Replay::new(
                Some(cluster.clone()),
                Some(self.dry_run(&manifest.name)),
            )),
            crate::manifest::RolloutMode::Canary => cluster.clone(),
        };
        GuestWorker::new(module.clone(), access)
            .warm_up()
            .await
            .map_err(|e| e.to_string())?;
        Ok(module)
    }

    /// Where `guest`'s shadow writes go: dry runs, as its field manager.
    fn dry_run(&self, guest: &str) -> crate::rollout::DryRun {
        crate::rollout::DryRun {
            api: self.inner.cache.api().dry_run(),
            field_manager: crate::cluster::live::field_manager(guest),
        }
    }

    /// Compile (on a blocking thread: it is CPU-bound) or find `manifest`'s module, governed by
    /// the host's CPU and memory budgets.
    async fn load_module(&self, manifest: Arc<Manifest>) -> Result<Arc<GuestModule>, StartError> {
        let inner = self.inner.clone();
        let loading = manifest.clone();
        let module = if let Some(runner) = inner.runners.get(&manifest.name) {
            // A native reconciler is built without configuration and has no `map` to call.
            if manifest.spec.config.is_some()
                || manifest.spec.watches.iter().any(|w| w.map_by_guest)
            {
                return Err(StartError::RunnerUnsupported {
                    path: manifest.path.clone(),
                    guest: manifest.name.clone(),
                });
            }
            GuestModule::with_runner(manifest.clone(), runner.clone())
        } else {
            tokio::task::spawn_blocking(move || {
                let (engine, linker) = inner.engines.for_isolation(loading.spec.isolation);
                GuestModule::load_cached(engine, linker, loading, &inner.module_cache)
            })
            .await
            .map_err(|e| StartError::LoadPanicked(e.to_string()))??
        };
        Ok(Arc::new(module.governed_by(
            &self.inner.governor,
            &self.inner.host_memory,
        )))
    }

    /// Try `prepared`'s candidate, if it has one, beside `controller`'s running version.
    fn try_candidate(
        &self,
        controller: &Arc<Controller>,
        manifest: &Manifest,
        prepared: &Prepared,
    ) {
        let (Some(candidate), Some(spec)) = (&prepared.candidate, &manifest.spec.rollout) else {
            if manifest.spec.rollout.is_none() {
                controller.forget_rollout();
            }
            return;
        };
        let candidate = match candidate {
            Ok(candidate) => candidate,
            Err(problem) => {
                tracing::warn!(
                    "guest {}: its candidate {} is not tried: {problem}; the live version runs",
                    manifest.name,
                    spec.candidate.display()
                );
                controller.candidate_refused(spec, problem);
                return;
            }
        };
        let dry_run = self.dry_run(&manifest.name);
        let rollout = crate::rollout::Rollout::start(
            &manifest.name,
            candidate.clone(),
            spec.clone(),
            prepared.cluster.clone(),
            Some(dry_run),
            self.inner.metrics.clone(),
        );
        controller.try_candidate(rollout);
    }

    /// Uses of the informers `manifest`'s guest watches, and those of its `for` kind, started
    /// if needed and waited for until synced. On an error the uses made are dropped, which
    /// stops the watches no other guest needs.
    async fn wire(
        &self,
        manifest: &Manifest,
    ) -> Result<(Vec<InformerUse>, Vec<Arc<Informer>>), StartError> {
        let handlers = crate::controller::Handlers::from_manifest(manifest);
        let kinds = handlers.watched_kinds();
        let api = self.inner.cache.api();
        // Every kind must be served before anything is started.
        for gvk in &kinds {
            let resolved = api.resolve(gvk).await.map_err(|source| StartError::Watch {
                gvk: gvk.clone(),
                source,
            })?;
            // A tenant's kinds from CRDs, which its manifest could not be checked for.
            if let Some(namespace) = &manifest.tenant
                && !resolved.namespaced
            {
                return Err(StartError::Confined {
                    path: manifest.path.clone(),
                    message: format!(
                        "{gvk} is cluster-scoped: a Reconciler in {namespace:?} may only watch namespaced kinds"
                    ),
                });
            }
        }
        // A namespace cannot restrict a cluster-scoped kind: refuse the guest rather than let
        // it believe its permission is narrower than it is.
        for (i, permission) in manifest.spec.permissions.iter().enumerate() {
            if permission.namespaces.is_empty() {
                continue;
            }
            let gvk = Gvk::from_api_version(&permission.api_version, &permission.kind);
            if let Ok(resolved) = api.resolve(&gvk).await
                && !resolved.namespaced
            {
                return Err(StartError::ClusterScoped {
                    path: manifest.path.clone(),
                    index: i,
                    message: crate::manifest::cluster_scoped_namespaces(&gvk),
                });
            }
        }
        let for_kind: Option<Gvk> = manifest.spec.for_kind.as_ref().map(|k| k.gvk());
        let mut informers: Vec<InformerUse> = Vec::new();
        let mut for_informers = Vec::new();
        for gvk in &kinds {
            for scope in scopes(manifest) {
                let informer = self
                    .inner
                    .cache
                    .informer(
                        gvk,
                        scope.as_deref(),
                        content_of(manifest, gvk),
                        &manifest.name,
                    )
                    .await
                    .map_err(|source| StartError::Watch {
                        gvk: gvk.clone(),
                        source,
                    })?;
                if !holds(&informers, informer.informer()) {
                    if for_kind.as_ref() == Some(gvk) {
                        for_informers.push(informer.informer().clone());
                    }
                    informers.push(informer);
                }
            }
        }
        for informer in &informers {
            if !informer.is_synced() {
                tracing::info!(
                    "{}: syncing the cache of {}",
                    manifest.name,
                    informer.describe()
                );
            }
            informer
                .wait_synced(SYNC_TIMEOUT)
                .await
                .map_err(StartError::Sync)?;
        }
        Ok((informers, for_informers))
    }

    /// Run `version` as a new guest.
    fn start_guest(&self, guests: &mut BTreeMap<String, Guest>, version: Version) {
        let Version {
            manifest,
            prepared,
            informers,
            for_informers,
            reads,
        } = version;
        let name = manifest.name.clone();
        let digest = prepared.module.digest().to_owned();
        let candidate_digest = match &prepared.candidate {
            Some(Ok(candidate)) => candidate.digest().to_owned(),
            _ => String::new(),
        };
        tracing::info!(
            "loaded guest {name} ({digest}, {:?})",
            prepared.module.origin()
        );
        let gate = match &self.inner.tenures {
            Some(tenures) => tenures.gate(&name),
            None => self.inner.gate.clone(),
        };
        let controller = Controller::new(
            prepared.module.clone(),
            prepared.cluster.clone(),
            self.inner.metrics.clone(),
            gate,
        );
        controller.set_instance_idle(self.inner.instance_idle);
        self.try_candidate(&controller, &manifest, &prepared);
        let sink: Arc<dyn EventSink> = controller.clone();
        for informer in &informers {
            informer.subscribe(sink.clone());
        }
        controller.start(shared(&informers), for_informers);
        if reconciles(&manifest) {
            tracing::info!(
                "guest {name} started: {} worker(s), watching {}",
                manifest.spec.max_concurrent_reconciles.get(),
                describe_all(&informers)
            );
        } else {
            tracing::info!("guest {name} started: {}", serves(&manifest));
        }
        guests.insert(
            name,
            Guest {
                controller,
                manifest,
                digest,
                candidate_digest,
                informers,
                reads,
            },
        );
    }

    /// Run `version` in place of `guest`'s running one.
    fn swap_guest(&self, guest: &mut Guest, version: Version) {
        let Version {
            manifest,
            prepared,
            informers,
            for_informers,
            ..
        } = version;
        let name = manifest.name.clone();
        let controller = guest.controller.clone();
        let sink: Arc<dyn EventSink> = controller.clone();
        let digest = prepared.module.digest().to_owned();
        let candidate_digest = match &prepared.candidate {
            Some(Ok(candidate)) => candidate.digest().to_owned(),
            _ => String::new(),
        };
        // The new handlers first, so that objects of newly watched kinds map through them.
        let version = controller.swap(
            prepared.module.clone(),
            prepared.cluster.clone(),
            shared(&informers),
            for_informers,
        );
        self.try_candidate(&controller, &manifest, &prepared);
        // Like a restarted controller, the new version sees every object: new subscriptions
        // replay theirs, kept ones are replayed here (the queue folds duplicates).
        for informer in &informers {
            if holds(&guest.informers, informer.informer()) {
                informer.replay(controller.as_ref());
            } else {
                informer.subscribe(sink.clone());
            }
        }
        for old in &guest.informers {
            if !holds(&informers, old.informer()) {
                old.unsubscribe(&sink);
            }
        }
        tracing::info!(
            "guest {name} swapped to version {} ({digest}), watching {}",
            version.number,
            describe_all(&informers)
        );
        guest.manifest = manifest;
        guest.digest = digest;
        guest.candidate_digest = candidate_digest;
        // The old uses go: watches only the old version needed stop.
        guest.informers = informers;
    }

    async fn remove_guest(&self, guest: Guest) {
        let name = guest.controller.name().to_owned();
        guest.controller.shutdown(SHUTDOWN_TIMEOUT).await;
        guest.controller.forget_metrics();
        self.inner.metrics.forget_guest(&name);
        let sink: Arc<dyn EventSink> = guest.controller.clone();
        for informer in &guest.informers {
            informer.unsubscribe(&sink);
        }
        // Its uses go with it: the watches no other guest needs stop.
        guest.reads.clear();
        drop(guest);
        tracing::info!("guest {name} stopped: its manifest is gone");
    }

    /// Bring the running guests in line with the manifests in `dir`. See the
    /// [module docs](self).
    ///
    /// # Errors
    ///
    /// When `dir` cannot be read; the running guests are untouched then.
    pub async fn reload(&self, dir: &Path) -> Result<ReloadReport, ManifestError> {
        self.reload_sources(Some(dir)).await
    }

    /// Bring the running guests in line with the manifests in `dir` (if any) and the cluster's
    /// guest objects (with [`from_cluster`](ManagerOptions::from_cluster)).
    ///
    /// # Errors
    ///
    /// When `dir` cannot be read; the running guests are untouched then.
    pub async fn reload_sources(&self, dir: Option<&Path>) -> Result<ReloadReport, ManifestError> {
        self.reload_within(dir, FULL_WAIT).await
    }

    /// [`reload_sources`](Self::reload_sources), waiting at most `wait` for the pulls and the
    /// loads (the rest go on in the background).
    async fn reload_within(
        &self,
        dir: Option<&Path>,
        wait: Duration,
    ) -> Result<ReloadReport, ManifestError> {
        let files = match dir {
            Some(dir) => Manifest::scan_dir(dir)?,
            None => Vec::new(),
        };
        // Generations first: an object changed in between is under-reported, and reloaded.
        let generations = self.generations();
        let scanned = match &self.inner.objects {
            Some(objects) => crate::sources::merge(files, objects.scan()),
            None => files,
        };
        let scanned = self.pull_modules(scanned, wait).await;
        let report = self.apply_within(scanned, wait).await;
        *self
            .inner
            .applied
            .write()
            .unwrap_or_else(|e| e.into_inner()) = generations;
        Ok(report)
    }

    /// `scanned` with every `oci://` module resolved and pulled: its `spec.module` the local
    /// file, or the manifest refused (`PullFailed`), so a running version stays.
    async fn pull_modules(
        &self,
        scanned: Vec<Result<Manifest, ManifestError>>,
        wait: Duration,
    ) -> Vec<Result<Manifest, ManifestError>> {
        // All at once: a slow registry holds none of the others.
        futures::future::join_all(scanned.into_iter().map(|result| async move {
            match result {
                Ok(manifest) => self.pull_module(manifest, wait).await,
                refused => refused,
            }
        }))
        .await
    }

    /// `manifest` with its `oci://` module (and `spec.rollout`'s candidate) pulled: each the
    /// local file.
    async fn pull_module(
        &self,
        mut manifest: Manifest,
        wait: Duration,
    ) -> Result<Manifest, ManifestError> {
        let module = manifest.spec.module.clone();
        if let Some((file, digest)) = self.pull(&manifest, &module, "spec.module", wait).await? {
            manifest.module_ref = Some(module.display().to_string());
            manifest.artifact_digest = Some(digest);
            manifest.spec.module = file;
        }
        if let Some(candidate) = manifest.spec.rollout.as_ref().map(|r| r.candidate.clone())
            && let Some((file, _)) = self
                .pull(&manifest, &candidate, "spec.rollout.candidate", wait)
                .await?
            && let Some(rollout) = &mut manifest.spec.rollout
        {
            manifest.candidate_ref = Some(candidate.display().to_string());
            rollout.candidate = file;
        }
        Ok(manifest)
    }

    /// The local file of `module` (named at `field`) if it is an `oci://` reference: pulled
    /// with `manifest`'s credentials and pull policy.
    async fn pull(
        &self,
        manifest: &Manifest,
        module: &Path,
        field: &'static str,
        wait: Duration,
    ) -> Result<Option<(PathBuf, String)>, ManifestError> {
        let Some(Ok(reference)) = crate::oci::reference(module) else {
            return Ok(None);
        };
        let auth = crate::oci::pull_secret_auth(
            self.inner.cache.api(),
            manifest.spec.pull_secret.as_ref(),
            reference.resolve_registry(),
        )
        .await
        .map_err(|err| ManifestError::Pull {
            path: manifest.path.clone(),
            field: "spec.pullSecret",
            problem: err.to_string(),
        })?;
        let key = format!("{}\u{0}{}", manifest.name, module.display());
        let pending = self
            .inner
            .pulling
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        // A pull already going on is not waited for again.
        let ((mut task, background), wait) = match pending {
            Some(task) => (task, Duration::ZERO),
            None => {
                let registries = self.inner.registries.clone();
                let pull = manifest.spec.pull.clone();
                let done = self.inner.loads_done.clone();
                let background = Background::default();
                let ended = background.clone();
                let task = tokio::spawn(async move {
                    let fetched = tokio::time::timeout(
                        PULL_DEADLINE,
                        registries.fetch(&reference, &auth, &pull),
                    )
                    .await
                    .unwrap_or_else(|_| {
                        Err(crate::oci::OciError::Registry {
                            reference: reference.whole(),
                            problem: format!(
                                "the registry did not finish the pull within {PULL_DEADLINE:?}"
                            ),
                        })
                    });
                    ended.ended(&done);
                    fetched
                });
                ((task, background), wait)
            }
        };
        // A slow registry holds this guest only: past the wait, the pull goes on alone.
        let joined = if task.is_finished() || !wait.is_zero() {
            tokio::time::timeout(wait.max(Duration::from_millis(1)), &mut task)
                .await
                .ok()
        } else {
            None
        };
        let Some(joined) = joined else {
            background.detach(task.is_finished(), &self.inner.loads_done);
            self.inner
                .pulling
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, (task, background));
            return Err(ManifestError::Pulling {
                path: manifest.path.clone(),
                field,
                reference: module.display().to_string(),
            });
        };
        match joined {
            Ok(Ok(pulled)) => Ok(Some(pulled)),
            Ok(Err(err)) => Err(ManifestError::Pull {
                path: manifest.path.clone(),
                field,
                problem: err.to_string(),
            }),
            Err(stopped) => Err(ManifestError::Pull {
                path: manifest.path.clone(),
                field,
                problem: format!("the pull stopped: {stopped}"),
            }),
        }
    }

    /// How often the running guests' module tags are to be resolved again (the shortest
    /// `pull.every` of those pulled by tag with the policy `Always`), if any are.
    async fn pull_interval(&self) -> Option<Duration> {
        let guests = self.inner.guests.lock().await;
        guests
            .values()
            .filter(|g| {
                g.manifest.spec.pull.policy == crate::manifest::PullPolicy::Always
                    && g.manifest
                        .module_ref
                        .as_deref()
                        .is_some_and(|r| !r.contains('@'))
            })
            .map(|g| g.manifest.spec.pull.every)
            .min()
    }

    /// The generation of guest object `reference` the running set was last brought in line
    /// with (its status's `observedGeneration`), if it was.
    pub fn observed_generation(&self, reference: &crate::sources::ObjectRef) -> Option<i64> {
        let applied = self.inner.applied.read().unwrap_or_else(|e| e.into_inner());
        applied.get(reference).map(|(_, generation)| *generation)
    }

    /// Whether this replica runs `guest`'s workers now: it holds the guest's Lease (sharding),
    /// leads (leader election), or always (neither).
    pub fn holds(&self, guest: &str) -> bool {
        match &self.inner.tenures {
            Some(tenures) => tenures.is_running(guest),
            None => *self.inner.gate.borrow(),
        }
    }

    /// Whether this replica takes part in reconciling at all now: with leader election, only
    /// the leader does; sharded or not, every replica does.
    pub fn is_active(&self) -> bool {
        self.inner.tenures.is_some() || *self.inner.gate.borrow()
    }

    /// The fence of `guest`'s writes under sharding (`None`: writes are not fenced).
    pub fn fence(&self, guest: &str) -> Option<Arc<crate::cluster::fence::Fence>> {
        self.inner.tenures.as_ref().map(|t| t.fence(guest))
    }

    /// What the guest objects were at the last scan (empty without
    /// [`from_cluster`](ManagerOptions::from_cluster)).
    fn generations(&self) -> Generations {
        self.inner
            .objects
            .as_ref()
            .map(ObjectSource::generations)
            .unwrap_or_default()
    }

    /// The cluster's guest objects, with [`from_cluster`](ManagerOptions::from_cluster).
    pub fn objects(&self) -> Option<&ObjectSource> {
        self.inner.objects.as_ref()
    }

    /// [`reload`](Self::reload) from already scanned manifests.
    pub async fn apply(&self, scanned: Vec<Result<Manifest, ManifestError>>) -> ReloadReport {
        self.apply_within(scanned, FULL_WAIT).await
    }

    /// [`apply`](Self::apply), waiting at most `wait` for the versions it starts loading (those
    /// loading already are taken up if done, never waited for).
    async fn apply_within(
        &self,
        scanned: Vec<Result<Manifest, ManifestError>>,
        wait: Duration,
    ) -> ReloadReport {
        let mut report = ReloadReport::default();
        let mut guests = self.inner.guests.lock().await;
        // Filled again by this reload's loads.
        self.inner
            .permission_refused
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let mut wanted: BTreeMap<String, Manifest> = BTreeMap::new();
        let mut broken_files: BTreeSet<PathBuf> = BTreeSet::new();
        for result in scanned {
            match result {
                Ok(manifest) => {
                    wanted.insert(manifest.name.clone(), manifest);
                }
                Err(err @ ManifestError::Pulling { .. }) => {
                    // Not refused: the pull's end reloads.
                    tracing::info!("{err}; the guest it defines keeps its running version");
                    broken_files.insert(err.path().to_owned());
                }
                Err(err) => {
                    tracing::error!("{err}; the guest it defines keeps its running version");
                    broken_files.insert(err.path().to_owned());
                    report.rejected.push(Skipped::refused(&err));
                }
            }
        }
        // Gone: neither a valid manifest nor a broken file that may still define it.
        let gone: Vec<String> = guests
            .iter()
            .filter(|(name, g)| {
                !wanted.contains_key(*name) && !broken_files.contains(&g.manifest.path)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            if let Some(guest) = guests.remove(&name) {
                self.remove_guest(guest).await;
                report.removed.push(name);
            }
        }
        self.publish(&guests);
        // New guests and changed versions load together; each then starts or swaps in, in
        // name order.
        let mut loads = Vec::new();
        for (name, manifest) in wanted {
            match guests.get(&name) {
                None => {
                    let digests = module_digests(&manifest);
                    loads.push((manifest, None, digests));
                }
                Some(guest) => {
                    let bytes = crate::guest::read_module(&manifest.spec.module);
                    // A build replaces a module by deleting it and writing the new one: while
                    // it is missing (or empty), the running version stays and nothing is
                    // refused — the new file's own event reloads it.
                    let missing = match &bytes {
                        Err(err) => err.kind() == std::io::ErrorKind::NotFound,
                        Ok(bytes) => bytes.is_empty(),
                    };
                    if missing && *guest.manifest == manifest {
                        tracing::info!(
                            "guest {name}: its module {} is missing or empty (being rebuilt?); \
                             version {} keeps running until it is written",
                            manifest.spec.module.display(),
                            guest.controller.version().number
                        );
                        continue;
                    }
                    let digest = bytes
                        .map(|b| crate::guest::module_cache::digest(&b))
                        .unwrap_or_default();
                    // A candidate rebuilt in place is a new candidate.
                    let candidate_digest = candidate_digest(&manifest);
                    if *guest.manifest != manifest
                        || guest.digest != digest
                        || guest.candidate_digest != candidate_digest
                    {
                        let reads = Some(guest.reads.clone());
                        loads.push((manifest, reads, (digest, candidate_digest)));
                    }
                }
            }
        }
        let mut waiting = self.start_loads(loads);
        let deadline = tokio::time::Instant::now() + wait;
        // Each guest starts or swaps as its load ends; past the wait, the rest carry on alone.
        // Only the loads this reload started are waited for (all of them by a reload that
        // waits for everything); one already loading is taken up if it is done.
        loop {
            let waited: Vec<usize> = (0..waiting.len())
                .filter(|&i| waiting[i].2 || wait >= FULL_WAIT || waiting[i].1.task.is_finished())
                .collect();
            if waited.is_empty() {
                break;
            }
            self.publish(&guests);
            let ended = futures::future::select_all(
                waiting
                    .iter_mut()
                    .enumerate()
                    .filter(|(i, _)| waited.contains(i))
                    .map(|(_, (_, loading, _))| &mut loading.task),
            );
            let (joined, at, _) = tokio::select! {
                () = tokio::time::sleep_until(deadline) => break,
                ended = ended => ended,
            };
            let (name, _, _) = waiting.remove(waited[at]);
            let version =
                joined.unwrap_or_else(|err| Err(StartError::LoadPanicked(err.to_string())));
            self.finish_load(&mut guests, name, version, &mut report);
        }
        if !waiting.is_empty() {
            let mut loading = self.inner.loading.lock().unwrap_or_else(|e| e.into_inner());
            for (name, pending, _) in waiting {
                tracing::info!(
                    "guest {name}: its version is still loading after {wait:?}; it is taken up when it is done"
                );
                report.loading.push(name.clone());
                pending
                    .background
                    .detach(pending.task.is_finished(), &self.inner.loads_done);
                loading.insert(name, pending);
            }
        }
        self.publish(&guests);
        *self
            .inner
            .skipped
            .write()
            .unwrap_or_else(|e| e.into_inner()) = report.rejected.clone();
        report
    }

    /// Start loading each of `loads` (the one already loading in the background for the same
    /// manifest and modules taken up instead), each within its tenant's bound; loads in the
    /// background no longer wanted are stopped. The loads by guest name.
    fn start_loads(&self, loads: Vec<ToLoad>) -> Vec<(String, Loading, bool)> {
        let mut pending = self.inner.loading.lock().unwrap_or_else(|e| e.into_inner());
        let mut started = Vec::with_capacity(loads.len());
        for (manifest, reads, digests) in loads {
            let name = manifest.name.clone();
            if let Some(loading) = pending.remove(&name) {
                if loading.manifest == manifest && loading.digests == digests {
                    started.push((name, loading, false));
                    continue;
                }
                loading.task.abort();
            }
            let permits = self
                .inner
                .tenant_loads
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(manifest.tenant.clone())
                .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(TENANT_LOADS_AT_ONCE)))
                .clone();
            let manager = self.clone();
            let to_load = manifest.clone();
            let background = Background::default();
            let ended = background.clone();
            let task = tokio::spawn(async move {
                let _permit = permits.acquire_owned().await;
                let version = manager
                    .load_version(to_load, reads.unwrap_or_default())
                    .await;
                ended.ended(&manager.inner.loads_done);
                version
            });
            started.push((
                name,
                Loading {
                    manifest,
                    digests,
                    task,
                    background,
                },
                true,
            ));
        }
        // What is still loading in the background and no longer wanted stops.
        for (_, loading) in pending.drain() {
            loading.task.abort();
        }
        started
    }

    /// Start or swap `name` to the loaded `version`, or report why it was refused.
    fn finish_load(
        &self,
        guests: &mut BTreeMap<String, Guest>,
        name: String,
        version: Result<Version, StartError>,
        report: &mut ReloadReport,
    ) {
        let Some(guest) = guests.get_mut(&name) else {
            match version {
                Ok(version) => {
                    self.start_guest(guests, version);
                    report.started.push(name);
                }
                Err(reason) => {
                    tracing::error!("guest {name} not started: {reason}");
                    report.rejected.push(Skipped {
                        guest: name,
                        reason: reason.to_string(),
                        code: reason.code(),
                    });
                }
            }
            return;
        };
        match version {
            Ok(version) => {
                self.swap_guest(guest, version);
                report.swapped.push(name);
            }
            Err(reason) => {
                tracing::error!(
                    "guest {name}: new version rejected, version {} ({}) keeps running: {reason}",
                    guest.controller.version().number,
                    guest.digest
                );
                report.rejected.push(Skipped {
                    guest: name,
                    reason: reason.to_string(),
                    code: reason.code(),
                });
            }
        }
    }

    /// Reload on changes to the manifest files in `dir` or the modules they name (debounced by
    /// [`RELOAD_DEBOUNCE`]) and on SIGHUP, until the returned task is aborted.
    pub fn watch(&self, dir: PathBuf) -> Watcher {
        self.watch_sources(Some(dir))
    }

    /// Like [`watch`](Self::watch) for the manifests in `dir` (if any) and, with
    /// [`from_cluster`](ManagerOptions::from_cluster), the guest objects: an object created,
    /// deleted or whose spec changed (its generation) reloads too.
    pub fn watch_sources(&self, dir: Option<PathBuf>) -> Watcher {
        let manager = self.clone();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move { manager.watch_loop(dir, stopped).await });
        Watcher { stop, task }
    }

    async fn watch_loop(
        &self,
        dir: Option<PathBuf>,
        mut stopped: tokio::sync::watch::Receiver<bool>,
    ) {
        use notify::RecursiveMode;
        let (events_tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let relevant = Arc::new(RwLock::new(BTreeSet::<PathBuf>::new()));
        let filter = relevant.clone();
        let debouncer = notify_debouncer_mini::new_debouncer(
            RELOAD_DEBOUNCE,
            move |result: notify_debouncer_mini::DebounceEventResult| match result {
                Ok(events) => {
                    let modules = filter.read().unwrap_or_else(|e| e.into_inner());
                    let matters = events.iter().any(|e| {
                        let yaml = e
                            .path
                            .extension()
                            .is_some_and(|x| x == "yaml" || x == "yml");
                        yaml || modules.contains(&e.path)
                    });
                    if matters {
                        let _ = events_tx.send(());
                    }
                }
                Err(err) => tracing::warn!("watching for manifest and module changes: {err}"),
            },
        );
        let mut debouncer = match debouncer {
            Ok(d) => Some(d),
            Err(err) => {
                tracing::error!("cannot watch files for changes; SIGHUP still reloads: {err}");
                None
            }
        };
        if let (Some(debouncer), Some(dir)) = (&mut debouncer, &dir)
            && let Err(err) = debouncer.watcher().watch(dir, RecursiveMode::Recursive)
        {
            tracing::error!("cannot watch {}: {err}", dir.display());
        }
        let mut watched_dirs: BTreeSet<PathBuf> = BTreeSet::new();
        let mut refresh = |debouncer: &mut Option<
            notify_debouncer_mini::Debouncer<notify::RecommendedWatcher>,
        >,
                           modules: Vec<PathBuf>| {
            let Some(debouncer) = debouncer else { return };
            // Files only: a module in a registry (`oci://…`) is watched by its pull period.
            let absolute: BTreeSet<PathBuf> = modules
                .iter()
                .filter(|m| crate::oci::reference(m).is_none())
                .map(|m| std::fs::canonicalize(m).unwrap_or_else(|_| m.clone()))
                .collect();
            for module in &absolute {
                if let Some(parent) = module.parent()
                    && !dir.as_ref().is_some_and(|dir| parent.starts_with(dir))
                    && watched_dirs.insert(parent.to_owned())
                    && let Err(err) = debouncer
                        .watcher()
                        .watch(parent, RecursiveMode::NonRecursive)
                {
                    tracing::warn!("cannot watch {}: {err}", parent.display());
                }
            }
            let mut paths: BTreeSet<PathBuf> = modules.into_iter().collect();
            paths.extend(absolute);
            *relevant.write().unwrap_or_else(|e| e.into_inner()) = paths;
        };
        let mut modules = self.module_paths(dir.as_deref()).await;
        refresh(&mut debouncer, modules.clone());
        #[cfg(unix)]
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        // What the files looked like at the last reload, told from their metadata alone:
        // opening them (as a reload does) is itself an event, which must not start another.
        let mut seen = Fingerprint::of(dir.as_deref(), &modules);
        // What the objects were: status writes and label edits do not reload.
        let mut objects = self.inner.objects.as_ref().map(ObjectSource::changes);
        let mut seen_objects = self.generations();
        let mut retry = Retry::default();
        let mut resolve = Period::default();
        let mut loads_ended = self.inner.loads_done.subscribe();
        let what = match (&dir, &self.inner.objects) {
            (Some(dir), None) => dir.display().to_string(),
            (Some(dir), Some(_)) => format!("{} and the guest objects", dir.display()),
            (None, _) => "the guest objects".to_owned(),
        };
        loop {
            #[cfg(unix)]
            let hup = async {
                match hangup.as_mut() {
                    Some(h) => {
                        h.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            #[cfg(not(unix))]
            let hup = std::future::pending::<()>();
            let object_changed = async {
                match objects.as_mut() {
                    Some(changes) => {
                        if changes.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                        // Let a burst of edits (kubectl apply -f of a directory) settle.
                        tokio::time::sleep(RELOAD_DEBOUNCE).await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            // Modules pulled by tag: resolved again as their `pull.every` says, whatever else
            // wakes the loop meanwhile.
            resolve.arm(self.pull_interval().await);
            // Whether neither the files nor the objects changed since the last reload. Both are
            // compared whichever woke the loop: a file event that changes nothing can win the
            // race with an object's change (and drop its debounce), which must not be lost.
            let unchanged = || {
                Fingerprint::of(dir.as_deref(), &modules) == seen
                    && self.generations() == seen_objects
            };
            // A reload in progress always completes: stopping is only noticed here, between
            // reloads.
            tokio::select! {
                _ = stopped.wait_for(|s| *s) => return,
                () = resolve.due() => tracing::debug!("resolving the modules' tags again"),
                changed = rx.recv(), if debouncer.is_some() => {
                    if changed.is_none() {
                        return;
                    }
                    if unchanged() {
                        continue;
                    }
                }
                () = object_changed => {
                    if unchanged() {
                        continue;
                    }
                }
                () = hup => tracing::info!("SIGHUP: reloading {what}"),
                () = retry.due() => tracing::info!(
                    "retrying the changes refused {:?} ago",
                    retry.delay
                ),
                guest = self.permission_granted() => tracing::info!(
                    "guest {guest}: the host may now do what it asks; loading it"
                ),
                _ = loads_ended.changed() => tracing::debug!(
                    "a version loading in the background is done: taking it up"
                ),
            }
            while rx.try_recv().is_ok() {}
            if let Some(changes) = objects.as_mut() {
                changes.mark_unchanged();
            }
            modules = self.module_paths(dir.as_deref()).await;
            seen = Fingerprint::of(dir.as_deref(), &modules);
            seen_objects = self.generations();
            // Loads ending from here on start another reload.
            loads_ended.borrow_and_update();
            let refused = self.reload_logged(dir.as_deref(), &what).await;
            // A reload resolves every tag: the next resolve is a period from now.
            resolve.restart();
            retry.after(refused);
            refresh(&mut debouncer, modules.clone());
        }
    }

    /// Resolves (with its name) once the host may do everything some guest refused for its
    /// permissions asks for: checked every [`PERMISSION_RECHECK`]; never while none is refused.
    async fn permission_granted(&self) -> String {
        loop {
            tokio::time::sleep(PERMISSION_RECHECK).await;
            let refused = self
                .inner
                .permission_refused
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            for manifest in refused {
                if crate::access::first_missing(self.inner.cache.api(), &manifest)
                    .await
                    .is_none()
                {
                    return manifest.name.clone();
                }
            }
        }
    }

    /// Reload and log what changed; whether anything was refused.
    async fn reload_logged(&self, dir: Option<&Path>, what: &str) -> bool {
        let result = self.reload_within(dir, LOOP_WAIT).await;
        let counted = match &result {
            Ok(report) if report.is_empty() => "unchanged",
            Ok(report) if report.rejected.is_empty() => "changed",
            _ => "refused",
        };
        self.inner
            .metrics
            .reloads
            .get_or_create(&crate::metrics::ReloadLabels {
                result: counted.into(),
            })
            .inc();
        match result {
            Ok(report) if report.is_empty() => false,
            Ok(report) => {
                tracing::info!(
                    "reloaded {what}: started {:?}, swapped {:?}, removed {:?}, rejected {}",
                    report.started,
                    report.swapped,
                    report.removed,
                    report.rejected.len()
                );
                !report.rejected.is_empty()
            }
            Err(err) => {
                tracing::error!("reloading {what}: {err}; nothing changed");
                true
            }
        }
    }

    /// The module files that matter to a reload of `dir`: those the running guests run and
    /// those the manifests in `dir` name now (a guest refused so far starts when its module
    /// is rebuilt).
    async fn module_paths(&self, dir: Option<&Path>) -> Vec<PathBuf> {
        let files = dir
            .and_then(|dir| Manifest::scan_dir(dir).ok())
            .unwrap_or_default();
        let objects = self
            .inner
            .objects
            .as_ref()
            .map(ObjectSource::scan)
            .unwrap_or_default();
        let mut paths: BTreeSet<PathBuf> = files
            .into_iter()
            .chain(objects)
            .flatten()
            .map(|m| m.spec.module)
            .collect();
        let guests = self.inner.guests.lock().await;
        paths.extend(guests.values().map(|g| g.manifest.spec.module.clone()));
        paths.into_iter().collect()
    }

    /// The running guest named `name`.
    pub fn controller(&self, name: &str) -> Option<Arc<Controller>> {
        self.inner
            .controllers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Every running guest, by name.
    pub fn controllers(&self) -> BTreeMap<String, Arc<Controller>> {
        self.inner
            .controllers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What the last start or reload refused (guests not running, or still running an older
    /// version), and why.
    pub fn skipped(&self) -> Vec<Skipped> {
        self.inner
            .skipped
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The metrics of every guest.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// The metrics text, with the scrape-time series brought up to date.
    pub fn scrape(&self) -> String {
        for controller in self.controllers().values() {
            controller.refresh_metrics();
        }
        self.inner.metrics.encode()
    }

    /// The shared cache.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.inner.cache
    }

    /// Stop every guest (running reconciles get up to `timeout` to finish), then the watches.
    pub async fn shutdown(self, timeout: Duration) {
        for (_, loading) in self
            .inner
            .loading
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            loading.task.abort();
        }
        let mut guests = self.inner.guests.lock().await;
        let stops = guests.values().map(|g| g.controller.shutdown(timeout));
        futures::future::join_all(stops).await;
        guests.clear();
        self.inner.cache.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::Runner;

    #[tokio::test(start_paused = true)]
    async fn a_pull_period_should_fire_on_time_whatever_else_wakes_the_loop() {
        // The watch loop's turns as they go with a busy guest: a status write every second
        // wakes it (and changes nothing), and each turn arms the period again.
        let every = Duration::from_secs(60);
        let start = tokio::time::Instant::now();
        let mut period = Period::default();
        let mut status_writes = tokio::time::interval(Duration::from_secs(1));
        let fired = loop {
            period.arm(Some(every));
            tokio::select! {
                () = period.due() => break tokio::time::Instant::now(),
                _ = status_writes.tick() => {}
            }
        };
        assert_eq!(fired - start, every);
        // Resolved: the next deadline is a period on; a shorter period brings it forward.
        period.restart();
        period.arm(Some(every));
        period.arm(Some(Duration::from_secs(5)));
        period.arm(Some(every));
        let before = tokio::time::Instant::now();
        period.due().await;
        assert_eq!(tokio::time::Instant::now() - before, Duration::from_secs(5));
        period.arm(None);
        assert!(
            tokio::time::timeout(Duration::from_secs(3600), period.due())
                .await
                .is_err(),
            "no module pulled by tag: never due"
        );
    }
    use crate::guest::script::Script;
    use crate::vocab::ListOptions;

    /// The manifest of guest `name` reconciling `for_kind` (a core kind), reading ConfigMaps.
    fn manifest(name: &str, for_kind: &str) -> Manifest {
        let text = format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: {name}}}\nspec:\n  module: {name}.wasm\n  for: {{apiVersion: v1, kind: {for_kind}}}\n  permissions:\n    - {{apiVersion: v1, kind: ConfigMap, verbs: [get, list, watch]}}\n    - {{apiVersion: v1, kind: {for_kind}, verbs: [get, list, watch]}}\n"
        );
        Manifest::parse(Path::new(&format!("{name}.yaml")), &text).expect("manifest")
    }

    /// A manager over an API server in this process, its guests `names` scripted.
    async fn manager(names: &[&str], manifests: Vec<Manifest>) -> Manager {
        let (_, app, stop) = krec_apiserver::in_process(Arc::default()).expect("api server");
        // The server lives as long as the test.
        std::mem::forget(stop);
        let script: Arc<dyn Runner> = Script::new(Vec::new());
        let options = ManagerOptions {
            runners: names
                .iter()
                .map(|n| ((*n).to_owned(), script.clone()))
                .collect(),
            ..Default::default()
        };
        let api = ApiClient::new(kube::Client::new(app, "default"));
        Manager::start_with(api, manifests, options)
            .await
            .expect("manager")
    }

    /// Each informer as `Kind users… (subscribers)`.
    fn informers(manager: &Manager) -> Vec<String> {
        manager
            .cache()
            .inspect()
            .into_iter()
            .map(|i| format!("{} {} ({})", i.gvk.kind, i.users.join(","), i.subscribers))
            .collect()
    }

    fn scanned(manifests: Vec<Manifest>) -> Vec<Result<Manifest, ManifestError>> {
        manifests.into_iter().map(Ok).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_guest_should_hold_its_watches_until_it_goes_and_share_them_meanwhile() {
        let manager = manager(
            &["a", "b"],
            vec![manifest("a", "ConfigMap"), manifest("b", "ConfigMap")],
        )
        .await;
        assert_eq!(informers(&manager), ["ConfigMap a,b (2)"]);

        let report = manager
            .apply(scanned(vec![manifest("b", "ConfigMap")]))
            .await;
        assert_eq!(report.removed, ["a"]);
        assert_eq!(informers(&manager), ["ConfigMap b (1)"], "b still needs it");

        let report = manager.apply(Vec::new()).await;
        assert_eq!(report.removed, ["b"]);
        assert!(informers(&manager).is_empty(), "no guest: no watch");
        manager.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_swap_should_move_the_subscriptions_and_keep_what_the_guest_reads() {
        let manager = manager(&["a"], vec![manifest("a", "Secret")]).await;
        let controller = manager.controller("a").expect("guest a");
        // A read of ConfigMaps, as the guest's `list` makes it: the cache starts their watch.
        let cluster = controller.version().cluster.clone();
        cluster
            .list(
                &Gvk::new("", "v1", "ConfigMap"),
                &ListOptions {
                    namespace: Some("default".into()),
                    ..Default::default()
                },
            )
            .await
            .expect("list");
        assert_eq!(informers(&manager), ["ConfigMap a (0)", "Secret a (1)"]);

        // The new version reconciles ConfigMaps: it subscribes to the same informer, and the
        // Secret watch, which only the old version needed, stops.
        let report = manager
            .apply(scanned(vec![manifest("a", "ConfigMap")]))
            .await;
        assert_eq!(report.swapped, ["a"], "{report:?}");
        assert_eq!(
            controller.version().number,
            1,
            "the same module: the same version of it"
        );
        assert_eq!(informers(&manager), ["ConfigMap a (1)"]);

        // Back to Secrets: the ConfigMap watch stays, for the guest's reads.
        let report = manager.apply(scanned(vec![manifest("a", "Secret")])).await;
        assert_eq!(report.swapped, ["a"], "{report:?}");
        assert_eq!(informers(&manager), ["ConfigMap a (0)", "Secret a (1)"]);

        manager.apply(Vec::new()).await;
        assert!(informers(&manager).is_empty(), "{:?}", informers(&manager));
        drop(cluster);
        manager.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_version_should_leave_the_running_one_and_no_watch_behind() {
        let manager = manager(&["a"], vec![manifest("a", "ConfigMap")]).await;
        let mut refused = manifest("a", "ConfigMap");
        // A second watched kind that the server does not serve.
        refused.spec.owns.push(crate::manifest::KindRef {
            api_version: "example.com/v1".into(),
            kind: "Missing".into(),
            metadata_only: false,
        });
        let report = manager.apply(scanned(vec![refused])).await;
        assert_eq!(report.rejected.len(), 1, "{report:?}");
        assert!(report.rejected[0].reason.contains("Missing"), "{report:?}");
        let controller = manager.controller("a").expect("still running");
        assert_eq!(controller.version().number, 1);
        assert_eq!(informers(&manager), ["ConfigMap a (1)"]);
        manager.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_guest_that_cannot_start_should_leave_no_watch_and_not_stop_the_others() {
        let mut broken = manifest("b", "Secret");
        broken.spec.owns.push(crate::manifest::KindRef {
            api_version: "example.com/v1".into(),
            kind: "Missing".into(),
            metadata_only: false,
        });
        let manager = manager(&["a", "b"], vec![manifest("a", "ConfigMap")]).await;
        let report = manager
            .apply(scanned(vec![manifest("a", "ConfigMap"), broken]))
            .await;
        assert_eq!(report.rejected.len(), 1, "{report:?}");
        assert_eq!(report.rejected[0].guest, "b");
        assert!(manager.controller("b").is_none());
        assert_eq!(
            informers(&manager),
            ["ConfigMap a (1)"],
            "b's Secret watch is gone"
        );
        manager.shutdown(Duration::from_secs(1)).await;
    }
}
