//! `krec new`: start a guest — a Rust crate, a Python or TypeScript project, or a Go module.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli::scaffold::Lang;

/// A guest's language, as `--lang` names it.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LangArg {
    /// A Rust crate (krec-guest, cargo).
    Rust,
    /// A Python project (krec_guest, componentize-py).
    #[value(alias = "py")]
    Python,
    /// A TypeScript project (@krec/guest, componentize-js).
    #[value(alias = "ts")]
    Typescript,
    /// A Go module (krec.dev/guest, `krec build`).
    #[value(alias = "golang")]
    Go,
}

/// The arguments of `krec new`.
#[derive(clap::Args)]
pub(super) struct Args {
    /// The guest's name (a DNS label); the folder, unless --dir says otherwise.
    name: String,
    /// The kind it reconciles: group/version/Kind or version/Kind.
    #[arg(long, default_value = "apps/v1/Deployment")]
    kind: String,
    /// The language the guest is written in.
    #[arg(long, value_enum, default_value = "rust")]
    lang: LangArg,
    /// Serve a validating and a mutating webhook too, with their tests.
    #[arg(long)]
    webhook: bool,
    /// Only a validating webhook (with its tests): no reconciler, no configuration.
    #[arg(long, conflicts_with = "webhook")]
    webhook_only: bool,
    /// Where to create the project (default: ./NAME).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The SDK's folder (default: this krec's own sources, when present — guest-sdk,
    /// guest-sdk-python, guest-sdk-js or guest-sdk-go; else the SDK from the language's
    /// registry — Go has none: a Go guest needs this folder).
    #[arg(long)]
    sdk: Option<PathBuf>,
}

/// `krec new`: scaffold the project and say what to do next.
pub(super) fn execute(args: Args) -> ExitCode {
    let Args {
        name,
        kind,
        lang,
        webhook,
        webhook_only,
        dir,
        sdk,
    } = args;
    let lang = match lang {
        LangArg::Rust => Lang::Rust,
        LangArg::Python => Lang::Python,
        LangArg::Typescript => Lang::TypeScript,
        LangArg::Go => Lang::Go,
    };
    let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
    // This krec's own SDK, when its sources are on this machine (a build from a checkout).
    let (folder, marker) = match lang {
        Lang::Rust => ("guest-sdk", "Cargo.toml"),
        Lang::Python => ("guest-sdk-python", "pyproject.toml"),
        Lang::TypeScript => ("guest-sdk-js", "package.json"),
        Lang::Go => ("guest-sdk-go", "go.mod"),
    };
    let sdk_path = sdk.or_else(|| {
        let own = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(folder);
        own.join(marker)
            .exists()
            .then(|| own.canonicalize().unwrap_or(own))
    });
    let krec = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("krec"));
    let new = crate::cli::scaffold::NewGuest {
        name,
        kind,
        webhook,
        webhook_only,
        lang,
        sdk_path,
        krec,
    };
    match crate::cli::scaffold::scaffold(&dir, &new) {
        Ok(files) => {
            for file in &files {
                println!("created {}", file.display());
            }
            println!("\nnext:\n  cd {}\n{}", dir.display(), next_steps(&new));
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("krec new: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The commands that build, test and run the new guest.
fn next_steps(new: &crate::cli::scaffold::NewGuest) -> String {
    let module = new.name.replace('-', "_");
    match new.lang {
        Lang::Rust => "  rustup target add wasm32-wasip2   # once\n  cargo build-guest                   # the .wasm\n  cargo test                        # unit and integration tests\n  krec dev --manifests .            # a local cluster, reconciling live".into(),
        Lang::Python => {
            let sdk = new
                .sdk_path
                .as_ref()
                .map_or_else(|| "krec-guest".to_owned(), |p| format!("-e {}", p.display()));
            format!(
                "  pip install componentize-py==0.25.1 pytest {sdk}   # once\n  python -m pytest                   # unit tests\n  python -m krec_guest.build app -o {module}.wasm --dev   # once: krec dev runs each edit of the sources live\n  krec dev --manifests .             # a local cluster, reconciling live\n  python -m krec_guest.build app -o {module}.wasm   # the .wasm to ship (krec run, krec push)"
            )
        }
        Lang::TypeScript => {
            // Linked from a checkout, the SDK needs its own tools installed and built once.
            let setup = match &new.sdk_path {
                Some(sdk) if !sdk.join("dist").exists() || !sdk.join("node_modules").exists() => {
                    format!("  (cd {} && npm ci && npm run build)   # once: the SDK\n", sdk.display())
                }
                _ => String::new(),
            };
            format!(
                "{setup}  npm install                # once\n  npm test                   # unit tests\n  npm run dev                # krec dev --manifests . on a dev build: each saved edit runs in ~1 s\n  npm run build              # the .wasm to ship (krec run, krec push)"
            )
        }
        Lang::Go => "  krec build                 # the .wasm (go build for wasip1, then the component)\n  go test ./...              # unit tests against krec's own API server\n  krec dev --manifests .     # a local cluster, reconciling live".into(),
    }
}
