//! Guest stdout and stderr, forwarded line by line to the host's log under the guest's name.
//!
//! Guests get no inherited stdio; what they print (including Rust's panic messages) becomes log
//! lines `guest=<name> stream=stderr`, each cut at [`MAX_OUTPUT_LINE_BYTES`], at most
//! [`MAX_OUTPUT_LINES_PER_SECOND`] per stream; the lines dropped beyond that are counted and
//! reported, so a guest printing in a loop cannot flood the host's log.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// Longest line of guest output logged; the rest of a longer line is dropped, so a guest cannot
/// make the host buffer unbounded output.
pub const MAX_OUTPUT_LINE_BYTES: usize = 4096;

/// Most lines per second logged from one guest output stream.
pub const MAX_OUTPUT_LINES_PER_SECOND: u32 = 100;

/// One of a guest's output streams.
#[derive(Clone)]
pub struct GuestOutput {
    inner: Arc<Sink>,
}

struct Sink {
    guest: String,
    stream: &'static str,
    /// The unfinished line, at most [`MAX_OUTPUT_LINE_BYTES`].
    pending: Mutex<(Vec<u8>, bool)>,
    budget: Mutex<Budget>,
}

/// Lines logged in the current one-second window, and lines dropped.
struct Budget {
    window: Instant,
    logged: u32,
    dropped: u64,
}

impl GuestOutput {
    /// A stream named `stream` (`stdout`/`stderr`) of `guest`.
    pub fn new(guest: &str, stream: &'static str) -> Self {
        GuestOutput {
            inner: Arc::new(Sink {
                guest: guest.to_owned(),
                stream,
                pending: Mutex::new((Vec::new(), false)),
                budget: Mutex::new(Budget {
                    window: Instant::now(),
                    logged: 0,
                    dropped: 0,
                }),
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
        let mut budget = self.budget.lock().unwrap_or_else(|e| e.into_inner());
        if budget.window.elapsed() >= Duration::from_secs(1) {
            self.report_dropped(&mut budget);
            budget.window = Instant::now();
            budget.logged = 0;
        }
        if budget.logged >= MAX_OUTPUT_LINES_PER_SECOND {
            budget.dropped += 1;
            return;
        }
        budget.logged += 1;
        drop(budget);
        let text = String::from_utf8_lossy(line);
        let more = if truncated { " [truncated]" } else { "" };
        tracing::info!(guest = %self.guest, stream = self.stream, "{text}{more}");
    }
}

impl Sink {
    fn report_dropped(&self, budget: &mut Budget) {
        if budget.dropped > 0 {
            tracing::warn!(
                guest = %self.guest,
                stream = self.stream,
                "{} line(s) of output dropped: more than {MAX_OUTPUT_LINES_PER_SECOND} lines/s",
                budget.dropped
            );
            budget.dropped = 0;
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let (line, truncated) =
            std::mem::take(self.pending.get_mut().unwrap_or_else(|e| e.into_inner()));
        if !line.is_empty() {
            self.emit(&line, truncated);
        }
        let mut budget = std::mem::replace(
            self.budget.get_mut().unwrap_or_else(|e| e.into_inner()),
            Budget {
                window: Instant::now(),
                logged: 0,
                dropped: 0,
            },
        );
        self.report_dropped(&mut budget);
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
