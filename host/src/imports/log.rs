//! Host side of `krec:reconciler/log`: guest log lines in the host's log.

use super::MAX_LOG_LINE_BYTES;
use crate::bindings::krec::reconciler::log::{Host, Level};
use crate::guest::log_budget::LogBudget;
use crate::guest::state::HostState;

/// Write a line `guest` logged while reconciling `request` into the host's log (target
/// `krec::guest`), cut at [`MAX_LOG_LINE_BYTES`] and its control characters escaped (one
/// line, which cannot pose as a host line), if the guest's `budget` allows it.
pub(crate) fn guest_log(
    guest: &str,
    request: &str,
    level: Level,
    message: String,
    budget: &LogBudget,
) {
    // Escaped first: the line written is what is cut and charged to the budget.
    let mut message = crate::vocab::printable(&message).into_owned();
    if crate::vocab::cut(&mut message, MAX_LOG_LINE_BYTES) {
        message.push_str(" [truncated]");
    }
    if !budget.admit(message.len()) {
        return;
    }
    match level {
        Level::Trace => tracing::trace!(target: "krec::guest", guest, request, "{message}"),
        Level::Debug => tracing::debug!(target: "krec::guest", guest, request, "{message}"),
        Level::Info => tracing::info!(target: "krec::guest", guest, request, "{message}"),
        Level::Warn => tracing::warn!(target: "krec::guest", guest, request, "{message}"),
        Level::Error => tracing::error!(target: "krec::guest", guest, request, "{message}"),
    }
}

impl Host for HostState {
    async fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        guest_log(
            &self.manifest.name,
            &self.request,
            level,
            message,
            &self.budgets.log,
        );
        Ok(())
    }
}
