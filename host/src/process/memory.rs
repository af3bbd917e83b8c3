//! Giving the memory a burst freed back to the operating system.
//!
//! Allocators keep freed memory for later allocations. After an initial list or a resync has
//! queued every object of a kind for every guest, the megabytes those workqueues held would stay
//! resident for the life of the process — about 2.5 MiB per guest for 10 000 objects — and so
//! would the pages of every (re)list an informer decoded, several kilobytes per object listed.
//! [`release_soon`] asks for one collection a moment later. With mimalloc (the `krec` binary's
//! allocator, see `main.rs`) that returns the free memory of its arenas — where pages go once a
//! thread has freed all of their blocks, as a drained queue's buffers are — to the operating
//! system at once instead of after its purge delay (pages a worker thread still holds in its own
//! heap stay until that thread frees or reuses them); with glibc (programs that link the library
//! with the system's allocator, such as the tests and the benchmarks) every whole free page of
//! every arena. Queues that drain together share one collection.
//!
//! Elsewhere than on Linux it does nothing.

use std::time::Duration;

/// The default budget of all guests' linear memory together (`--guest-memory`): half of the
/// machine's memory (`MemTotal`, or a cgroup's `memory.max` when lower), or 8 GiB where
/// neither can be read.
pub fn default_guest_memory() -> u64 {
    const FALLBACK: u64 = 8 << 30;
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib.saturating_mul(1024))
        });
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|max| max.trim().parse::<u64>().ok());
    match (total, cgroup) {
        (Some(total), Some(cgroup)) => total.min(cgroup) / 2,
        (Some(only), None) | (None, Some(only)) => only / 2,
        (None, None) => FALLBACK,
    }
}

/// How long a request waits for others to join it (queues of many guests drain within
/// milliseconds of each other after a list).
const SETTLE: Duration = Duration::from_millis(200);

/// Ask for the heap's free pages to be returned to the operating system shortly (once, however
/// many callers ask meanwhile). Cheap to call: it only flags the request.
pub fn release_soon() {
    #[cfg(target_os = "linux")]
    trimmer::request();
}

#[cfg(target_os = "linux")]
mod trimmer {
    use std::sync::{Condvar, Mutex, OnceLock};

    /// The trimming thread's mailbox: whether a trim is wanted.
    struct Trimmer {
        wanted: Mutex<bool>,
        wake: Condvar,
    }

    static TRIMMER: Trimmer = Trimmer {
        wanted: Mutex::new(false),
        wake: Condvar::new(),
    };
    /// Whether the trimming thread runs (it is started by the first request).
    static STARTED: OnceLock<bool> = OnceLock::new();

    pub(super) fn request() {
        if !*STARTED.get_or_init(start) {
            return;
        }
        let mut wanted = TRIMMER.wanted.lock().unwrap_or_else(|e| e.into_inner());
        if !*wanted {
            *wanted = true;
            TRIMMER.wake.notify_one();
        }
    }

    /// Start the trimming thread; `false` when it cannot be (memory then stays as it is).
    fn start() -> bool {
        let started = std::thread::Builder::new()
            .name("krec-trim".into())
            .spawn(|| {
                // Started by whichever thread first wants a trim: perhaps a demoted guest's.
                crate::process::threads::undemote_this_thread();
                loop {
                    {
                        let mut wanted = TRIMMER.wanted.lock().unwrap_or_else(|e| e.into_inner());
                        while !*wanted {
                            wanted = TRIMMER.wake.wait(wanted).unwrap_or_else(|e| e.into_inner());
                        }
                    }
                    // Let the other queues draining now join this request.
                    std::thread::sleep(super::SETTLE);
                    *TRIMMER.wanted.lock().unwrap_or_else(|e| e.into_inner()) = false;
                    trim();
                }
            });
        match started {
            Ok(_) => true,
            Err(err) => {
                tracing::warn!("not returning freed memory: cannot start its thread: {err}");
                false
            }
        }
    }

    fn trim() {
        // mimalloc: this thread's heap collected, and the free memory of every arena returned
        // to the system now (nothing to return when the process allocates with the system's
        // allocator instead).
        // SAFETY: mi_collect only releases memory mimalloc holds free; it may be called from
        // any thread at any time.
        #[allow(unsafe_code)] // mi_collect has no safe wrapper
        unsafe {
            libmimalloc_sys::mi_collect(true);
        }
        // glibc: every whole free page of every arena.
        #[cfg(target_env = "gnu")]
        // SAFETY: malloc_trim(3) only returns free pages of the allocator's own arenas; it
        // takes the arenas' locks like any allocation.
        #[allow(unsafe_code)] // malloc_trim(3) has no safe wrapper
        unsafe {
            libc::malloc_trim(0);
        }
    }
}
