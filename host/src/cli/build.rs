//! `krec build`: a Go guest's module built and made a component, in one command — `go build`
//! for `wasip1` (the flags Go's component bindings need), then [`crate::guest::componentize`].

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

use crate::process::progress::say;

/// The arguments of `krec build`.
#[derive(clap::Args)]
pub(super) struct Args {
    /// The guest's `package main`: a module's folder (with `go.mod`), or a package folder
    /// inside one (`./cmd/guest`).
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Where to write the component; by default `<name>.wasm` in the folder, `<name>` being
    /// the last element of the module path in `go.mod` (or the package folder's name, for a
    /// package below the module's root).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// The `go` command to build with.
    #[arg(long, env = "KREC_GO", default_value = "go")]
    go: PathBuf,
}

/// Build and componentize; prints where the component went.
pub(super) fn execute(args: Args) -> anyhow::Result<()> {
    let (go_mod, root) = find_go_mod(&args.dir).with_context(|| {
        format!(
            "{}: no go.mod in it or above it — krec build builds a Go guest (a module's package main); a Rust guest builds with `cargo build-guest`, Python with `python -m krec_guest.build`, TypeScript with `npm run build`",
            args.dir.display()
        )
    })?;
    let text = std::fs::read_to_string(&go_mod)
        .with_context(|| format!("{}: cannot read it", go_mod.display()))?;
    let name = if root {
        module_name(&text).with_context(|| format!("{}: no `module` line", go_mod.display()))?
    } else {
        package_name(&args.dir)
            .with_context(|| format!("{}: cannot name the package", args.dir.display()))?
    };
    let output = args
        .output
        .unwrap_or_else(|| args.dir.join(format!("{name}.wasm")));
    let scratch = tempfile::Builder::new()
        .prefix("krec-build-")
        .tempdir()
        .context("creating a scratch folder")?;
    let core = scratch.path().join("core.wasm");
    let started = std::time::Instant::now();
    build_core(&args.go, &args.dir, &core)?;
    let bytes = std::fs::read(&core).with_context(|| format!("reading {}", core.display()))?;
    let component = crate::guest::componentize::componentize(&bytes).with_context(|| {
        format!(
            "{}: the module Go built is not a krec guest (does its main package import krec.dev/guest?)",
            args.dir.display()
        )
    })?;
    std::fs::write(&output, &component).with_context(|| format!("writing {}", output.display()))?;
    say(format_args!(
        "krec build: {} ({:.1} MB, {:.1} s)",
        output.display(),
        component.len() as f64 / 1e6,
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// The `go.mod` of the module `dir` is in, and whether `dir` is that module's root.
fn find_go_mod(dir: &Path) -> Option<(PathBuf, bool)> {
    let start = dir.canonicalize().ok()?;
    start.ancestors().enumerate().find_map(|(depth, folder)| {
        let go_mod = folder.join("go.mod");
        go_mod.is_file().then_some((go_mod, depth == 0))
    })
}

/// A package folder's own name (`./cmd/guest` is `guest`).
fn package_name(dir: &Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    Some(dir.file_name()?.to_string_lossy().into_owned())
}

/// `go build` of the package in `dir` for `wasip1`, to `core`.
fn build_core(go: &Path, dir: &Path, core: &Path) -> anyhow::Result<()> {
    let status = Command::new(go)
        .current_dir(dir)
        .env("GOOS", "wasip1")
        .env("GOARCH", "wasm")
        .env("CGO_ENABLED", "0")
        .env("GOEXPERIMENT", go_experiment())
        // A library the host calls into (its exports are the world's functions), not a
        // program run once; the component bindings reach into Go's runtime by linkname.
        .args([
            "build",
            "-buildmode=c-shared",
            "-trimpath",
            "-ldflags=-checklinkname=0",
            "-o",
        ])
        .arg(core)
        .arg(".")
        .status()
        .map_err(|err| {
            anyhow::anyhow!(
                "cannot run {}: {err} — krec build needs Go 1.26 or later on PATH (or --go): the SDK's modules require it",
                go.display()
            )
        })?;
    if !status.success() {
        anyhow::bail!("go build failed in {} ({status})", dir.display());
    }
    Ok(())
}

/// GOEXPERIMENT for a guest's build: the developer's, with `jsonv2` — encoding/json over Go's
/// new JSON implementation, its behaviour v1's (its error texts may differ), its decoding about
/// twice as fast inside Wasm, where a guest spends most of its time reading objects.
fn go_experiment() -> String {
    with_jsonv2(&std::env::var("GOEXPERIMENT").unwrap_or_default())
}

/// `experiments` (GOEXPERIMENT's list) with `jsonv2`, unless it names it (or `nojsonv2`).
fn with_jsonv2(experiments: &str) -> String {
    let mut experiments: Vec<String> = experiments
        .split(',')
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    if !experiments
        .iter()
        .any(|name| name.trim_start_matches("no") == "jsonv2")
    {
        experiments.push("jsonv2".to_owned());
    }
    experiments.join(",")
}

/// The last element of the module path on `go.mod`'s `module` line (before a major version
/// suffix: `example.com/op/v2` is `op`).
fn module_name(go_mod: &str) -> Option<String> {
    let path = go_mod
        .lines()
        .find_map(|line| line.trim().strip_prefix("module "))?
        .trim()
        .trim_matches('"');
    let is_major = |element: &str| {
        element
            .strip_prefix('v')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    let last = path
        .rsplit('/')
        .enumerate()
        .find(|(i, element)| !(*i == 0 && is_major(element)))
        .map(|(_, element)| element)?;
    (!last.is_empty()).then(|| last.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_guests_should_be_built_with_jsonv2_beside_the_developers_experiments() {
        assert_eq!(with_jsonv2(""), "jsonv2");
        assert_eq!(with_jsonv2("greenteagc"), "greenteagc,jsonv2");
        assert_eq!(with_jsonv2("jsonv2,greenteagc"), "jsonv2,greenteagc");
        // A developer who turned it off keeps it off.
        assert_eq!(with_jsonv2("nojsonv2"), "nojsonv2");
    }

    #[test]
    fn the_component_should_be_named_after_the_module() {
        assert_eq!(
            module_name("// x\nmodule example.com/team/pod-counter\n\ngo 1.26\n").as_deref(),
            Some("pod-counter")
        );
        assert_eq!(module_name("module \"app\"\n").as_deref(), Some("app"));
        assert_eq!(
            module_name("module example.com/op/v2\n").as_deref(),
            Some("op")
        );
        assert_eq!(module_name("go 1.26\n"), None);
    }

    #[test]
    fn a_package_below_the_module_root_should_find_its_go_mod_and_be_named_after_itself() {
        let dir = tempfile::tempdir().expect("tempdir");
        let package = dir.path().join("cmd/guest");
        std::fs::create_dir_all(&package).expect("mkdir");
        std::fs::write(dir.path().join("go.mod"), "module example.com/op\n").expect("go.mod");
        let (go_mod, root) = find_go_mod(&package).expect("found");
        assert_eq!(
            go_mod,
            dir.path().canonicalize().expect("dir").join("go.mod")
        );
        assert!(!root);
        assert_eq!(package_name(&package).as_deref(), Some("guest"));
        assert!(find_go_mod(dir.path()).expect("found").1);
    }
}
