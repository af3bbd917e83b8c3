//! Guest stdout and stderr, forwarded line by line to the host's log under the guest's name.
//!
//! Guests get no inherited stdio; what they print (including Rust's panic messages) becomes log
//! lines `guest=<name> stream=stderr`, each cut at [`MAX_OUTPUT_LINE_BYTES`], within the guest's
//! [`LogBudget`](super::LogBudget) (shared with its `log` calls); lines beyond it are dropped, counted and
//! reported, so a guest printing in a loop cannot flood the host's log.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

use super::GuestBudgets;

/// Longest line of guest output logged; the rest of a longer line is dropped, so a guest cannot
/// make the host buffer unbounded output.
pub const MAX_OUTPUT_LINE_BYTES: usize = 4096;

/// One of a guest's output streams.
#[derive(Clone)]
pub struct GuestOutput {
    inner: Arc<Sink>,
}

struct Sink {
    guest: String,
    stream: &'static str,
    /// `live` or `candidate`.
    version: &'static str,
    /// The unfinished line, at most [`MAX_OUTPUT_LINE_BYTES`].
    pending: Mutex<(Vec<u8>, bool)>,
    budgets: Arc<GuestBudgets>,
}

impl GuestOutput {
    /// A stream named `stream` (`stdout`/`stderr`) of `guest` (its `version`: `live` or
    /// `candidate`), within its log budget.
    pub fn new(
        guest: &str,
        stream: &'static str,
        version: &'static str,
        budgets: Arc<GuestBudgets>,
    ) -> Self {
        GuestOutput {
            inner: Arc::new(Sink {
                guest: guest.to_owned(),
                stream,
                version,
                pending: Mutex::new((Vec::new(), false)),
                budgets,
            }),
        }
    }
}

impl Sink {
    fn write(&self, bytes: &[u8]) {
        let mut guard = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let (line, truncated) = &mut *guard;
        for &b in bytes {
            if b == b'\n' {
                self.emit(line, *truncated);
                line.clear();
                *truncated = false;
            } else if line.len() < MAX_OUTPUT_LINE_BYTES {
                line.push(b);
            } else {
                *truncated = true;
            }
        }
    }

    fn emit(&self, line: &[u8], truncated: bool) {
        if !self.budgets.log.admit(line.len()) {
            return;
        }
        let text = String::from_utf8_lossy(line);
        let text = krec_core::printable(&text);
        let more = if truncated { " [truncated]" } else { "" };
        tracing::info!(guest = %self.guest, version = self.version, stream = self.stream, "{text}{more}");
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let (line, truncated) =
            std::mem::take(self.pending.get_mut().unwrap_or_else(|e| e.into_inner()));
        if !line.is_empty() {
            self.emit(&line, truncated);
        }
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.inner.write(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
