//! [`GuestLimiter`]: a guest's memory and table budget, summed over all its memories and tables.
//!
//! Wasmtime's stock `StoreLimits` caps each linear memory separately, so a component with several
//! memories could use a multiple of its limit. This limiter counts every byte and element granted
//! to the store, and makes a refused growth a trap (rather than `memory.grow` returning -1) so the
//! failure is reported as out-of-memory with a backtrace instead of surfacing as a guest abort.

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

/// The trap raised when a guest exceeds its memory or table budget.
#[derive(Debug, thiserror::Error)]
#[error("{what} limit exceeded: {requested} requested, {limit} allowed")]
pub struct LimitExceeded {
    /// `memory` (bytes) or `table` (elements).
    pub what: &'static str,
    /// Total that growing would have reached.
    pub requested: usize,
    /// The budget.
    pub limit: usize,
}

/// A store's resource budget. See the [module docs](self).
#[derive(Debug)]
pub struct GuestLimiter {
    memory_limit: usize,
    memory_used: usize,
    memory_peak: usize,
    table_elements: usize,
}

impl GuestLimiter {
    /// A budget of `memory_limit` bytes of linear memory in total.
    pub fn new(memory_limit: usize) -> Self {
        GuestLimiter {
            memory_limit,
            memory_used: 0,
            memory_peak: 0,
            table_elements: 0,
        }
    }

    /// Most linear memory the store has held at once, in bytes.
    pub fn memory_peak(&self) -> usize {
        self.memory_peak
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
        let mut limiter = GuestLimiter::new(100);
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
}
