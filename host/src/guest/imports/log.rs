//! Host side of `krec:reconciler/log`: guest log lines in the host's log.

use super::MAX_LOG_LINE_BYTES;
use crate::guest::bindings::krec::reconciler::log::{Host, Level};
use crate::guest::log_budget::LogBudget;
use crate::guest::state::HostState;

/// Write a line `guest` (its `version`: `live` or `candidate`) logged while reconciling
/// `request` into the host's log (target `krec::guest`), cut at [`MAX_LOG_LINE_BYTES`] and its control characters escaped (one
/// line, which cannot pose as a host line), if the guest's `budget` allows it.
pub(crate) fn guest_log(
    guest: &str,
    version: &'static str,
    request: &str,
    level: Level,
    message: String,
    budget: &LogBudget,
) {
    // Charged before anything is copied (a flood is dropped cheaply), at most the line's cut
    // length; then escaped, and cut as written.
    if !budget.admit(message.len().min(MAX_LOG_LINE_BYTES)) {
        return;
    }
    // Only what can be kept is escaped (escaping goes character by character).
    let mut message = message;
    let long = krec_core::cut(&mut message, MAX_LOG_LINE_BYTES);
    let mut message = krec_core::printable(&message).into_owned();
    if krec_core::cut(&mut message, MAX_LOG_LINE_BYTES) || long {
        message.push_str(" [truncated]");
    }
    match level {
        Level::Trace => {
            tracing::trace!(target: "krec::guest", guest, version, request, "{message}")
        }
        Level::Debug => {
            tracing::debug!(target: "krec::guest", guest, version, request, "{message}")
        }
        Level::Info => tracing::info!(target: "krec::guest", guest, version, request, "{message}"),
        Level::Warn => tracing::warn!(target: "krec::guest", guest, version, request, "{message}"),
        Level::Error => {
            tracing::error!(target: "krec::guest", guest, version, request, "{message}")
        }
    }
}

/// [`guest_log`] for `manifest`'s guest, the line counted in its ledger as a `log` host call
/// and the work as host work done for it — what a Wasm guest's and a native guest's `log`
/// both do.
pub(crate) fn log_for(
    manifest: &crate::manifest::Manifest,
    request: &str,
    level: Level,
    message: String,
    budgets: &crate::guest::GuestBudgets,
) {
    budgets.ledger.call("log", 0, message.len());
    budgets.ledger.timed(|| {
        guest_log(
            &manifest.name,
            manifest.version_role(),
            request,
            level,
            message,
            &budgets.log,
        );
    });
}

impl Host for HostState {
    async fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        log_for(&self.manifest, &self.request, level, message, &self.budgets);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A log writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `log` writes into the host's log, as text.
    fn logged(log: impl FnOnce()) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        let text = captured.0.lock().expect("log").clone();
        String::from_utf8(text).expect("utf-8")
    }

    #[test]
    fn a_forged_line_should_stay_on_the_guests_line_escaped() {
        let text = logged(|| {
            guest_log(
                "sly",
                "live",
                "default/x",
                Level::Info,
                "ok\n2026-01-01T00:00:00.000000Z ERROR krec::host: guest healthy stopped\x1b[2K"
                    .into(),
                &LogBudget::new("sly"),
            );
        });
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains(
                r"ok\n2026-01-01T00:00:00.000000Z ERROR krec::host: guest healthy stopped\u{1b}[2K"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_candidates_lines_should_say_so() {
        let text = logged(|| {
            for version in ["live", "candidate"] {
                guest_log(
                    "mirror",
                    version,
                    "default/x",
                    Level::Info,
                    "created team-c/settings".into(),
                    &LogBudget::new("mirror"),
                );
            }
        });
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("version=\"live\""), "{text}");
        assert!(lines[1].contains("version=\"candidate\""), "{text}");
    }
}
