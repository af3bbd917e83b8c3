//! `krec new`: start a guest crate.

use std::path::PathBuf;
use std::process::ExitCode;

/// The arguments of `krec new`.
#[derive(clap::Args)]
pub(super) struct Args {
    /// The guest's name (a DNS label); the folder, unless --dir says otherwise.
    name: String,
    /// The kind it reconciles: group/version/Kind or version/Kind.
    #[arg(long, default_value = "apps/v1/Deployment")]
    kind: String,
    /// Serve a validating and a mutating webhook too, with unit and integration tests.
    #[arg(long)]
    webhook: bool,
    /// Where to create the crate (default: ./NAME).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The krec-guest SDK's folder (default: this krec's own sources, when present; else
    /// the SDK from crates.io).
    #[arg(long)]
    sdk: Option<PathBuf>,
}

/// `krec new`: scaffold the crate and say what to do next.
pub(super) fn execute(args: Args) -> ExitCode {
    let Args {
        name,
        kind,
        webhook,
        dir,
        sdk,
    } = args;
    let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
    // This krec's own SDK, when its sources are on this machine (a build from a checkout).
    let sdk_path = sdk.or_else(|| {
        let own = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk");
        own.join("Cargo.toml")
            .exists()
            .then(|| own.canonicalize().unwrap_or(own))
    });
    let krec = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("krec"));
    let new = crate::scaffold::NewGuest {
        name,
        kind,
        webhook,
        sdk_path,
        krec,
    };
    match crate::scaffold::scaffold(&dir, &new) {
        Ok(files) => {
            for file in &files {
                println!("created {}", file.display());
            }
            println!(
                "\nnext:\n  cd {}\n  rustup target add wasm32-wasip2   # once\n  cargo build-guest                   # the .wasm\n  cargo test                        # unit and integration tests\n  krec dev --manifests .            # a local cluster, reconciling live",
                dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("krec new: {err}");
            ExitCode::FAILURE
        }
    }
}
