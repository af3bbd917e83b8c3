//! `krec record GUEST -o FILE`: record a running guest's reconciles through the host's admin
//! server (`GET /record/GUEST`), as a recording `krec replay` reads.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use super::admin_client::{Admin, AdminArgs};
use crate::process::progress::say;

/// `krec record`'s arguments.
#[derive(clap::Args)]
pub(super) struct Args {
    /// The guest.
    guest: String,
    /// Where to write the recording.
    #[arg(short, long)]
    output: PathBuf,
    /// Stop after this many reconciles.
    #[arg(long, default_value_t = 1000)]
    reconciles: u64,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Keep Secrets' values (redacted by default).
    #[arg(long)]
    include_secrets: bool,
    #[command(flatten)]
    admin: AdminArgs,
}

async fn run(args: Args) -> anyhow::Result<()> {
    let admin = Admin::new(&args.admin);
    let mut path = format!(
        "/record/{}?reconciles={}&seconds={}",
        args.guest, args.reconciles, args.seconds
    );
    if args.include_secrets {
        path.push_str("&secrets=include");
    }
    let mut response = admin.get(&path).await?;
    let mut file = std::fs::File::create(&args.output)
        .with_context(|| format!("{}: cannot create", args.output.display()))?;
    say(format_args!(
        "krec record: recording {} into {} (up to {} reconciles or {} s)",
        args.guest,
        args.output.display(),
        args.reconciles,
        args.seconds
    ));
    let mut last = String::new();
    while let Some(chunk) = response.chunk().await.context("reading the recording")? {
        file.write_all(&chunk)
            .with_context(|| format!("{}: cannot write", args.output.display()))?;
        last.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(end) = last.rfind('\n').filter(|_| last.len() > 64 * 1024) {
            last.drain(..end);
        }
    }
    let trailer = last
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    say(format_args!("krec record: done: {trailer}"));
    Ok(())
}

/// `krec record`.
pub(super) fn execute(args: Args) -> ExitCode {
    super::block_on("record", run(args))
}
