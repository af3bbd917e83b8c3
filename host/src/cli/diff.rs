//! `krec diff GUEST`: the guest's rollout — phase, counts, first divergences with their diff —
//! from the host's admin server; `--promote` and `--abort` decide it by hand, `--retry` tries a
//! rolled-back candidate again.

use std::process::ExitCode;

use super::admin_client::{Admin, AdminArgs};

/// `krec diff`'s arguments.
#[derive(clap::Args)]
pub(super) struct Args {
    /// The guest.
    guest: String,
    /// Promote the candidate now.
    #[arg(long, conflicts_with_all = ["abort", "retry"])]
    promote: bool,
    /// Stop trying the candidate now.
    #[arg(long, conflicts_with = "retry")]
    abort: bool,
    /// Try the candidate last rolled back again, its counts from zero.
    #[arg(long)]
    retry: bool,
    /// Print the JSON the admin server answers.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    admin: AdminArgs,
}

/// The report as text.
fn render(report: &serde_json::Value) -> String {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let c = &report["candidateCounts"];
    let l = &report["live"];
    let mut out = format!(
        "{}: candidate {} ({}), {} mode: {}{}\n  live:      {} reconciles, {} errors, {} traps\n  candidate: {} reconciles, {} same, {} diverged, {} errors, {} traps, {} skipped\n",
        text(&report["guest"]),
        text(&report["candidate"]),
        text(&report["digest"]),
        text(&report["mode"]),
        text(&report["phase"]),
        match text(&report["reason"]) {
            r if r.is_empty() => String::new(),
            r => format!(" ({r})"),
        },
        l["reconciles"],
        l["errors"],
        l["traps"],
        c["reconciles"],
        c["same"],
        c["diverged"],
        c["errors"],
        c["traps"],
        c["skipped"],
    );
    for d in report["divergences"].as_array().into_iter().flatten() {
        out.push_str(&format!("  {}:\n", text(&d["key"])));
        for line in d["diff"].as_array().into_iter().flatten() {
            out.push_str(&format!("    {}\n", text(line)));
        }
    }
    out
}

async fn run(args: Args) -> anyhow::Result<()> {
    let admin = Admin::new(&args.admin);
    if args.promote || args.abort || args.retry {
        let action = if args.promote {
            "promote"
        } else if args.abort {
            "abort"
        } else {
            "retry"
        };
        let answer = admin
            .post(&format!("/rollout/{}/{action}", args.guest))
            .await?;
        print!("{answer}");
        return Ok(());
    }
    let body = admin
        .get(&format!("/diff/{}", args.guest))
        .await?
        .text()
        .await?;
    if args.json {
        print!("{body}");
    } else {
        let report: serde_json::Value = serde_json::from_str(&body)?;
        print!("{}", render(&report));
    }
    Ok(())
}

/// `krec diff`.
pub(super) fn execute(args: Args) -> ExitCode {
    super::block_on("diff", run(args))
}
