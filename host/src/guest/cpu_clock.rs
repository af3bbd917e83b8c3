//! The CPU time a guest's code takes, as a container's CPU account counts it: the time the
//! kernel ran the thread that runs the guest, not the wall-clock time that passed.
//!
//! A guest's calls (its instantiation, a reconcile, a review) are futures; each poll of one runs
//! on some runtime thread, and only while it is polled does the guest use that thread. A call
//! wrapped in [`Metered`] marks the thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`) when each
//! poll starts; the store's epoch callback takes what was used since the mark
//! ([`take_since_mark`]) and charges it to the guest's [`CpuAccount`], and what a poll used after
//! the last tick is charged when it returns. A guest whose thread the machine does not run — a
//! loaded node, other processes on its cores — is not charged for the time it waited, so it is
//! held back for what it used, never for what the machine took from it. Host calls made on the
//! guest's behalf count as its own, as a container's system time does; time spent waiting in
//! them (the API server, a rate limiter) is not CPU and costs nothing.
//!
//! Reading a thread's CPU clock is a system call (1–1.5 µs in a VM; the vDSO serves only the
//! wall clocks), so a poll reads it once, when it starts. A span that ends within
//! [`SHORT_POLL`] of its mark is charged its wall time instead of a second reading: the
//! kernel cannot have kept the thread off the CPU for longer than that span, and a time slice
//! given to another thread (milliseconds) pushes the span past the bound, onto the CPU clock.
//! What a short span may overcharge is a brief preemption inside it, at most the bound. A
//! reconcile of tens of microseconds — most of them — pays one clock read, not two.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::budget::CpuAccount;

/// A poll that ends this soon after its mark is charged the wall time since the mark, without
/// reading the CPU clock again (see the module's docs).
pub const SHORT_POLL: Duration = Duration::from_micros(200);

/// When the metered poll running on a thread was last charged (or started), and what it has
/// used since then in laps not charged yet (see [`lap`]).
#[derive(Clone, Copy, Debug)]
struct Mark {
    /// The thread's CPU clock then.
    cpu: Duration,
    /// The wall clock then.
    wall: Instant,
    /// CPU used before the mark and not charged yet.
    pending: Duration,
}

impl Mark {
    fn now() -> Mark {
        Mark {
            cpu: thread_cpu(),
            wall: Instant::now(),
            pending: Duration::ZERO,
        }
    }

    /// The CPU used since this mark, and the mark to go on from (`pending` kept): the wall
    /// time since it for a short span, the CPU clock's reading otherwise.
    fn used(self) -> (Duration, Mark) {
        let wall = Instant::now();
        let elapsed = wall.saturating_duration_since(self.wall);
        let (used, cpu) = if elapsed <= SHORT_POLL {
            (elapsed, self.cpu + elapsed)
        } else {
            let cpu = thread_cpu();
            (cpu.saturating_sub(self.cpu), cpu)
        };
        let next = Mark {
            cpu,
            wall,
            pending: self.pending,
        };
        (used, next)
    }
}

thread_local! {
    /// The mark of the metered poll running on this thread; `None` while no metered call is
    /// being polled here.
    static MARK: Cell<Option<Mark>> = const { Cell::new(None) };
}

/// CPU time the calling thread has used.
#[cfg(unix)]
pub fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    #[allow(unsafe_code)] // clock_gettime(2) has no safe wrapper in std
    // SAFETY: `now` is a valid timespec the call writes into; the clock id is a constant.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if status != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// CPU time the calling thread has used (no per-thread clock here: the process's monotonic
