//! [`LogBudget`]: how much one guest may write to the host's log, over every channel (the `log`
//! import, stdout and stderr) and every worker and instance of the guest together.
//!
//! A guest logging in a loop would otherwise fill the disk and slow every other guest's log
//! lines (the writer is shared). Lines beyond the budget are dropped, counted, and reported in
//! one warning per window.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Most log lines per second from one guest, over all its channels.
pub const MAX_LOG_LINES_PER_SECOND: u32 = 100;
/// Most log bytes per second from one guest, over all its channels.
pub const MAX_LOG_BYTES_PER_SECOND: usize = 64 << 10;

/// One guest's log budget. See the module's docs.
#[derive(Debug)]
pub struct LogBudget {
    guest: String,
    window: Mutex<Window>,
    /// Dropped lines not yet added to the metrics.
    unreported: AtomicU64,
}

#[derive(Debug)]
struct Window {
    start: Instant,
    lines: u32,
    bytes: usize,
    dropped_lines: u64,
    dropped_bytes: u64,
}

impl LogBudget {
    /// A fresh budget for `guest`.
    pub fn new(guest: &str) -> Self {
        LogBudget {
            guest: guest.to_owned(),
            window: Mutex::new(Window {
                start: Instant::now(),
                lines: 0,
                bytes: 0,
                dropped_lines: 0,
                dropped_bytes: 0,
            }),
            unreported: AtomicU64::new(0),
        }
    }

    /// Charge a line of `bytes` bytes: `true` when it may be logged, `false` when it is over the
    /// budget (and counted as dropped).
    pub fn admit(&self, bytes: usize) -> bool {
        let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        if window.start.elapsed() >= Duration::from_secs(1) {
            self.report(&mut window);
            window.start = Instant::now();
            window.lines = 0;
            window.bytes = 0;
        }
        if window.lines >= MAX_LOG_LINES_PER_SECOND
            || window.bytes.saturating_add(bytes) > MAX_LOG_BYTES_PER_SECOND
        {
            window.dropped_lines += 1;
            window.dropped_bytes += bytes as u64;
            self.unreported.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        window.lines += 1;
        window.bytes += bytes;
        true
    }

    /// Lines dropped since the last call, for the `krec_guest_log_dropped_total` counter.
    pub fn take_dropped(&self) -> u64 {
        self.unreported.swap(0, Ordering::Relaxed)
    }

    fn report(&self, window: &mut Window) {
        if window.dropped_lines > 0 {
            tracing::warn!(
                guest = %self.guest,
                "{} log line(s) ({} bytes) dropped: over the guest's budget of \
                 {MAX_LOG_LINES_PER_SECOND} lines and {} KiB per second",
                window.dropped_lines,
                window.dropped_bytes,
                MAX_LOG_BYTES_PER_SECOND >> 10
            );
            window.dropped_lines = 0;
            window.dropped_bytes = 0;
        }
    }
}

impl Drop for LogBudget {
    fn drop(&mut self) {
        let window = self.window.get_mut().unwrap_or_else(|e| e.into_inner());
        let mut window = std::mem::replace(
            window,
            Window {
                start: Instant::now(),
                lines: 0,
                bytes: 0,
                dropped_lines: 0,
                dropped_bytes: 0,
            },
        );
        self.report(&mut window);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_should_log_at_most_its_lines_and_bytes_per_second() {
        let budget = LogBudget::new("g");
        let admitted = (0..1000).filter(|_| budget.admit(10)).count();
        assert_eq!(admitted, MAX_LOG_LINES_PER_SECOND as usize);
        assert_eq!(budget.take_dropped(), 900);
        assert_eq!(budget.take_dropped(), 0);
        let big = LogBudget::new("g");
        let admitted = (0..100).filter(|_| big.admit(16 << 10)).count();
        assert_eq!(admitted, MAX_LOG_BYTES_PER_SECOND / (16 << 10));
    }
}
