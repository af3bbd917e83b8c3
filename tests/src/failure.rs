//! A failing test explains itself at the end of its output: CI shows a failure's output cut
//! to its head and tail, and the host's log between the two can be long. When a [`Live`] test
//! panics, its panic message and the guests as the host sees them are printed last, and the
//! host's log stops there (later lines, of the teardown, would push them out of the tail).
//!
//! [`Live`]: crate::Live

use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a test failed: no log line is printed after its summary. Tests run side by side
/// and share the log; a test failing after this one still prints its own summary.
static MUTED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The message of the last panic on this thread.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The log's writer: the test harness's captured output (as `with_test_writer`), nothing once
/// a failure is summarized.
pub(crate) struct TestLog;

impl Write for TestLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !MUTED.load(Ordering::Relaxed) {
            // `print!`, not stdout: the test harness captures it.
            print!("{}", String::from_utf8_lossy(buf));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Keep each panic's message for [`summarize`] (once per process; the harness's own hook
/// still prints it where it happens).
pub(crate) fn remember_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = match info.location() {
                Some(at) => format!("{} (at {at})", info.payload_as_str().unwrap_or("a panic")),
                None => info.payload_as_str().unwrap_or("a panic").to_owned(),
            };
            LAST_PANIC.with(|last| *last.borrow_mut() = Some(message));
            previous(info);
        }));
    });
}

/// Print why the test on this thread failed and each guest as `manager` sees it, then mute
/// the log.
pub(crate) fn summarize(manager: &krec::guests::Manager) {
    MUTED.store(true, Ordering::Relaxed);
    let why = LAST_PANIC
        .with(|last| last.borrow_mut().take())
        .unwrap_or_else(|| "a panic".to_owned());
    let mut lines = vec![
        String::new(),
        "==== the test failed (the host's log is above, and stops here) ====".to_owned(),
        format!("why: {why}"),
    ];
    for guest in manager.overview().guests {
        let mut line = format!("guest {}: {}", guest.name, guest.state);
        if let Some(running) = &guest.running {
            let counts = &running.reconciles;
            line.push_str(&format!(
                ", version {} ({}), queue {}, active {}/{}, quarantined {}, reconciles {} \
                 (done {}, requeued {}, errors {}, traps {})",
                running.version,
                running.digest,
                running.queue_depth,
                running.active,
                running.max_concurrent,
                running.quarantined,
                counts.total,
                counts.done,
                counts.requeued,
                counts.errors,
                counts.traps,
            ));
            if let Some(error) = &running.last_error {
                line.push_str(&format!(", last error: {}", error.message));
            }
        }
        if let Some(reason) = &guest.reason {
            line.push_str(&format!(", reason: {reason}"));
        }
        lines.push(line);
    }
    for (guest, ended) in manager.background_loads() {
        let state = if ended {
            "ended, not taken up yet"
        } else {
            "running"
        };
        lines.push(format!(
            "guest {guest}: a new version's load in the background, {state}"
        ));
    }
    lines.push(String::new());
    print!("{}", lines.join("\n"));
    let _ = std::io::stdout().flush();
}
