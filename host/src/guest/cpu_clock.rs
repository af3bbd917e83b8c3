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

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::budget::CpuAccount;

thread_local! {
    /// The CPU clock of this thread when the metered poll running on it was last charged (or
    /// started); `None` while no metered call is being polled here.
    static MARK: Cell<Option<Duration>> = const { Cell::new(None) };
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
            let now = thread_cpu();
            mark.set(Some(now));
            now.saturating_sub(since)
        }
        None => Duration::ZERO,
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
        // on its own; the enclosing one resumes counting when it returns.
        let enclosing = MARK.with(|mark| mark.replace(Some(thread_cpu())));
        let polled = this.call.poll(cx);
        let now = thread_cpu();
        let since = MARK.with(|mark| mark.replace(enclosing.map(|_| now)));
        if let Some(used) = since.map(|since| now.saturating_sub(since))
            && !used.is_zero()
        {
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

    #[test]
    fn outside_a_metered_call_nothing_should_be_taken() {
        spin(Duration::from_millis(2));
        assert_eq!(take_since_mark(), Duration::ZERO);
    }
}
