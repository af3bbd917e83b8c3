//! [`Ledger`]: what one guest has used since it was loaded — CPU in its own code and in the host
//! work done for it, host calls by kind, bytes copied into and out of it, instances started —
//! over all its workers and instances, for the metrics and its object's status.
//!
//! A platform hosting many teams' guests in one process reads here which guest costs what.
//!
//! - **CPU** is what the guest's [`CpuAccount`] was charged: the CPU time of the threads while
//!   they polled the guest's calls (see `cpu_clock`), its code and the host calls it made alike.
//!   The part spent in host calls — permission checks, cache reads, copying objects, encoding
//!   writes, logging — is measured in laps of the same clock around those calls' polls
//!   ([`Ledger::time`], [`Ledger::timed`]; `cpu_clock::lap`), so it is a part of the charge
//!   and the rest is the guest's own code. Waiting (for the API server, a rate limit) is not
//!   polling and costs nothing. A guest compiled into the host (`native`) runs unmetered: its
//!   CPU charge is 0 and its host work is its host calls' wall time.
//! - **Bytes** are the objects' text handed to the guest (reads, answers to writes) and taken
//!   from it (objects written, patches, Events, log lines).
//! - **Memory** is the linear memory of the guest's instances now (their pool's use).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::budget::CpuAccount;
use super::cpu_clock;
use super::limits::MemoryPool;

/// The kinds of host call counted, as the metrics' `verb` label and the status name them.
pub const CALL_KINDS: [&str; 9] = [
    "get",
    "list",
    "create",
    "update",
    "update_status",
    "patch",
    "delete",
    "event",
    "log",
];

/// One guest's usage, counted. See the module's docs.
#[derive(Debug, Default)]
pub struct Ledger {
    host_nanos: AtomicU64,
    calls: [AtomicU64; CALL_KINDS.len()],
    bytes_to_guest: AtomicU64,
    bytes_from_guest: AtomicU64,
    instances: AtomicU64,
}

/// What a guest has used, read at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// CPU time in the guest's own code.
    pub wasm_cpu: Duration,
    /// CPU time in host work done for it.
    pub host_cpu: Duration,
    /// Host calls by kind ([`CALL_KINDS`]), those made at least once.
    pub calls: Vec<(&'static str, u64)>,
    /// Bytes handed to the guest.
    pub bytes_to_guest: u64,
    /// Bytes taken from the guest.
    pub bytes_from_guest: u64,
    /// Its instances' linear memory now.
    pub memory_bytes: u64,
    /// Instances started (a reconcile that found no instance to reuse: a cold start).
    pub instances: u64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Ledger {
    /// Count a host call of `kind` that handed `to_guest` bytes to the guest and took
    /// `from_guest` from it. A kind not in [`CALL_KINDS`] is counted by its bytes only.
    pub fn call(&self, kind: &str, to_guest: usize, from_guest: usize) {
        if let Some(i) = CALL_KINDS.iter().position(|k| *k == kind) {
            self.calls[i].fetch_add(1, Ordering::Relaxed);
        }
        self.bytes_to_guest
            .fetch_add(to_guest as u64, Ordering::Relaxed);
        self.bytes_from_guest
            .fetch_add(from_guest as u64, Ordering::Relaxed);
    }

    /// Count `spent` as host work done for the guest (a synchronous host call's duration).
    pub fn host_work(&self, spent: Duration) {
        self.host_nanos.fetch_add(nanos(spent), Ordering::Relaxed);
    }

    /// Count an instance started.
    pub fn instance_started(&self) {
        self.instances.fetch_add(1, Ordering::Relaxed);
    }

    /// `call`, its polls' time counted as host work done for the guest.
    pub fn time<F: Future>(&self, call: F) -> HostWork<'_, F> {
        HostWork { call, ledger: self }
    }

    /// Run `work` (a synchronous host call), its time counted as host work done for the guest.
    pub fn timed<R>(&self, work: impl FnOnce() -> R) -> R {
        let span = Span::start();
        let done = work();
        self.host_work(span.end());
        done
    }

    /// The figures now, its CPU from `cpu` and its memory from `memory` (the pool of the
    /// guest's own instances).
    pub fn figures(&self, cpu: &CpuAccount, memory: Option<&MemoryPool>) -> Totals {
        let host_cpu = Duration::from_nanos(self.host_nanos.load(Ordering::Relaxed));
        Totals {
            wasm_cpu: cpu.charged().saturating_sub(host_cpu),
            host_cpu,
            calls: CALL_KINDS
                .iter()
                .zip(&self.calls)
                .map(|(kind, n)| (*kind, n.load(Ordering::Relaxed)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            bytes_to_guest: self.bytes_to_guest.load(Ordering::Relaxed),
            bytes_from_guest: self.bytes_from_guest.load(Ordering::Relaxed),
            memory_bytes: memory.map_or(0, |m| m.used() as u64),
            instances: self.instances.load(Ordering::Relaxed),
        }
    }
}

pin_project_lite::pin_project! {
    /// A host call whose polls are counted as host work: see [`Ledger::time`].
    pub struct HostWork<'a, F> {
        #[pin]
        call: F,
        ledger: &'a Ledger,
    }
}

impl<F: Future> Future for HostWork<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let span = Span::start();
        let polled = this.call.poll(cx);
        this.ledger.host_work(span.end());
        polled
    }
}

