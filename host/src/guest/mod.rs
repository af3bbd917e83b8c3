//! Guests: loading a component, checking it implements the world, and running `reconcile`.
//!
//! A [`GuestModule`] is compiled and pre-instantiated once. Each worker owns a [`GuestWorker`],
//! which keeps its instance across reconciles (about 3–5× cheaper than a fresh one) and throws it
//! away on a trap or a limit breach; with `isolation: per-reconcile` it instantiates afresh for
//! every call. Every reconcile runs under the manifest's time limit (epoch interruption) and
//! memory limit (a [`wasmtime::ResourceLimiter`]).

mod admission;
#[allow(missing_docs)]
pub mod bindings;
pub(crate) mod budget;
mod compile_gate;
pub mod componentize;
pub(crate) mod cpu_clock;
pub mod engine;
pub mod imports;
pub(crate) mod limits;
pub(crate) mod log_budget;
pub mod module_cache;
#[cfg(feature = "native")]
pub mod native;
mod output;
#[cfg(test)]
pub(crate) mod script;
pub(crate) mod state;

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Engine, Store, Trap, UpdateDeadline};
use wasmtime_wasi::WasiCtxBuilder;

pub use admission::{ConversionRefused, Review};
pub use budget::{CPU_BURST, CpuAccount, CpuGovernor, GuestBudgets, MAX_CPU_PAUSE, WriteLimiter};
use cpu_clock::Metered;
pub use limits::{
    GuestLimiter, IDLE_GROWTH_ALLOWANCE, LimitExceeded, MAX_INSTANCES, MAX_MEMORIES,
    MAX_TABLE_ELEMENTS, MAX_TABLES, MemoryPool,
};
pub use log_budget::{LogBudget, MAX_LOG_BYTES_PER_SECOND, MAX_LOG_LINES_PER_SECOND};
pub use module_cache::{ModuleCache, Origin};
pub use output::{GuestOutput, MAX_OUTPUT_LINE_BYTES};
pub use state::HostState;

use crate::cluster::ClusterAccess;
use crate::guest::bindings::extensions::ExtensionsIndices;
use crate::guest::bindings::guest::{GuestIndices, WitAdmissionRequest, WitVerdict};
use crate::guest::bindings::{Reconciler, ReconcilerIndices, WitAction, WitRequest};
use crate::manifest::{Isolation, Manifest};
use krec_core::CallError;

/// A guest that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The module file could not be read.
    #[error("{path}: cannot read module: {source}")]
    Read {
        /// The module file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is a core Wasm module, not a component.
    #[error(
        "{path}: is a core WebAssembly module, not a component; build the guest with `--target wasm32-wasip2`"
    )]
    CoreModule {
        /// The module file.
        path: String,
    },
    /// The file is not WebAssembly at all.
    #[error("{path}: is not a WebAssembly component (no `\\0asm` header)")]
    NotWasm {
        /// The module file.
        path: String,
    },
    /// The component failed to compile: truncated, corrupt, or using unsupported features.
    #[error("{path}: invalid component: {reason}")]
    Compile {
        /// The module file.
        path: String,
        /// Wasmtime's explanation.
        reason: String,
    },
    /// The component does not implement the `krec:reconciler/reconciler` world (or, for a
    /// guest with webhooks, the admission exports).
    #[error("{path}: does not implement the krec:reconciler@0.1 {world} world: {reason}")]
    WrongWorld {
        /// The module file.
        path: String,
        /// `reconciler` or `admission`.
        world: &'static str,
        /// Which import or export does not match.
        reason: String,
    },
}

/// A compiled, pre-instantiated guest component, shared by all of a guest's workers.
pub struct GuestModule {
    manifest: Arc<Manifest>,
    body: Body,
    digest: String,
    origin: Origin,
    budgets: Arc<GuestBudgets>,
    /// Admission instances kept between reviews (`isolation: reuse`).
    admission_pool: std::sync::Mutex<Vec<admission::AdmissionInstance>>,
}

/// A component, pre-instantiated, and where its exports are.
struct Wasm {
    pre: wasmtime::component::InstancePre<HostState>,
    /// `reconcile` (every component has it).
    reconciler: ReconcilerIndices,
    /// Held, never read: it keeps the compiled code shared with other guests of the same module
    /// (see [`ModuleCache::shared_component`]).
    #[allow(dead_code)]
    component: Arc<Component>,
    /// The admission exports, when the component has them (WIT 0.1.1's `guest` world).
    admission: Option<GuestIndices>,
    /// `init` and `map`, when the component has them (WIT 0.1.2's `extensions` world).
    extensions: Option<ExtensionsIndices>,
}

/// What runs a guest's reconciles.
enum Body {
    /// A component.
    Wasm(Box<Wasm>),
    /// Code compiled into the host (see [`Runner`]).
    Runner(Arc<dyn Runner>),
}

