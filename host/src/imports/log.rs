//! Host side of `krec:reconciler/log`: guest log lines in the host's log.

use super::MAX_LOG_LINE_BYTES;
use crate::bindings::krec::reconciler::log::{Host, Level};
use crate::guest::HostState;

impl Host for HostState {
    async fn log(&mut self, level: Level, mut message: String) -> wasmtime::Result<()> {
        if message.len() > MAX_LOG_LINE_BYTES {
            let mut cut = MAX_LOG_LINE_BYTES;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str(" [truncated]");
        }
        let (guest, request) = (self.guest(), self.request.as_str());
        match level {
            Level::Trace => tracing::trace!(target: "krec::guest", guest, request, "{message}"),
            Level::Debug => tracing::debug!(target: "krec::guest", guest, request, "{message}"),
            Level::Info => tracing::info!(target: "krec::guest", guest, request, "{message}"),
            Level::Warn => tracing::warn!(target: "krec::guest", guest, request, "{message}"),
            Level::Error => tracing::error!(target: "krec::guest", guest, request, "{message}"),
        }
        Ok(())
    }
}
