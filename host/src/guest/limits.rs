//! [`GuestLimiter`]: a guest instance's memory and table budget, summed over all its memories
//! and tables, and drawn from the guest's and the host's [`MemoryPool`]s.
//!
//! Wasmtime's stock `StoreLimits` caps each linear memory separately, so a component with several
//! memories could use a multiple of its limit. This limiter counts every byte and element granted
//! to the store, and makes a refused growth a trap (rather than `memory.grow` returning -1) so the
//! failure is reported as out-of-memory with a backtrace instead of surfacing as a guest abort.
//!
//! `limits.memory` bounds one instance; a guest has many (a worker's each, pooled review and
//! map instances), and linear memory never shrinks. So every byte an instance is granted is
//! also taken from its guest's pool (`limits.totalMemory`) and from the host's (`--guest-memory`),
//! and given back when the instance is dropped: a burst of concurrent reconciles and reviews
//! that would hold more than the guest's budget traps out-of-memory instead, and the host's
//! budget bounds all guests together. An instance kept between calls that has grown well
//! beyond what it held when new ([`IDLE_GROWTH_ALLOWANCE`]) gives its memory back: a review
//! or map instance is dropped after its call, a worker's once the worker has been idle a while
//! (`controller::GROWN_INSTANCE_IDLE`), so what a burst grew does not stay held.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use wasmtime::ResourceLimiter;

/// Most instances one guest may create: a Rust guest component needs a handful (its own core
/// instances plus the WASI adapter's).
pub const MAX_INSTANCES: usize = 32;
/// Most tables one guest may create.
pub const MAX_TABLES: usize = 32;
/// Most linear memories one guest may create.
pub const MAX_MEMORIES: usize = 8;
/// Most table elements one guest may hold, over all its tables.
pub const MAX_TABLE_ELEMENTS: usize = 1_000_000;
/// How much more linear memory than it held when new (after `init`) an instance may hold and
/// still be kept for the next call: enough for a reconcile's working set to stay warm, little
/// enough that idle instances hold little.
pub const IDLE_GROWTH_ALLOWANCE: usize = 16 << 20;

/// The trap raised when a guest exceeds its memory or table budget.
#[derive(Debug, thiserror::Error)]
#[error("{what} limit exceeded: {requested} requested, {limit} allowed")]
pub struct LimitExceeded {
    /// `memory` (bytes, of the instance), `table` (elements), or the pool's name (bytes of
    /// all the guest's, or all guests', instances).
    pub what: &'static str,
    /// Total that growing would have reached.
    pub requested: usize,
    /// The budget.
    pub limit: usize,
}

/// Linear memory held by a set of instances (one guest's, or every guest's) against a budget.
#[derive(Debug)]
pub struct MemoryPool {
    /// Names the budget in the out-of-memory trap.
    name: &'static str,
    budget: usize,
    used: AtomicUsize,
    peak: AtomicUsize,
}

impl MemoryPool {
    /// A pool of `budget` bytes, named `name` in errors.
    pub fn new(name: &'static str, budget: usize) -> Arc<Self> {
        Arc::new(MemoryPool {
            name,
            budget,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        })
    }

    /// A pool without a budget (tests, tools that run one instance).
    pub fn unlimited() -> Arc<Self> {
        Self::new("memory", usize::MAX)
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// Most bytes held at once so far.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Acquire)
    }