/// What a [`Runner`]'s call works with: the guest's manifest, cluster access, metrics and
/// budgets — what a Wasm guest's host calls go through.
#[derive(Clone)]
pub struct RunnerCall<'a> {
    /// The guest's manifest.
    pub manifest: &'a Arc<Manifest>,
    /// Its cluster access (permission checks happen in the host calls a runner makes).
    pub cluster: &'a Arc<dyn ClusterAccess>,
    /// Where host calls are counted.
    pub metrics: Option<Arc<crate::process::metrics::Metrics>>,
    /// Its write and log budgets.
    pub budgets: Arc<GuestBudgets>,
}

/// Runs a guest's reconciles (and `validate` reviews) with code compiled into the host instead
/// of a component: the benchmarks' native arm (`crate::guest::native`, cargo feature `native`), on
/// the same queue, cache, client and permission checks as a Wasm guest. No sandbox.
#[async_trait::async_trait]
pub trait Runner: Send + Sync + fmt::Debug + 'static {
    /// Run one reconcile of `namespace`/`name`; what it returned and what it used.
    async fn reconcile(
        &self,
        call: RunnerCall<'_>,
        namespace: Option<&str>,
        name: &str,
    ) -> (Result<Action, ReconcileError>, Usage);

    /// Whether it answers `validate` reviews.
    fn validates(&self) -> bool;

    /// Answer one `validate` review (`label` names it in errors).
    ///
    /// # Errors
    ///
    /// [`ReconcileError::Trap`] when the code panics; [`ReconcileError::Guest`] when it has no
    /// validator.
    async fn validate(
        &self,
        call: RunnerCall<'_>,
        label: String,
        request: WitAdmissionRequest,
    ) -> Result<WitVerdict, ReconcileError>;
}

impl fmt::Debug for GuestModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuestModule")
            .field("guest", &self.manifest.name)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

/// Layer/version bytes after `\0asm` for a component (as opposed to a core module's `1 0 0 0`).
const COMPONENT_VERSION: [u8; 4] = [0x0d, 0x00, 0x01, 0x00];

/// Check the header and compile `bytes` as a component; errors name `path`.
fn compile(engine: &Engine, path: &str, bytes: &[u8]) -> Result<Component, LoadError> {
    if !bytes.starts_with(b"\0asm") {
        return Err(LoadError::NotWasm { path: path.into() });
    }
    if bytes.len() >= 8 && bytes[4..8] == [1, 0, 0, 0] {
        return Err(LoadError::CoreModule { path: path.into() });
    }
    if bytes.len() >= 8 && bytes[4..8] != COMPONENT_VERSION {
        return Err(LoadError::Compile {
            path: path.into(),
            reason: format!(
                "unsupported component encoding version {:02x?}",
                &bytes[4..8]
            ),
        });
    }
    // Compiled off the reconcile path (a loader's blocking thread), a few at a time.
    let _permit = compile_gate::gate().enter();
    Component::new(engine, bytes).map_err(|err| LoadError::Compile {
        path: path.into(),
        reason: one_line(&err),
    })
}

/// An error chain as one line: `outer: inner: root`.
fn one_line(err: &wasmtime::Error) -> String {
    err.chain()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(": ")
        .replace('\n', " ")
}

/// The engines guests run on, each with its linker: one whose instances are allocated on
/// demand, for guests that keep an instance across calls (`isolation: reuse`), and one whose
/// instances come from a pool with resident slots, for guests instantiated per call
/// (`isolation: per-reconcile`). See [`crate::guest::engine`].
pub struct Engines {
    reuse: (Engine, Linker<HostState>),
    fresh: (Engine, Linker<HostState>),
}

impl Engines {
    /// Both engines and their linkers.
    ///
    /// # Errors
    ///
    /// When an engine or a linker cannot be built.
    pub fn new() -> wasmtime::Result<Self> {
        let with_linker = |engine: Engine| -> wasmtime::Result<_> {
            let linker = new_linker(&engine)?;
            Ok((engine, linker))
        };
        Ok(Engines {
            reuse: with_linker(crate::guest::engine::new_engine()?)?,
            fresh: with_linker(crate::guest::engine::new_pooled_engine()?)?,
        })
    }

    /// The engine and linker a guest with `isolation` runs on.
    pub fn for_isolation(&self, isolation: Isolation) -> (&Engine, &Linker<HostState>) {
        let (engine, linker) = match isolation {
            Isolation::Reuse => &self.reuse,
            Isolation::PerReconcile => &self.fresh,
        };
        (engine, linker)
    }
}

