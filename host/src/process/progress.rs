//! What krec tells the person running it: announcements on stdout ([`say`]) and the progress
//! of long start-up work (compiling guests, syncing caches), a progress line on a terminal,
//! log lines otherwise.

use std::io::IsTerminal as _;

use indicatif::{ProgressBar, ProgressStyle};

/// Progress through `total` steps of some work.
#[derive(Debug)]
pub struct Progress {
    what: &'static str,
    total: usize,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Progress of `what` in `total` steps; a bar when stderr is a terminal.
    pub fn new(what: &'static str, total: usize) -> Self {
        let bar = (std::io::stderr().is_terminal() && total > 1).then(|| {
            let bar = ProgressBar::new(total as u64);
            if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_prefix(what);
            bar
        });
        Progress { what, total, bar }
    }

    /// Step `index` (from 0) is under way: `item`, e.g. `pod-counter: compiling`.
    pub fn working(&self, index: usize, item: &str) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(index as u64);
                bar.set_message(item.to_owned());
            }
            None => tracing::info!("{} [{}/{}] {item}", self.what, index + 1, self.total),
        }
    }

    /// All done.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Print a line for the person running krec, on stdout. A long-running host must not die
/// because nobody reads its stdout any more (a closed pipe, a detached terminal), so write
/// errors are ignored.
pub fn say(line: impl std::fmt::Display) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout(), "{line}");
}