/// A stretch of host work: inside a guest's metered call, measured as laps of the call's own
/// CPU clock (`cpu_clock::lap`), so that host work is part of the CPU charged to the guest and
/// never more than it; outside one (a test, a native guest's call run to its end), its wall time.
enum Span {
    Metered,
    Wall(Instant),
}

impl Span {
    fn start() -> Span {
        // The lap closes the guest's own stretch before the host work.
        match cpu_clock::lap() {
            Some(_) => Span::Metered,
            None => Span::Wall(Instant::now()),
        }
    }

    fn end(self) -> Duration {
        match self {
            Span::Metered => cpu_clock::lap().unwrap_or_default(),
            Span::Wall(started) => started.elapsed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_should_be_counted_by_kind_with_their_bytes() {
        let usage = Ledger::default();
        usage.call("get", 6_400, 0);
        usage.call("get", 100, 0);
        usage.call("update", 300, 280);
        usage.call("unknown", 1, 2);
        usage.instance_started();
        let governor = super::super::CpuGovernor::new();
        let cpu = governor.account(1.0);
        let figures = usage.figures(&cpu, None);
        assert_eq!(figures.calls, [("get", 2), ("update", 1)]);
        assert_eq!(figures.bytes_to_guest, 6_801);
        assert_eq!(figures.bytes_from_guest, 282);
        assert_eq!(figures.instances, 1);
    }

    fn spin(d: Duration) {
        let started = Instant::now();
        while started.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    #[tokio::test]
    async fn host_work_in_a_metered_call_should_be_part_of_its_cpu_and_never_more() {
        let governor = super::super::CpuGovernor::new();
        let cpu = governor.account(1.0);
        let usage = Ledger::default();
        let call = cpu_clock::Metered::new(cpu.clone(), async {
            spin_cpu(Duration::from_millis(5));
            // A host call whose thread is off the CPU for 20 ms (as when the machine is
            // loaded), then busy for 2 ms.
            usage
                .time(async {
                    std::thread::sleep(Duration::from_millis(20));
                    spin_cpu(Duration::from_millis(2));
                })
                .await;
            usage.timed(|| spin_cpu(Duration::from_millis(1)));
        });
        call.await;
        let figures = usage.figures(&cpu, None);
        let (host, wasm) = (figures.host_cpu, figures.wasm_cpu);
        assert!(
            // (A lap is read on the wall clock when it is short: up to `SHORT_POLL` may
            // move between the parts.)
            (Duration::from_micros(2_500)..Duration::from_millis(6)).contains(&host),
            "host work {host:?} for 3 ms on the CPU and 20 ms off it"
        );
        assert!(
            (Duration::from_millis(5)..Duration::from_millis(8)).contains(&wasm),
            "the guest's own {wasm:?} for 5 ms"
        );
    }

    fn spin_cpu(d: Duration) {
        let started = cpu_clock::thread_cpu();
        while cpu_clock::thread_cpu().saturating_sub(started) < d {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_timed_call_should_count_its_polls_not_its_waits() {
        let usage = Ledger::default();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // A call pending at its first poll, ready at its second; 5 ms pass between the polls.
        let mut polls = 0;
        let call = std::future::poll_fn(|_| {
            polls += 1;
            if polls == 1 {
                Poll::Pending
            } else {
                Poll::Ready(7)
            }
        });
        let mut timed = std::pin::pin!(usage.time(call));
        assert!(timed.as_mut().poll(&mut cx).is_pending());
        spin(Duration::from_millis(5));
        assert_eq!(timed.as_mut().poll(&mut cx), Poll::Ready(7));
        let host = Duration::from_nanos(usage.host_nanos.load(Ordering::Relaxed));
        assert!(
            host < Duration::from_millis(5),
            "the wait counted: {host:?}"
        );
        // Work done inside a poll counts.
        let mut busy = std::pin::pin!(usage.time(async { spin(Duration::from_millis(5)) }));
        assert!(busy.as_mut().poll(&mut cx).is_ready());
        let host = Duration::from_nanos(usage.host_nanos.load(Ordering::Relaxed));
        assert!(host >= Duration::from_millis(5), "{host:?}");
    }
}