/// The linker every guest is instantiated with: WASI (no files, sockets or environment) and the
/// host's `client`, `events` and `log`.
pub fn new_linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    Reconciler::add_to_linker::<_, wasmtime::component::HasSelf<HostState>>(&mut linker, |s| s)?;
    crate::guest::bindings::guest::krec::reconciler::reader::add_to_linker::<
        _,
        wasmtime::component::HasSelf<HostState>,
    >(&mut linker, |s| s)?;
    Ok(linker)
}

impl GuestModule {
    /// Load the module named by `manifest`, compile it and check it implements the world.
    pub fn load(
        engine: &Engine,
        linker: &Linker<HostState>,
        manifest: Arc<Manifest>,
    ) -> Result<Self, LoadError> {
        Self::load_cached(engine, linker, manifest, &ModuleCache::disabled())
    }

    /// Like [`load`](Self::load), taking the compiled component from `cache` when it is there
    /// and storing it otherwise.
    pub fn load_cached(
        engine: &Engine,
        linker: &Linker<HostState>,
        manifest: Arc<Manifest>,
        cache: &ModuleCache,
    ) -> Result<Self, LoadError> {
        // A pulled module is named as the manifest names it, not by where it is kept.
        let path = manifest
            .module_ref
            .clone()
            .unwrap_or_else(|| manifest.spec.module.display().to_string());
        let bytes = read_module(&manifest.spec.module).map_err(|source| LoadError::Read {
            path: path.clone(),
            source,
        })?;
        let (wasm, digest, origin) = prepare(engine, linker, &path, &bytes, cache)?;
        needs_exports(&manifest, &path, &wasm)?;
        Ok(GuestModule {
            budgets: Arc::new(GuestBudgets::new(
                &manifest,
                &CpuGovernor::new(),
                &MemoryPool::unlimited(),
            )),
            manifest,
            body: Body::Wasm(Box::new(wasm)),
            digest,
            origin,
            admission_pool: Default::default(),
        })
    }

    /// Like [`load`](Self::load), from bytes; `path` names them in errors.
    pub fn from_bytes(
        engine: &Engine,
        linker: &Linker<HostState>,
        manifest: Arc<Manifest>,
        path: &str,
        bytes: &[u8],
    ) -> Result<Self, LoadError> {
        let (wasm, digest, origin) =
            prepare(engine, linker, path, bytes, &ModuleCache::disabled())?;
        needs_exports(&manifest, path, &wasm)?;
        Ok(GuestModule {
            budgets: Arc::new(GuestBudgets::new(
                &manifest,
                &CpuGovernor::new(),
                &MemoryPool::unlimited(),
            )),
            manifest,
            body: Body::Wasm(Box::new(wasm)),
            digest,
            origin,
            admission_pool: Default::default(),
        })
    }

    /// A guest whose reconciles (and `validate` reviews) `runner` runs, compiled into the
    /// host, in place of the module its manifest names (which is not read). No sandbox.
    pub fn with_runner(manifest: Arc<Manifest>, runner: Arc<dyn Runner>) -> Self {
        let digest = format!("native:{}", manifest.name);
        GuestModule {
            budgets: Arc::new(GuestBudgets::new(
                &manifest,
                &CpuGovernor::new(),
                &MemoryPool::unlimited(),
            )),
            manifest,
            body: Body::Runner(runner),
            digest,
            origin: Origin::Native,
            admission_pool: Default::default(),
        }
    }

    /// Whether the component was compiled for this load or taken from the module cache.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// The guest's manifest.
    pub fn manifest(&self) -> &Arc<Manifest> {
        &self.manifest
    }

    /// The guest's name.
    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    /// The guest's budgets (log, CPU, writes), shared by its workers and instances.
    pub fn budgets(&self) -> &Arc<GuestBudgets> {
        &self.budgets
    }

    /// Govern the guest's CPU with `governor` (the host's, shared by all its guests) rather
    /// than a governor of its own. Call before the module is shared.
    #[must_use]
    pub fn governed_by(
        mut self,
        governor: &Arc<CpuGovernor>,
        host_memory: &Arc<MemoryPool>,
    ) -> Self {
        self.budgets = Arc::new(GuestBudgets::new(&self.manifest, governor, host_memory));
        self
    }

    /// SHA-256 of the module bytes, `sha256:<hex>`: identifies the loaded version.
    pub fn digest(&self) -> &str {
        &self.digest
    }
}

