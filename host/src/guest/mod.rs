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
pub mod dev_source;
pub mod engine;
pub mod imports;
pub mod ledger;
pub(crate) mod limits;
pub(crate) mod log_budget;
pub mod module_cache;
#[cfg(feature = "native")]
pub mod native;
mod output;
#[cfg(test)]
pub(crate) mod script;
pub(crate) mod state;
mod trap;
mod worker;

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store};

pub use admission::{ConversionRefused, Review};
pub use budget::{CPU_BURST, CpuAccount, CpuGovernor, GuestBudgets, MAX_CPU_PAUSE, WriteLimiter};
pub use ledger::{Ledger, Totals};
pub use limits::{
    GuestLimiter, IDLE_GROWTH_ALLOWANCE, LimitExceeded, MAX_INSTANCES, MAX_MEMORIES,
    MAX_TABLE_ELEMENTS, MAX_TABLES, MemoryPool,
};
pub use log_budget::{LogBudget, MAX_LOG_BYTES_PER_SECOND, MAX_LOG_LINES_PER_SECOND};
pub use module_cache::{ModuleCache, Origin};
pub use output::{GuestOutput, MAX_OUTPUT_LINE_BYTES};
pub use state::HostState;
use trap::{DeadlineExceeded, classify, deadline_after};
pub use trap::{HOST_CALL_GRACE, ReconcileError, TrapCause};
use worker::new_store;
pub use worker::{GuestWorker, SetClock, Usage};

use crate::cluster::ClusterAccess;
use crate::guest::bindings::extensions::ExtensionsIndices;
use crate::guest::bindings::guest::{GuestIndices, WitAdmissionRequest, WitVerdict};
use crate::guest::bindings::{Reconciler, ReconcilerIndices};
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
    /// A dev build's sources, mounted into its instances (`krec dev` only).
    dev_source: Option<Arc<dev_source::DevSource>>,
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
    let _permit = compile_gate::gate(bytes.len()).enter();
    compile_gate::on_own_threads(|| Component::new(engine, bytes)).map_err(|err| {
        LoadError::Compile {
            path: path.into(),
            reason: one_line(&err),
        }
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
        Self::compiled_by(engine::Compiler::Cranelift)
    }

    /// Both engines and their linkers, guests compiled by `compiler` — by Cranelift, with a
    /// warning, where Winch is unavailable (a target it does not support).
    ///
    /// # Errors
    ///
    /// When an engine or a linker cannot be built.
    pub fn compiled_by(compiler: engine::Compiler) -> wasmtime::Result<Self> {
        let with_linker = |engine: Engine| -> wasmtime::Result<_> {
            let linker = new_linker(&engine)?;
            Ok((engine, linker))
        };
        let build = |compiler| -> wasmtime::Result<Self> {
            Ok(Engines {
                reuse: with_linker(engine::new_engine_compiled_by(compiler)?)?,
                fresh: with_linker(engine::new_pooled_engine(compiler)?)?,
            })
        };
        match build(compiler) {
            Err(err) if compiler != engine::Compiler::Cranelift => {
                tracing::warn!(
                    "guests are compiled by Cranelift: {compiler:?} is unavailable here: {err:#}"
                );
                build(engine::Compiler::Cranelift)
            }
            built => built,
        }
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

/// The linker every guest is instantiated with: WASI (no sockets or environment; files only a
/// dev build's sources under `krec dev`), the host's `client`, `events`, `log` and `reader`, and
/// `krec:dev/sources` for dev builds' loaders.
pub fn new_linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    Reconciler::add_to_linker::<_, wasmtime::component::HasSelf<HostState>>(&mut linker, |s| s)?;
    crate::guest::bindings::guest::krec::reconciler::reader::add_to_linker::<
        _,
        wasmtime::component::HasSelf<HostState>,
    >(&mut linker, |s| s)?;
    // A TypeScript dev build's loader reads its bundle through `krec:dev/sources`.
    linker.instance(dev_source::INTERFACE)?.func_wrap(
        "read",
        |store: wasmtime::StoreContextMut<'_, HostState>, (path,): (String,)| {
            Ok((dev_source::read(store.data().dev_source.as_deref(), &path),))
        },
    )?;
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
        Self::load_cached_telling(engine, linker, manifest, cache, |_| {})
    }

    /// Like [`load_cached`](Self::load_cached), telling `read` the digest of the module file
    /// as soon as it is read (before it is compiled): what a reload compares a load still
    /// running with.
    pub fn load_cached_telling(
        engine: &Engine,
        linker: &Linker<HostState>,
        manifest: Arc<Manifest>,
        cache: &ModuleCache,
        read: impl FnOnce(&str),
    ) -> Result<Self, LoadError> {
        // A pulled module is named as the manifest names it, not by where it is kept.
        let path = manifest.spec.module.display().to_string();
        let bytes = read_module(manifest.module_file()).map_err(|source| LoadError::Read {
            path: path.clone(),
            source,
        })?;
        let digest = module_cache::digest(&bytes);
        let (dev_source, version) = dev_source::version_of(&bytes, &digest);
        read(&version);
        let (wasm, origin) = prepare(engine, linker, &path, &bytes, &digest, cache)?;
        needs_exports(&manifest, &path, &wasm)?;
        Ok(GuestModule {
            dev_source,
            budgets: Arc::new(GuestBudgets::new(
                &manifest,
                &CpuGovernor::new(),
                &MemoryPool::unlimited(),
            )),
            manifest,
            body: Body::Wasm(Box::new(wasm)),
            digest: version,
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
        let digest = module_cache::digest(bytes);
        let (wasm, origin) = prepare(
            engine,
            linker,
            path,
            bytes,
            &digest,
            &ModuleCache::disabled(),
        )?;
        needs_exports(&manifest, path, &wasm)?;
        let (dev_source, digest) = dev_source::version_of(bytes, &digest);
        Ok(GuestModule {
            dev_source,
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
            dev_source: None,
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

    /// SHA-256 of the module bytes, `sha256:<hex>`: identifies the loaded version (a dev
    /// build's under `krec dev` adds its sources' stamp: `sha256:<hex>+src:<hex>`).
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// A dev build's sources, when `krec dev` mounts them.
    pub fn dev_source(&self) -> Option<&dev_source::DevSource> {
        self.dev_source.as_deref()
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
    digest: &str,
    cache: &ModuleCache,
) -> Result<(Wasm, Origin), LoadError> {
    let (component, origin) =
        cache.shared_component(engine, digest, || compile(engine, path, bytes))?;
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
    Ok((wasm, origin))
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
        // Every instance counts — a reconciler's, a webhook's or a map call's.
        self.budgets.ledger.instance_started();
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
    let digest = module_cache::digest(&bytes);
    let (wasm, _) = prepare(
        engine,
        linker,
        &shown,
        &bytes,
        &digest,
        &ModuleCache::disabled(),
    )?;
    Ok((digest, wasm.admission.is_some()))
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
