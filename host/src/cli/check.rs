//! `krec check`: validate manifests (and the modules they name) or bare `.wasm` modules,
//! one line per file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::guest::{self, GuestModule, LoadError, ReconcileError};
use crate::manifest::{Manifest, ManifestError};

/// The arguments of `krec check`.
#[derive(clap::Args)]
pub(super) struct Args {
    /// Manifest files, directories of manifests, or `.wasm` component files.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    cache: super::args::CacheArgs,
    #[command(flatten)]
    compiler: super::args::CompilerArgs,
}

/// Why a file does not pass; each names the file.
#[derive(Debug, thiserror::Error)]
enum Problem {
    /// The manifest (or the directory) cannot be read or is invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A bare module that is not a krec component.
    #[error(transparent)]
    Module(LoadError),
    /// The module a manifest names cannot be loaded.
    #[error("{path}: guest {guest}: {source}")]
    Load {
        path: String,
        guest: String,
        source: LoadError,
    },
    /// The guest's `init` refused its configuration (the error names the file).
    #[error(transparent)]
    Config(ReconcileError),
    /// The guest could not be started.
    #[error("{path}: {source}")]
    Start {
        path: String,
        source: ReconcileError,
    },
}

/// What the check needs: the engines (compiling as `krec dev` and `krec replay` do, by
/// default), the module cache they load from, and a runtime for the guests' `init`.
struct Checker {
    engines: guest::Engines,
    cache: guest::ModuleCache,
    runtime: tokio::runtime::Runtime,
}

impl Checker {
    fn new(cache: guest::ModuleCache, compiler: guest::engine::Compiler) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let engines = guest::Engines::compiled_by(compiler)
            .map_err(|e| anyhow::anyhow!("cannot create the Wasm engine: {e:#}"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        Ok(Checker {
            engines,
            cache,
            runtime,
        })
    }

    /// One line per file under `path`: a `.wasm` module, a manifest, or a directory of them.
    fn check(&self, path: &Path) -> Vec<Result<String, Problem>> {
        if path.extension().is_some_and(|e| e == "wasm") {
            return vec![self.module(path)];
        }
        if !path.is_dir() {
            return vec![self.manifest(Manifest::load(path))];
        }
        match Manifest::scan_dir(path) {
            Ok(results) if results.is_empty() => vec![Err(ManifestError::Invalid {
                path: path.to_owned(),
                field: String::new(),
                problem: "no Reconciler manifests found".to_owned(),
            }
            .into())],
            Ok(results) => results.into_iter().map(|m| self.manifest(m)).collect(),
            Err(err) => vec![Err(err.into())],
        }
    }

    /// A bare component: does it implement the world, and which version of it.
    fn module(&self, path: &Path) -> Result<String, Problem> {
        let (engine, linker) = self.engines.for_isolation(Default::default());
        let (digest, admission) =
            guest::check_module(engine, linker, path).map_err(Problem::Module)?;
        Ok(format!(
            "{}: ok, a krec:reconciler@0.1 component: {} ({digest})",
            path.display(),
            if admission {
                "reconciler and admission webhooks"
            } else {
                "reconciler (WIT 0.1.0: no admission exports)"
            }
        ))
    }

    /// One parsed manifest and the module it names, the guest started as the host would:
    /// instantiated, its `init` given `spec.config` (against an empty in-memory cluster, so a
    /// guest that reads the cluster in `init` sees nothing).
    fn manifest(&self, manifest: Result<Manifest, ManifestError>) -> Result<String, Problem> {
        let manifest = manifest?;
        let path = manifest.path.display().to_string();
        let guest = manifest.name.clone();
        if crate::guests::oci::reference(&manifest.spec.module).is_some() {
            return Ok(format!(
                "{path}: ok, guest {guest}; its module {} is pulled when a host loads it (not checked here)",
                manifest.spec.module.display()
            ));
        }
        let (engine, linker) = self.engines.for_isolation(manifest.spec.isolation);
        let started = Instant::now();
        let module = GuestModule::load_cached(engine, linker, manifest.into(), &self.cache)
            .map_err(|source| Problem::Load {
                path: path.clone(),
                guest: guest.clone(),
                source,
            })?;
        let loaded = started.elapsed();
        let module = Arc::new(module);
        #[cfg(feature = "embedded-apiserver")]
        let cluster: Arc<dyn crate::cluster::ClusterAccess> =
            Arc::new(crate::cluster::MemoryCluster::new());
        #[cfg(not(feature = "embedded-apiserver"))]
        let cluster: Arc<dyn crate::cluster::ClusterAccess> =
            Arc::new(crate::cluster::EmptyCluster::new());
        self.runtime
            .block_on(guest::GuestWorker::new(module.clone(), cluster).warm_up())
            .map_err(|source| match source {
                ReconcileError::Config { .. } => Problem::Config(source),
                source => Problem::Start {
                    path: path.clone(),
                    source,
                },
            })?;
        Ok(format!(
            "{path}: ok, guest {guest} ({}; {})",
            module.digest(),
            how_loaded(module.origin(), loaded)
        ))
    }
}

/// How a module was loaded, as `krec check` and `krec replay` say it: `compiled in 1.2 s` or
/// `from the module cache`.
pub(super) fn how_loaded(origin: guest::Origin, took: Duration) -> String {
    match origin {
        guest::Origin::Compiled => format!("compiled in {:.1} s", took.as_secs_f64()),
        guest::Origin::Cached | guest::Origin::Shared => "from the module cache".to_owned(),
        guest::Origin::Native => "compiled into the host".to_owned(),
    }
}

/// `krec check`: one line per file, non-zero exit if any is bad.
pub(super) fn execute(args: Args) -> ExitCode {
    let checker = match Checker::new(args.cache.open(), args.compiler.compiler) {
        Ok(checker) => checker,
        Err(err) => {
            eprintln!("krec: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    for path in &args.paths {
        for line in checker.check(path) {
            match line {
                Ok(line) => println!("{line}"),
                Err(problem) => {
                    eprintln!("{problem}");
                    failed = true;
                }
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