/// A guest must export what its manifest uses: the admission functions for webhooks or a
/// conversion, `init` for a configuration and `map` for watches mapped by the guest.
fn needs_exports(manifest: &Manifest, path: &str, wasm: &Wasm) -> Result<(), LoadError> {
    let spec = &manifest.spec;
    let name = &manifest.name;
    if wasm.admission.is_none() && (!spec.webhooks.is_empty() || spec.conversion.is_some()) {
        return Err(LoadError::WrongWorld {
            path: path.into(),
            world: "admission",
            reason: format!(
                "guest {name} declares webhooks or a conversion but its component exports no validate/mutate/convert: build it with krec-guest 0.1.1 or later and export!(validator: …), export!(mutator: …) or export!(converter: …)"
            ),
        });
    }
    if wasm.extensions.is_none() {
        let uses = if spec.watches.iter().any(|w| w.map_by_guest) {
            Some("watches with mapByGuest")
        } else if spec.config.is_some() {
            Some("spec.config")
        } else {
            None
        };
        if let Some(uses) = uses {
            return Err(LoadError::WrongWorld {
                path: path.into(),
                world: "extensions",
                reason: format!(
                    "guest {name}'s manifest has {uses} but its component exports no init/map (WIT krec:reconciler@0.1.2): rebuild it with this release's krec-guest"
                ),
            });
        }
    }
    Ok(())
}

/// Compile `bytes` (or take them from `cache`) and check the component implements the world;
/// returns the pre-instantiated component with the exports it has, its digest and where it
/// came from. Errors name `path`.
fn prepare(
    engine: &Engine,
    linker: &Linker<HostState>,
    path: &str,
    bytes: &[u8],
    cache: &ModuleCache,
) -> Result<(Wasm, String, Origin), LoadError> {
    let (component, origin) =
        cache.shared_component(engine, bytes, || compile(engine, path, bytes))?;
    let wrong_world = |err: wasmtime::Error| LoadError::WrongWorld {
        path: path.into(),
        world: "reconciler",
        reason: one_line(&err),
    };
    let pre = linker.instantiate_pre(&component).map_err(wrong_world)?;
    let reconciler = ReconcilerIndices::new(&pre).map_err(wrong_world)?;
    // A 0.1.0 component has no admission exports, a 0.1.1 one no `init` and `map`.
    let admission = GuestIndices::new(&pre).ok();
    let extensions = ExtensionsIndices::new(&pre).ok();
    let wasm = Wasm {
        pre,
        reconciler,
        component,
        admission,
        extensions,
    };
    Ok((wasm, module_cache::digest(bytes), origin))
}

/// The configuration a guest refused (its `init` export returned an error).
#[derive(Debug, thiserror::Error)]
#[error("the guest refused its configuration: {0}")]
pub struct ConfigRefused(pub String);

impl GuestModule {
    /// Instantiate the component in `store` and configure the instance: a 0.1.2 component's
    /// `init` gets the manifest's `spec.config` (JSON `null` without one) before anything else.
    ///
    /// # Errors
    ///
    /// The instantiation's error, or [`ConfigRefused`] with the guest's message.
    async fn start_instance(
        &self,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<wasmtime::component::Instance> {
        let Body::Wasm(wasm) = &self.body else {
            return Err(wasmtime::format_err!(
                "guest {} runs compiled-in code: it has no instance",
                self.manifest.name
            ));
        };
        let instance = wasm.pre.instantiate_async(&mut *store).await?;
        if let Some(extensions) = &wasm.extensions {
            let config = self.config_json();
            let bindings = extensions.load(&mut *store, &instance)?;
            if let Err(message) = bindings.call_init(&mut *store, &config).await? {
                let message: String = message.chars().take(MAX_ERROR_MESSAGE_BYTES).collect();
                let message = krec_core::printable(&message).into_owned();
                return Err(ConfigRefused(message).into());
            }
        }
        Ok(instance)
    }

    /// The manifest's `spec.config` as JSON text (`null` without one).
    fn config_json(&self) -> String {
        match &self.manifest.spec.config {
            Some(config) => config.to_string(),
            None => "null".into(),
        }
    }
}

/// A module file's bytes: a regular file of at most [`MAX_MODULE_BYTES`](crate::manifest::files::MAX_MODULE_BYTES).
pub fn read_module(path: &Path) -> std::io::Result<Vec<u8>> {
    crate::manifest::files::read_bounded(path, crate::manifest::files::MAX_MODULE_BYTES)
}

/// Check that a module file is a component implementing the world; returns its digest and
/// whether it exports the admission functions too.
pub fn check_module(
    engine: &Engine,
    linker: &Linker<HostState>,
    path: &Path,
) -> Result<(String, bool), LoadError> {
    let shown = path.display().to_string();
    let bytes = read_module(path).map_err(|source| LoadError::Read {
        path: shown.clone(),
        source,
    })?;
    prepare(engine, linker, &shown, &bytes, &ModuleCache::disabled())
        .map(|(wasm, digest, _)| (digest, wasm.admission.is_some()))
}

/// Longest error message a guest may return; the rest is cut, so a guest cannot write
/// megabytes into the log on every retry.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 4096;

/// A guest's error with its message cut at [`MAX_ERROR_MESSAGE_BYTES`].
pub(crate) fn bounded_error(error: CallError) -> CallError {
    error.truncated(MAX_ERROR_MESSAGE_BYTES)
}

/// What a reconcile asks the host to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Forget the key.
    Done,
    /// Rate-limited requeue.
    Requeue,
    /// Requeue after a delay.
    RequeueAfter(Duration),
}

