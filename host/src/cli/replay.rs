//! `krec replay FILE --module NEW.wasm`: run a module against a recording, with no cluster.
//!
//! Each recorded reconcile is played on the module with its reads answered from the recording
//! and its clock set to the recorded one; its writes, Events and outcome are compared with the
//! recorded ones (see [`crate::rollout::compare`]). One line per divergent reconcile, its diff
//! below it, then a summary; exits 1 on any divergence, 2 when the recording or module is bad.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;

use crate::cluster::ClusterAccess;
use crate::guest::{self, GuestModule, GuestWorker, SetClock};
use crate::manifest::Manifest;
use crate::rollout::recording::{self, Header};
use crate::rollout::{Outcome, Reconcile, Replay, compare};

/// `krec replay`'s arguments.
#[derive(clap::Args)]
pub(super) struct Args {
    /// The recording (`krec record`'s output).
    file: PathBuf,
    /// The module to replay it on (the recorded one again, or a new version).
    #[arg(long)]
    module: PathBuf,
    /// A manifest to run the module with (its permissions, config and limits); by default the
    /// recording's guest name, config and permissions.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Print only the summary.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    cache: super::args::CacheArgs,
    #[command(flatten)]
    compiler: super::args::CompilerArgs,
}

/// What a replay found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Reconciles replayed.
    pub reconciles: usize,
    /// Of those, divergent.
    pub diverged: usize,
    /// Reads the recording could not answer.
    pub missing: usize,
}

/// The manifest the module is replayed with: `manifest`'s, or one made from the header.
fn manifest_for(
    header: &Header,
    module: &Path,
    manifest: Option<&Path>,
) -> anyhow::Result<Manifest> {
    let mut manifest = match manifest {
        Some(path) => Manifest::load(path)?,
        None => {
            let mut spec = serde_json::json!({
                "module": module,
                "config": header.config,
                "permissions": header.permissions,
            });
            // What calls the guest does not matter to a replay, but a manifest must say.
            match &header.for_kind {
                Some(for_kind) => spec["for"] = for_kind.clone(),
                None => {
                    spec["tickers"] =
                        serde_json::json!([{"every": "1h", "request": {"name": "replay"}}])
                }
            }
            let text = serde_json::json!({
                "apiVersion": "krec.dev/v1alpha1",
                "kind": "Reconciler",
                "metadata": {"name": header.guest},
                "spec": spec,
            })
            .to_string();
            Manifest::parse(Path::new("(the recording's header)"), &text)?
        }
    };
    manifest.spec.module = module.to_owned();
    manifest.pulled = None;
    manifest.spec.rollout = None;
    manifest.candidate_pulled = None;
    Ok(manifest)
}

/// Replay `reconciles` on `module`; `print` is told each divergent reconcile and its lines.
///
/// # Errors
///
/// When the module cannot be instantiated.
pub async fn replay(
    module: Arc<GuestModule>,
    reconciles: impl IntoIterator<Item = Reconcile>,
    mut print: impl FnMut(&Reconcile, &[String]),
) -> Result<Summary, guest::ReconcileError> {
    let replay = Arc::new(Replay::new(None, None));
    let clock = SetClock::default();
    let access: Arc<dyn ClusterAccess> = replay.clone();
    let mut worker = GuestWorker::new(module, access).with_clock(clock.clone());
    worker.warm_up().await?;
    let mut summary = Summary::default();
    for recorded in reconciles {
        clock.set_ms(recorded.clock_ms);
        replay.load(&recorded);
        let result = worker
            .reconcile(recorded.namespace.as_deref(), &recorded.name)
            .await;
        let played = replay.take();
        let again = Reconcile {
            tape: played.tape,
            outcome: Outcome::of(&result),
            ..recorded.clone()
        };
        let mut lines = compare::compare(&recorded, &again).lines;
        for read in &played.missing {
            lines.push(format!("read the recording lacks: {read}"));
        }
        summary.reconciles += 1;
        summary.missing += played.missing.len();
        if !lines.is_empty() {
            summary.diverged += 1;
            print(&recorded, &lines);
        }
    }
    Ok(summary)
}

fn run(args: &Args) -> anyhow::Result<bool> {
    let file = std::fs::File::open(&args.file)
        .with_context(|| format!("{}: cannot read the recording", args.file.display()))?;
    // Read as it is replayed, a line at a time: a recording of any length holds one line.
    let (header, mut reader) = recording::Reader::open(std::io::BufReader::new(file))
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
    let manifest = manifest_for(&header, &args.module, args.manifest.as_deref())?;
    let cache = args.cache.open();
    let engines = guest::Engines::compiled_by(args.compiler.compiler)
        .map_err(|e| anyhow::anyhow!("cannot create the Wasm engine: {e:#}"))?;
    let (engine, linker) = engines.for_isolation(manifest.spec.isolation);
    let loading = Instant::now();
    let module = Arc::new(GuestModule::load_cached(
        engine,
        linker,
        manifest.into(),
        &cache,
    )?);
    let loaded = super::check::how_loaded(module.origin(), loading.elapsed());
    let digest = module.digest().to_owned();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let quiet = args.quiet;
    let started = Instant::now();
    let mut unreadable = None;
    let reconciles = std::iter::from_fn(|| match reader.next_reconcile() {
        Ok(next) => next,
        Err(err) => {
            unreadable = Some(err);
            None
        }
    });
    let summary = runtime.block_on(replay(module, reconciles, |recorded, lines| {
        if !quiet {
            println!("#{} {}: diverged", recorded.seq, recorded.key());
            for line in lines {
                println!("    {line}");
            }
        }
    }))?;
    if let Some(err) = unreadable {
        anyhow::bail!(
            "{}: {err} (after {} reconcile(s) replayed, {} diverged)",
            args.file.display(),
            summary.reconciles,
            summary.diverged
        );
    }
    let took = started.elapsed().as_secs_f64();
    println!(
        "replayed {} reconcile(s) of {} (recorded on {}) on {} ({digest}; {loaded}): {} same, {} diverged{} — {:.0} reconciles/s",
        summary.reconciles,
        header.guest,
        header.digest,
        args.module.display(),
        summary.reconciles - summary.diverged,
        summary.diverged,
        if summary.missing > 0 {
            format!(", {} read(s) the recording lacks", summary.missing)
        } else {
            String::new()
        },
        summary.reconciles as f64 / took.max(1e-9),
    );
    Ok(summary.diverged == 0)
}

/// `krec replay`: exit 0 when every reconcile did the same, 1 on a divergence, 2 on an error.
pub(super) fn execute(args: Args) -> ExitCode {
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("krec replay: {err:#}");
            ExitCode::from(2)
        }
    }
}
