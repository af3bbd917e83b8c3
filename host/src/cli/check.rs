//! `krec check`: validate manifests (and the modules they name) or bare `.wasm` modules,
//! one line per file.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::guest::{self, GuestModule};
use crate::manifest::Manifest;

/// The arguments of `krec check`.
#[derive(clap::Args)]
pub(super) struct Args {
    /// Manifest files, directories of manifests, or `.wasm` component files.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
}

/// Check one parsed manifest and the module it names, and start the guest as the host would:
/// instantiated, its `init` given `spec.config` (against an empty in-memory cluster, so a
/// guest that reads the cluster in `init` sees nothing).
fn check_manifest(
    engine: &wasmtime::Engine,
    linker: &wasmtime::component::Linker<guest::HostState>,
    runtime: &tokio::runtime::Runtime,
    manifest: Result<Manifest, crate::manifest::ManifestError>,
) -> Result<String, String> {
    let manifest = manifest.map_err(|e| e.to_string())?;
    let shown = manifest.path.display().to_string();
    let name = manifest.name.clone();
    let module = GuestModule::load(engine, linker, manifest.into())
        .map_err(|e| format!("{shown}: guest {name}: {e}"))?;
    let module = std::sync::Arc::new(module);
    let cluster: std::sync::Arc<dyn crate::cluster::ClusterAccess> =
        std::sync::Arc::new(crate::cluster::MemoryCluster::new());
    runtime
        .block_on(guest::GuestWorker::new(module.clone(), cluster).warm_up())
        .map_err(|err| match err {
            // Names the file already.
            guest::ReconcileError::Config { .. } => err.to_string(),
            err => format!("{shown}: {err}"),
        })?;
    Ok(format!("{shown}: ok, guest {name} ({})", module.digest()))
}

/// `krec check`: one line per file, non-zero exit if any is bad.
pub(super) fn execute(args: Args) -> ExitCode {
    let paths = &args.paths;
    let engine = match crate::engine::new_engine() {
        Ok(engine) => engine,
        Err(err) => {
            eprintln!("krec: cannot create the Wasm engine: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    let linker = match guest::new_linker(&engine) {
        Ok(linker) => linker,
        Err(err) => {
            eprintln!("krec: cannot link the host interfaces: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("krec: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    for path in paths {
        let is_module = path.extension().is_some_and(|e| e == "wasm");
        let outcome = if is_module {
            guest::check_module(&engine, &linker, path)
                .map(|(digest, admission)| {
                    format!(
                        "{}: ok, a krec:reconciler@0.1 component: {} ({digest})",
                        path.display(),
                        if admission {
                            "reconciler and admission webhooks"
                        } else {
                            "reconciler (WIT 0.1.0: no admission exports)"
                        }
                    )
                })
                .map_err(|e| e.to_string())
        } else {
            let results = if path.is_dir() {
                match Manifest::scan_dir(path) {
                    Ok(results) if results.is_empty() => {
                        Err(format!("{}: no Reconciler manifests found", path.display()))
                    }
                    Ok(results) => Ok(results),
                    Err(err) => Err(err.to_string()),
                }
            } else {
                Ok(vec![Manifest::load(path)])
            };
            match results {
                Err(line) => Err(line),
                Ok(results) => {
                    // One line per manifest file, good or bad.
                    for result in results {
                        match check_manifest(&engine, &linker, &runtime, result) {
                            Ok(line) => println!("{line}"),
                            Err(line) => {
                                eprintln!("{line}");
                                failed = true;
                            }
                        }
                    }
                    continue;
                }
            }
        };
        match outcome {
            Ok(line) => println!("{line}"),
            Err(line) => {
                eprintln!("{line}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
