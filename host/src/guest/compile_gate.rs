//! At most a few guest components compile at once.
//!
//! Compiling is the one heavy thing a host does besides reconciling: a Python or JavaScript
//! guest is a 12–18 MB component (its interpreter inside) that takes seconds of CPU and some
//! 300 MB of memory to compile, and wasmtime spreads one compile over every core. Guests
//! loaded together (a host starting with ten Python guests, a tag moved for several) would
//! otherwise compile all at once, taking every core and gigabytes from the guests already
//! reconciling. Compiles wait here for a permit — at most half the cores' worth run at once,
//! at least one — on the loading guest's blocking thread, never on a reconcile's. A module
//! already compiled (shared, or in the module cache) takes no permit.

use std::sync::{Condvar, Mutex, OnceLock};

/// Counts the compiles running; [`enter`](CompileGate::enter) waits while `limit` run.
#[derive(Debug)]
pub(crate) struct CompileGate {
    running: Mutex<usize>,
    freed: Condvar,
    limit: usize,
}

/// A running compile's place; dropping it lets the next one in.
#[derive(Debug)]
pub(crate) struct Permit<'a>(&'a CompileGate);

impl CompileGate {
    /// A gate letting `limit` (at least one) compiles run at once.
    pub(crate) fn new(limit: usize) -> Self {
        CompileGate {
            running: Mutex::new(0),
            freed: Condvar::new(),
            limit: limit.max(1),
        }
    }

    /// Wait for a place (blocking the calling thread, a loader's), then hold it.
    pub(crate) fn enter(&self) -> Permit<'_> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        while *running >= self.limit {
            running = self.freed.wait(running).unwrap_or_else(|e| e.into_inner());
        }
        *running += 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut running = self.0.running.lock().unwrap_or_else(|e| e.into_inner());
        *running = running.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

/// The host's gate: half the cores this process may use, at least one.
pub(crate) fn gate() -> &'static CompileGate {
    static GATE: OnceLock<CompileGate> = OnceLock::new();
    GATE.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        CompileGate::new(cores / 2)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn no_more_than_the_limit_should_run_at_once() {
        let gate = Arc::new(CompileGate::new(2));
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let (gate, now, most) = (gate.clone(), now.clone(), most.clone());
                std::thread::spawn(move || {
                    let _permit = gate.enter();
                    let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(running, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    now.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("thread");
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
        assert_eq!(
            *gate.running.lock().expect("lock"),
            0,
            "every permit given back"
        );
    }

    #[test]
    fn a_limit_of_zero_should_still_let_one_in() {
        let gate = CompileGate::new(0);
        drop(gate.enter());
    }
}
