//! The `krec` command line: `krec check` and `krec dev`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use krec::guest::{self, GuestModule};
use krec::manifest::Manifest;

/// krec runs Kubernetes reconcilers compiled to WebAssembly components.
#[derive(Parser)]
#[command(name = "krec", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate manifests (and the modules they name) or bare `.wasm` modules.
    ///
    /// Prints one line per file: `ok` with the module digest, or what is wrong. Exits non-zero if
    /// any file is invalid.
    Check {
        /// Manifest files, directories of manifests, or `.wasm` component files.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Run the guests against an in-memory set of sample objects and print what each did.
    ///
    /// This is the in-memory preview: the embedded API server and live watches come next.
    Dev {
        /// Directory of guest manifests.
        #[arg(long, default_value = "sample-guests")]
        manifests: PathBuf,
    },
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match cli.command {
        Command::Check { paths } => check(&paths),
        Command::Dev { manifests } => {
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(err) => {
                    eprintln!("krec: cannot start the async runtime: {err}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(krec::demo::run(&manifests, &mut std::io::stdout())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("krec dev: {err:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Check one parsed manifest and the module it names.
fn check_manifest(
    engine: &wasmtime::Engine,
    linker: &wasmtime::component::Linker<guest::HostState>,
    manifest: Result<Manifest, krec::manifest::ManifestError>,
) -> Result<String, String> {
    let manifest = manifest.map_err(|e| e.to_string())?;
    let shown = manifest.path.display().to_string();
    let name = manifest.name.clone();
    let module = GuestModule::load(engine, linker, manifest.into())
        .map_err(|e| format!("{shown}: guest {name}: {e}"))?;
    Ok(format!("{shown}: ok, guest {name} ({})", module.digest()))
}

/// `krec check`: one line per file, non-zero exit if any is bad.
fn check(paths: &[PathBuf]) -> ExitCode {
    let engine = match krec::engine::new_engine() {
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
    let mut failed = false;
    for path in paths {
        let is_module = path.extension().is_some_and(|e| e == "wasm");
        let outcome = if is_module {
            guest::check_module(&engine, &linker, path)
                .map(|digest| {
                    format!(
                        "{}: ok, a krec:reconciler@0.1.0 component ({digest})",
                        path.display()
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
                        match check_manifest(&engine, &linker, result) {
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