/// Why a guest trapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TrapCause {
    /// The reconcile exceeded `limits.timeout`.
    Timeout,
    /// The guest tried to grow memory (or tables, instances) beyond its limits.
    OutOfMemory,
    /// The guest panicked or hit `unreachable`.
    Panic,
    /// The guest overflowed its stack: the host-managed call stack, or the shadow stack in its
    /// linear memory (deep recursion).
    StackOverflow,
    /// The guest accessed memory out of bounds (an overflow of the shadow stack a Rust guest
    /// keeps in linear memory is told apart by its address and counted as `StackOverflow`).
    MemoryFault,
    /// Instantiation failed (e.g. the start function trapped).
    Instantiate,
    /// Any other trap.
    Other,
}

impl TrapCause {
    /// Short name for logs and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            TrapCause::Timeout => "timeout",
            TrapCause::OutOfMemory => "out_of_memory",
            TrapCause::Panic => "panic",
            TrapCause::StackOverflow => "stack_overflow",
            TrapCause::MemoryFault => "memory_fault",
            TrapCause::Instantiate => "instantiate",
            TrapCause::Other => "other",
        }
    }
}

impl fmt::Display for TrapCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a reconcile failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReconcileError {
    /// The guest returned an error value.
    #[error("guest {guest} returned an error for {request}: {error}")]
    Guest {
        /// The guest.
        guest: String,
        /// The request.
        request: String,
        /// The guest's error.
        error: CallError,
    },
    /// The guest trapped; its instance was discarded.
    #[error("guest {guest} trapped ({cause}) reconciling {request}: {message}")]
    Trap {
        /// The guest.
        guest: String,
        /// The request.
        request: String,
        /// Classified cause.
        cause: TrapCause,
        /// Wasmtime's description, one line.
        message: String,
    },
    /// The guest's `init` refused the manifest's `spec.config`.
    #[error("{path}: guest {guest} refused its configuration: {message}")]
    Config {
        /// The guest.
        guest: String,
        /// The manifest file.
        path: String,
        /// The guest's message, naming the field (`spec.config.period: …`).
        message: String,
    },
}

/// `timeout` from now, saturating far in the future rather than overflowing.
fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// Extra time past `limits.timeout` before a reconcile blocked in a host call (where epochs do not
/// reach) is abandoned.
pub const HOST_CALL_GRACE: Duration = Duration::from_secs(1);

/// The error an epoch callback raises when a reconcile runs past its deadline.
#[derive(Debug, thiserror::Error)]
#[error("reconcile exceeded its time limit of {0:?}")]
struct DeadlineExceeded(Duration);

fn classify(err: &wasmtime::Error) -> TrapCause {
    if err.downcast_ref::<DeadlineExceeded>().is_some() {
        return TrapCause::Timeout;
    }
    if err.downcast_ref::<LimitExceeded>().is_some() {
        return TrapCause::OutOfMemory;
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::StackOverflow) => TrapCause::StackOverflow,
        Some(Trap::UnreachableCodeReached) => TrapCause::Panic,
        Some(Trap::Interrupt) => TrapCause::Timeout,
        Some(Trap::AllocationTooLarge) => TrapCause::OutOfMemory,
        Some(Trap::MemoryOutOfBounds) if shadow_stack_overflow(err) => TrapCause::StackOverflow,
        Some(Trap::MemoryOutOfBounds) => TrapCause::MemoryFault,
        // Creating more instances, tables or memories than allowed fails instantiation.
        _ if one_line(err).contains("resource limit exceeded") => TrapCause::OutOfMemory,
        _ => TrapCause::Other,
    }
}

/// Lowest faulting address taken for an overflow of a guest's shadow stack. Rust (and C) wasm32
/// guests keep their stack in linear memory, below `__stack_pointer`, growing down towards 0;
/// overflowing it wraps the 32-bit stack pointer to just under 4 GiB, far past any memory a
/// guest can have (its limit is at most 4 GiB and a fault there is never an honest access).
const SHADOW_STACK_WRAP: u64 = 0xFFF0_0000;

/// Whether an out-of-bounds trap is a shadow-stack overflow: wasmtime reports the faulting
/// address ("memory fault at wasm address 0x… in linear memory of size 0x…").
fn shadow_stack_overflow(err: &wasmtime::Error) -> bool {
    let text = one_line(err);
    let Some(rest) = text.split("memory fault at wasm address 0x").nth(1) else {
        return false;
    };
    let hex: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
    u64::from_str_radix(&hex, 16).is_ok_and(|address| address >= SHADOW_STACK_WRAP)
}

