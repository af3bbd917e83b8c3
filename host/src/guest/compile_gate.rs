//! At most a few guest components compile at once.
//!
//! Compiling is the one heavy thing a host does besides reconciling: a Python or JavaScript
//! guest is a 12–18 MB component (its interpreter inside), a Go one 14–60 MB, that takes
//! seconds to minutes of CPU and hundreds of MB of memory to compile, and wasmtime spreads one
//! compile over every core. Guests loaded together (a host starting with ten Python guests, a
//! tag moved for several) would otherwise compile all at once, taking every core and gigabytes
//! from the guests already reconciling. Compiles wait here for a permit — at most half the
//! cores' worth run at once, at least one — on the loading guest's blocking thread, never on a
//! reconcile's. A module already compiled (shared, or in the module cache) takes no permit.
//!
//! Each compile runs on a thread pool of its own ([`on_own_threads`]): wasmtime spreads a
//! compile's functions over the rayon pool it runs in, and on the one global pool a small
//! component's functions queued behind a large one's — a 645 kB guest's compile took 11–35 s
//! beside a Go guest's instead of 0.8 s. On pools of their own, compiles share the cores as
//! threads do.
//!
//! Small components (under [`SMALL_MODULE`]: a Rust guest is 0.6–4 MB and compiles in a second)
//! have a lane of their own, as many at once as there are cores: one tenant's Go guest
//! compiling for a minute must not hold another's small guest — its start, or the swap of a
//! version just built — for that minute (on a 2-core machine, the large lane's one permit did:
//! a 645 kB guest's swap waited 17–26 s behind a TypeScript guest's compile).

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

/// Run `compile` on a rayon pool of its own, as many threads as the cores this process may
/// use; on the caller's thread (and the global pool) when the threads cannot be started.
pub(crate) fn on_own_threads<T: Send>(compile: impl FnOnce() -> T + Send) -> T {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(cores())
        .thread_name(|i| format!("krec-compile-{i}"))
        .build();
    match pool {
        Ok(pool) => pool.install(compile),
        Err(err) => {
            tracing::warn!(
                "cannot start a compile's threads ({err}): compiling on the shared ones"
            );
            compile()
        }
    }
}

/// The cores this process may use (at least one).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Components under this size compile in the small lane.
pub(crate) const SMALL_MODULE: usize = 8 << 20;

/// The two lanes: large components', small ones'.
#[derive(Debug)]
pub(crate) struct Lanes {
    large: CompileGate,
    small: CompileGate,
}

impl Lanes {
    /// `large` compiles of large components at once, `small` of small ones.
    pub(crate) fn new(large: usize, small: usize) -> Self {
        Lanes {
            large: CompileGate::new(large),
            small: CompileGate::new(small),
        }
    }

    /// The gate a component of `size` bytes waits at.
    pub(crate) fn for_size(&self, size: usize) -> &CompileGate {
        if size < SMALL_MODULE {
            &self.small
        } else {
            &self.large
        }
    }
}

/// The gate a component of `size` bytes waits at in this host: for a large one, half the
/// cores this process may use; for a small one, as many as the cores (at least one each).
pub(crate) fn gate(size: usize) -> &'static CompileGate {
    static LANES: OnceLock<Lanes> = OnceLock::new();
    LANES
        .get_or_init(|| Lanes::new(cores() / 2, cores()))
        .for_size(size)
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
    fn a_small_component_should_not_wait_for_a_large_ones_compile() {
        let lanes = Lanes::new(1, 2);
        let _large = lanes.for_size(SMALL_MODULE).enter();
        // The large lane is full; the small one lets two in (`enter` would block otherwise).
        let _small = lanes.for_size(645 << 10).enter();
        let _another = lanes.for_size(SMALL_MODULE - 1).enter();
        assert_eq!(*lanes.large.running.lock().expect("lock"), 1);
        assert_eq!(*lanes.small.running.lock().expect("lock"), 2);
    }

    #[test]
    fn a_compile_should_run_on_threads_of_its_own() {
        let (thread, threads) = on_own_threads(|| {
            (
                std::thread::current().name().map(str::to_owned),
                rayon::current_num_threads(),
            )
        });
        assert!(thread.is_some_and(|t| t.starts_with("krec-compile-")));
        assert_eq!(
            threads,
            cores(),
            "wasmtime's parallel work goes to this pool"
        );
    }

    #[test]
    fn a_limit_of_zero_should_still_let_one_in() {
        let gate = CompileGate::new(0);
        drop(gate.enter());
    }
}