    /// The budget in bytes.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Take `bytes`, or refuse with what the pool would have reached.
    fn take(&self, bytes: usize) -> Result<(), LimitExceeded> {
        let mut used = self.used.load(Ordering::Acquire);
        loop {
            let wanted = used.saturating_add(bytes);
            if wanted > self.budget {
                return Err(LimitExceeded {
                    what: self.name,
                    requested: wanted,
                    limit: self.budget,
                });
            }
            match self
                .used
                .compare_exchange_weak(used, wanted, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    self.peak.fetch_max(wanted, Ordering::AcqRel);
                    return Ok(());
                }
                Err(now) => used = now,
            }
        }
    }

    fn give_back(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// A store's resource budget. See the module's docs.
#[derive(Debug)]
pub struct GuestLimiter {
    memory_limit: usize,
    memory_used: usize,
    memory_peak: usize,
    /// What the instance held when it was ready (see [`mark_ready`](Self::mark_ready)).
    memory_ready: usize,
    table_elements: usize,
    /// The pools its memory is also drawn from: its guest's, the host's.
    pools: Vec<Arc<MemoryPool>>,
}

impl GuestLimiter {
    /// A budget of `memory_limit` bytes of linear memory in total, drawn from `pools` as well.
    pub fn new(memory_limit: usize, pools: Vec<Arc<MemoryPool>>) -> Self {
        GuestLimiter {
            memory_limit,
            memory_used: 0,
            memory_peak: 0,
            memory_ready: 0,
            table_elements: 0,
            pools,
        }
    }

    /// Most linear memory the store has held at once, in bytes.
    pub fn memory_peak(&self) -> usize {
        self.memory_peak
    }

    /// Linear memory the store holds now, in bytes.
    pub fn memory_used(&self) -> usize {
        self.memory_used
    }

    /// Note what the instance holds once instantiated and configured: the baseline
    /// [`worth_keeping`](Self::worth_keeping) measures growth from.
    pub fn mark_ready(&mut self) {
        self.memory_ready = self.memory_used;
    }

    /// Whether the instance is worth keeping for another call: it has not grown more than
    /// [`IDLE_GROWTH_ALLOWANCE`] beyond what it held when ready.
    pub fn worth_keeping(&self) -> bool {
        self.memory_used <= self.memory_ready.saturating_add(IDLE_GROWTH_ALLOWANCE)
    }
}

impl Drop for GuestLimiter {
    fn drop(&mut self) {
        for pool in &self.pools {
            pool.give_back(self.memory_used);
        }
    }
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let requested = self
            .memory_used
            .saturating_add(desired.saturating_sub(current));
        if requested > self.memory_limit {
            return Err(LimitExceeded {
                what: "memory",
                requested,
                limit: self.memory_limit,
            }
            .into());
        }
        let growth = requested - self.memory_used;
        for (taken, pool) in self.pools.iter().enumerate() {
            if let Err(refused) = pool.take(growth) {
                for pool in &self.pools[..taken] {
                    pool.give_back(growth);
                }
                return Err(refused.into());
            }
        }
        self.memory_used = requested;
        self.memory_peak = self.memory_peak.max(requested);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let requested = self
            .table_elements
            .saturating_add(desired.saturating_sub(current));
        if requested > MAX_TABLE_ELEMENTS {
            return Err(LimitExceeded {
                what: "table",
                requested,
                limit: MAX_TABLE_ELEMENTS,
            }
            .into());
        }
        self.table_elements = requested;
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_should_sum_growth_over_all_memories() {
        let mut limiter = GuestLimiter::new(100, Vec::new());
        assert!(limiter.memory_growing(0, 60, None).expect("first memory"));
        let err = limiter
            .memory_growing(0, 60, None)
            .expect_err("second memory over budget");
        assert!(err.downcast_ref::<LimitExceeded>().is_some());
        assert!(
            limiter
                .memory_growing(60, 100, None)
                .expect("grow the first to the budget")
        );
        assert_eq!(limiter.memory_peak(), 100);
    }

    #[test]
    fn instances_should_draw_from_their_pools_and_give_back_when_dropped() {
        let guest = MemoryPool::new("guest memory (all instances)", 150);
        let host = MemoryPool::new("host guest memory", 1000);
        let pools = || vec![guest.clone(), host.clone()];
        let mut first = GuestLimiter::new(100, pools());
        let mut second = GuestLimiter::new(100, pools());
        assert!(first.memory_growing(0, 100, None).expect("within both"));
        let err = second
            .memory_growing(0, 60, None)
            .expect_err("the guest's pool is spent");
        let exceeded = err.downcast_ref::<LimitExceeded>().expect("a limit");
        assert_eq!(exceeded.what, "guest memory (all instances)");
        assert_eq!((guest.used(), host.used()), (100, 100), "nothing taken");
        assert!(second.memory_growing(0, 50, None).expect("what is left"));
        drop(first);
        assert_eq!((guest.used(), host.used()), (50, 50));
        drop(second);
        assert_eq!((guest.used(), host.used()), (0, 0));
    }

    #[test]
    fn an_instance_that_grew_past_the_allowance_should_not_be_kept() {
        let mut limiter = GuestLimiter::new(usize::MAX, Vec::new());
        assert!(limiter.memory_growing(0, 2 << 20, None).expect("start"));
        limiter.mark_ready();
        assert!(limiter.worth_keeping());
        let grown = (2 << 20) + IDLE_GROWTH_ALLOWANCE + 1;
        assert!(limiter.memory_growing(2 << 20, grown, None).expect("grow"));
        assert!(!limiter.worth_keeping());
    }
}