/// The random bytes a replay's guest reads, in a cycle: fixed, and without a short period (an
/// xorshift sequence), so that a guest seeding from them sees no pattern.
fn replay_random_bytes() -> Vec<u8> {
    let mut state: u64 = 0x6b72_6563_7265_706c;
    (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

/// A store for one of `module`'s instances: no WASI files, sockets or environment (clocks and
/// random allowed), the manifest's memory limit, and an epoch callback that traps past the
/// deadline and otherwise yields (held back for the CPU budget when it is spent).
fn new_store(
    module: &GuestModule,
    engine: &Engine,
    cluster: &Arc<dyn ClusterAccess>,
    metrics: Option<Arc<crate::process::metrics::Metrics>>,
    clock: Option<&SetClock>,
) -> Store<HostState> {
    let manifest = &module.manifest;
    let name = manifest.name.as_str();
    let mut wasi = WasiCtxBuilder::new();
    let version = manifest.version_role();
    wasi.stdout(GuestOutput::new(
        name,
        "stdout",
        version,
        module.budgets.clone(),
    ))
    .stderr(GuestOutput::new(
        name,
        "stderr",
        version,
        module.budgets.clone(),
    ))
    // WASI's argv: the guest's name as the program's name (Go's `os.Args[0]`, which k8s.io/klog
    // reads at start-up; a guest is never given arguments).
    .args(&[name])
    .allow_tcp(false)
    .allow_udp(false)
    .allow_ip_name_lookup(false);
    if let Some(clock) = clock {
        // A replay's run: the recorded clock, and every source of randomness fixed — the seed
        // Rust's `HashMap`s take their order from, and the "secure" random bytes Go's runtime
        // seeds its map iteration and `math/rand` from — so that the same inputs give the same
        // writes.
        wasi.wall_clock(clock.clone())
            .insecure_random_seed(0x6b72_6563)
            .secure_random(wasmtime_wasi::Deterministic::new(replay_random_bytes()))
            .insecure_random(wasmtime_wasi::Deterministic::new(replay_random_bytes()));
    }
    let wasi = wasi.build();
    let limits = GuestLimiter::new(
        usize::try_from(manifest.spec.limits.memory).unwrap_or(usize::MAX),
        module.budgets.memory.clone(),
    );
    let state = HostState {
        manifest: manifest.clone(),
        cluster: cluster.clone(),
        request: String::new(),
        deadline: deadline_after(manifest.spec.limits.timeout),
        limits,
        host_time: Duration::ZERO,
        first_call: None,
        metrics,
        budgets: module.budgets.clone(),
        cpu_paused: Duration::ZERO,
        read_only: false,
        wasi,
        table: ResourceTable::new(),
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limits);
    let timeout = manifest.spec.limits.timeout;
    store.epoch_deadline_callback(move |mut ctx| {
        let state = ctx.data_mut();
        if Instant::now() >= state.deadline {
            return Err(DeadlineExceeded(timeout).into());
        }
        Ok(match state.charge_cpu() {
            Some(pause) => UpdateDeadline::YieldCustom(1, Box::pin(tokio::time::sleep(pause))),
            None => UpdateDeadline::Yield(1),
        })
    });
    store.set_epoch_deadline(1);
    store
}

/// A wall clock a worker's guests read instead of the host's: set to a recorded time, so that
/// a replayed reconcile sees the clock it first ran at.
#[derive(Clone, Debug, Default)]
pub struct SetClock(Arc<std::sync::atomic::AtomicU64>);

impl SetClock {
    /// Set the time, in milliseconds since the Unix epoch.
    pub fn set_ms(&self, ms: u64) {
        self.0.store(ms, std::sync::atomic::Ordering::Relaxed);
    }
}

impl wasmtime_wasi::HostWallClock for SetClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        Duration::from_millis(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// A live instance: its store and the typed handle to its exports.
struct Instance {
    store: Store<HostState>,
    bindings: Reconciler,
}

/// One worker's handle on a guest: runs reconciles, keeping or discarding its instance as the
/// isolation policy and traps dictate.
pub struct GuestWorker {
    module: Arc<GuestModule>,
    cluster: Arc<dyn ClusterAccess>,
    metrics: Option<Arc<crate::process::metrics::Metrics>>,
    instance: Option<Instance>,
    last_usage: Option<Usage>,
    clock: Option<SetClock>,
}

/// What the last reconcile used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// Time running guest code: the reconcile's duration less the time spent in host calls.
    pub guest_time: Duration,
    /// The instance's largest linear memory so far, in bytes.
    pub memory_peak: usize,
    /// When the guest's reconcile was entered (its instance ready, the request passed).
    pub entered: Instant,
    /// When its first host call started, if it made one.
    pub first_call: Option<Instant>,
}

impl GuestWorker {
    /// A worker for `module` whose host calls go to `cluster`. No instance is created until the
    /// first reconcile.
    pub fn new(module: Arc<GuestModule>, cluster: Arc<dyn ClusterAccess>) -> Self {
        GuestWorker {
            module,
            cluster,
            metrics: None,
            instance: None,
            last_usage: None,
            clock: None,
        }
    }

    /// Give this worker's guests `clock` as their wall clock (a replay's).
    pub fn with_clock(mut self, clock: SetClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Count this worker's host calls in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::process::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// What the last reconcile that ran to its end (or returned an error) used.
    pub fn last_usage(&self) -> Option<Usage> {
        self.last_usage
    }

    /// The module this worker runs.
    pub fn module(&self) -> &Arc<GuestModule> {
        &self.module
    }

    /// Whether the worker holds a live instance (it does between reconciles unless the last one
    /// trapped or isolation is per-reconcile).
    pub fn has_instance(&self) -> bool {
        self.instance.is_some()
    }

    /// Whether the instance it keeps has grown more than [`IDLE_GROWTH_ALLOWANCE`] past its
    /// size when new: one to give back once the worker has been idle a while
    /// ([`release_grown_instance`](Self::release_grown_instance)).
    pub fn holds_grown_instance(&self) -> bool {
        self.instance
            .as_ref()
            .is_some_and(|i| !i.store.data().limits.worth_keeping())
    }

    /// Drop a kept instance that has grown past the allowance, giving its memory back (the
    /// next reconcile starts a fresh one). A busy worker keeps its grown instance — growing it
    /// again every time would cost page faults — and an idle one gives it back.
    pub fn release_grown_instance(&mut self) {
        if self.holds_grown_instance() {
            self.instance = None;
        }
    }

    /// Drop the kept instance, if any, giving back its memory and stack; the next reconcile
    /// starts a fresh one. For a worker idle for [`IDLE_INSTANCE`](crate::controller::IDLE_INSTANCE).
    pub fn release_instance(&mut self) {
        self.instance = None;
    }

    async fn instantiate(
        module: &GuestModule,
        cluster: &Arc<dyn ClusterAccess>,
        metrics: Option<Arc<crate::process::metrics::Metrics>>,
        clock: Option<&SetClock>,
    ) -> wasmtime::Result<Instance> {
        let Body::Wasm(wasm) = &module.body else {
            return Err(wasmtime::format_err!(
                "guest {} runs compiled-in code: it has no instance",
                module.manifest.name
            ));
        };
        let mut store = new_store(module, wasm.pre.engine(), cluster, metrics, clock);
        let instance = module.start_instance(&mut store).await?;
        let bindings = wasm.reconciler.load(&mut store, &instance)?;
        store.data_mut().limits.mark_ready();
        Ok(Instance { store, bindings })
    }

    /// Create the instance now rather than at the first reconcile. This runs the component's
    /// start functions, so a module that traps on load is caught before it is swapped in.
    ///
    /// # Errors
    ///
    /// [`ReconcileError::Trap`] with the cause (`instantiate` for a failing start function).
    pub async fn warm_up(&mut self) -> Result<(), ReconcileError> {
        if self.instance.is_some() || matches!(self.module.body, Body::Runner(..)) {
            return Ok(());
        }
        let (module, cluster) = (self.module.clone(), self.cluster.clone());
        // `init` runs under the reconcile's limits: epochs stop a loop; a guest blocked in a
        // host call (sleeping through WASI, a hung API server) is abandoned at the outer bound,
        // so it cannot hold up `krec check`, the host's start or a reload.
        let timeout = module.manifest.spec.limits.timeout;
        let started = tokio::time::timeout(
            timeout.saturating_add(HOST_CALL_GRACE),
            Metered::new(
                module.budgets.cpu.clone(),
                Self::instantiate(&module, &cluster, self.metrics.clone(), self.clock.as_ref()),
            ),
        )
        .await
        .unwrap_or_else(|_| {
            Err(wasmtime::Error::from(DeadlineExceeded(timeout))
                .context("init blocked in a host call"))
        });
        match started {
            Ok(instance) => {
                if module.manifest.spec.isolation == Isolation::Reuse {
                    self.instance = Some(instance);
                }
                Ok(())
            }
            Err(err) => Err(match err.downcast_ref::<ConfigRefused>() {
                Some(refused) => ReconcileError::Config {
                    guest: module.manifest.name.clone(),
                    path: module.manifest.path.display().to_string(),
                    message: refused.0.clone(),
                },
                None => ReconcileError::Trap {
                    guest: module.manifest.name.clone(),
                    request: "(instantiation)".into(),
                    cause: match classify(&err) {
                        TrapCause::Other => TrapCause::Instantiate,
                        cause => cause,
                    },
                    message: one_line(&err),
                },
            }),
        }
    }

    /// Run one reconcile of `request` (`namespace`, `name`).
    ///
    /// # Errors
    ///
    /// [`ReconcileError::Guest`] when the guest returns an error; [`ReconcileError::Trap`] when it
    /// traps or breaks a limit, after which the instance is discarded.
    pub async fn reconcile(
        &mut self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Action, ReconcileError> {
        // A reconcile that traps reports no usage (not the previous one's).
        self.last_usage = None;
        if let Body::Runner(runner) = &self.module.body {
            let call = RunnerCall {
                manifest: &self.module.manifest,
                cluster: &self.cluster,
                metrics: self.metrics.clone(),
                budgets: self.module.budgets.clone(),
            };
            let (result, usage) = runner.reconcile(call, namespace, name).await;
            self.last_usage = Some(usage);
            return result;
        }
        let request = krec_core::KeyRef { namespace, name }.to_string();
        let guest = self.module.manifest.name.clone();
        let trap = |cause, err: &wasmtime::Error| ReconcileError::Trap {
            guest: guest.clone(),
            request: request.clone(),
            cause,
            message: one_line(err),
        };
        let timeout = self.module.manifest.spec.limits.timeout;
        // Epoch interruption stops guest code at its deadline; the outer timeout also bounds time
        // spent blocked in host calls (a guest sleeping through WASI, a hung API server).
        let outer = timeout.saturating_add(HOST_CALL_GRACE);
        // A guest over its CPU budget waits before it starts: short reconciles never meet an
        // epoch tick, so this is where a flood of them is held back.
        while let Some(pause) = self.module.budgets.cpu.debt() {
            self.module.budgets.cpu.held_back(pause);
            tokio::time::sleep(pause).await;
        }
        // The future owns what it uses (a `&self` held across awaits would need the store to be
        // `Sync`, which WASI's context is not).
        let kept = self.instance.take();
        let (module, cluster) = (self.module.clone(), self.cluster.clone());
        let metrics = self.metrics.clone();
        let clock = self.clock.clone();
        let request_text = request.clone();
        let run = async move {
            let mut instance = match kept {
                Some(instance) => instance,
                None => Self::instantiate(&module, &cluster, metrics, clock.as_ref())
                    .await
                    .map_err(|err| {
                        let cause = match classify(&err) {
                            TrapCause::Other => TrapCause::Instantiate,
                            cause => cause,
                        };
                        (cause, err)
                    })?,
            };
            let state = instance.store.data_mut();
            state.request = request_text;
            state.host_time = Duration::ZERO;
            state.first_call = None;
            state.cpu_paused = Duration::ZERO;
            state.deadline = deadline_after(timeout);
            instance.store.set_epoch_deadline(1);
            let wit_request = WitRequest {
                namespace: namespace.map(str::to_owned),
                name: name.to_owned(),
            };
            let started = Instant::now();
            let outcome = instance
                .bindings
                .call_reconcile(&mut instance.store, &wit_request)
                .await;
            let state = instance.store.data();
            let usage = Usage {
                guest_time: started
                    .elapsed()
                    .saturating_sub(state.host_time)
                    .saturating_sub(state.cpu_paused),
                memory_peak: state.limits.memory_peak(),
                entered: started,
                first_call: state.first_call,
            };
            match outcome {
                Ok(result) => Ok((instance, result, usage)),
                // The instance may be mid-way through anything: it is dropped, never run again.
                Err(err) => Err((classify(&err), err)),
            }
        };
        let run = Metered::new(self.module.budgets.cpu.clone(), run);
        let (instance, result, usage) = match tokio::time::timeout(outer, run).await {
            Ok(Ok(done)) => done,
            Ok(Err((cause, err))) => return Err(trap(cause, &err)),
            Err(_) => {
                let err = wasmtime::Error::from(DeadlineExceeded(timeout))
                    .context("blocked in a host call");
                return Err(trap(TrapCause::Timeout, &err));
            }
        };
        self.last_usage = Some(usage);
        if self.module.manifest.spec.isolation == Isolation::Reuse {
            self.instance = Some(instance);
        }
        match result {
            Ok(WitAction::Done) => Ok(Action::Done),
            Ok(WitAction::Requeue) => Ok(Action::Requeue),
            Ok(WitAction::RequeueAfter(ms)) => Ok(Action::RequeueAfter(Duration::from_millis(ms))),
            Err(error) => Err(ReconcileError::Guest {
                guest,
                request,
                error: bounded_error(error.into()),
            }),
        }
    }
}