/// clock, so that a guest is charged wall-clock time while it is polled).
#[cfg(not(unix))]
pub fn thread_cpu() -> Duration {
    use std::sync::OnceLock;
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

/// The CPU time the metered call being polled on this thread has used since it was last
/// charged, marking now; zero outside a metered call.
pub fn take_since_mark() -> Duration {
    MARK.with(|mark| match mark.get() {
        Some(since) => {
            let (used, now) = since.used();
            mark.set(Some(Mark {
                pending: Duration::ZERO,
                ..now
            }));
            since.pending + used
        }
        None => Duration::ZERO,
    })
}

/// Inside a metered call: the CPU it used since the last mark or lap, marking now; that time is
/// still charged with the rest (at the next tick or when the poll returns). Two laps around a
/// piece of work (a host call) measure it on the same clock as the call's whole charge, so the
/// parts never add up to more than the whole. `None` outside a metered call.
pub fn lap() -> Option<Duration> {
    MARK.with(|mark| {
        let since = mark.get()?;
        let (used, now) = since.used();
        mark.set(Some(Mark {
            pending: since.pending + used,
            ..now
        }));
        Some(used)
    })
}

pin_project_lite::pin_project! {
    /// A guest call whose polls are charged to its guest's CPU account: see the module's docs.
    pub struct Metered<F> {
        #[pin]
        call: F,
        account: Arc<CpuAccount>,
    }
}

/// Puts a thread's enclosing mark back when a metered poll unwinds.
struct Restore(Option<Mark>);

impl Drop for Restore {
    fn drop(&mut self) {
        let enclosing = self.0;
        MARK.with(|mark| mark.set(enclosing));
    }
}

impl<F> Metered<F> {
    /// Meter `call`, charging `account`.
    pub fn new(account: Arc<CpuAccount>, call: F) -> Self {
        Metered { call, account }
    }
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // A metered call polled inside another (a host call running a second guest) is charged
        // on its own: what the enclosing one used up to here stays pending for it (a lap), and
        // it resumes from where the inner call ends.
        let enclosing = MARK.with(Cell::get).map(|outer| {
            let (used, now) = outer.used();
            Mark {
                pending: outer.pending + used,
                ..now
            }
        });
        let start = enclosing.map_or_else(Mark::now, |outer| Mark {
            pending: Duration::ZERO,
            ..outer
        });
        MARK.with(|mark| mark.set(Some(start)));
        // Should the call panic, this thread is given back its enclosing mark (or none).
        let restore = Restore(enclosing);
        let polled = this.call.poll(cx);
        let (used, now) = match MARK.with(Cell::get) {
            Some(since) => {
                let (used, now) = since.used();
                (since.pending + used, Some(now))
            }
            None => (Duration::ZERO, None),
        };
        std::mem::forget(restore);
        let resumed = enclosing.zip(now).map(|(outer, now)| Mark {
            pending: outer.pending,
            ..now
        });
        MARK.with(|mark| mark.set(resumed));
        if !used.is_zero() {
            // A debt this leaves is paid at the next epoch tick or before the next call.
            let _ = this.account.charge(used);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::CpuGovernor;

    fn spin(cpu: Duration) {
        let start = thread_cpu();
        while thread_cpu().saturating_sub(start) < cpu {
            std::hint::black_box(0u64);
        }
    }

    #[tokio::test]
    async fn a_metered_call_should_be_charged_the_cpu_it_used_and_not_the_time_it_waited() {
        let account = CpuGovernor::with_cores(1.0).account(1.0);
        let call = Metered::new(account.clone(), async {
            spin(Duration::from_millis(20));
            // Waiting is not CPU.
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(
                take_since_mark() < Duration::from_millis(5),
                "the wait was charged"
            );
            spin(Duration::from_millis(20));
        });
        call.await;
        let charged = account.charged();
        assert!(
            (Duration::from_millis(40)..Duration::from_millis(48)).contains(&charged),
            "charged {charged:?} for 40 ms of CPU and a 50 ms wait"
        );
    }

    #[tokio::test]
    async fn a_poll_off_the_cpu_should_cost_nothing_and_a_short_one_its_wall_time() {
        let account = CpuGovernor::with_cores(1.0).account(1.0);
        // A poll the kernel keeps off the CPU (here: the thread asleep) for 20 ms: longer than
        // a short poll, so read on the CPU clock, which did not move.
        Metered::new(account.clone(), async {
            std::thread::sleep(Duration::from_millis(20));
        })
        .await;
        let charged = account.charged();
        assert!(
            charged < Duration::from_millis(2),
            "charged {charged:?} for 20 ms off the CPU"
        );
        // Short polls are charged what they took on the wall clock, no more.
        for _ in 0..100 {
            let started = Instant::now();
            let before = account.charged();
            Metered::new(account.clone(), async { std::hint::black_box(1 + 1) }).await;
            let took = started.elapsed();
            let used = account.charged().saturating_sub(before);
            assert!(
                used <= took.max(SHORT_POLL),
                "{used:?} for a poll of {took:?}"
            );
        }
    }

    #[tokio::test]
    async fn nested_calls_should_each_be_charged_their_own_work() {
        let governor = CpuGovernor::with_cores(1.0);
        let (outer, inner) = (governor.account(1.0), governor.account(1.0));
        Metered::new(outer.clone(), async {
            spin(Duration::from_millis(10));
            Metered::new(inner.clone(), async { spin(Duration::from_millis(20)) }).await;
            spin(Duration::from_millis(10));
        })
        .await;
        let (outer, inner) = (outer.charged(), inner.charged());
        assert!(
            (Duration::from_millis(20)..Duration::from_millis(26)).contains(&outer),
            "the enclosing call: {outer:?} for 20 ms"
        );
        assert!(
            (Duration::from_millis(20)..Duration::from_millis(26)).contains(&inner),
            "the inner call: {inner:?} for 20 ms"
        );
    }

    #[test]
    fn a_call_that_panics_should_leave_the_thread_unmetered() {
        let account = CpuGovernor::with_cores(1.0).account(1.0);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut call = std::pin::pin!(Metered::new(account.clone(), async {
                panic!("the guest call panics")
            }));
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let _ = call.as_mut().poll(&mut cx);
        }));
        assert!(unwound.is_err());
        assert!(lap().is_none(), "the thread still looks metered");
        spin(Duration::from_millis(2));
        assert_eq!(take_since_mark(), Duration::ZERO);
    }

    #[test]
    fn outside_a_metered_call_nothing_should_be_taken() {
        spin(Duration::from_millis(2));
        assert_eq!(take_since_mark(), Duration::ZERO);
    }
}
