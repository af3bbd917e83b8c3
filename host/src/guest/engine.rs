//! The one wasmtime [`Engine`] the host compiles and runs every guest with, and its epoch ticker.
//!
//! Guests run asynchronously (a guest's host calls await the API server without blocking a
//! thread) and are interrupted by epochs: a background thread advances the engine's epoch every
//! [`EPOCH_TICK`], and each store's deadline callback yields to the async executor on every tick
//! and traps once the reconcile's time limit has passed, so an infinite loop can neither run
//! forever nor hold a runtime thread.

use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Strategy};

/// How often the epoch advances: the granularity of timeouts and of yielding to other tasks.
pub const EPOCH_TICK: Duration = Duration::from_millis(1);

/// Instances the pool has room for at once: per-reconcile and admission instances in flight
/// (each lives for one call). Address space only: each memory slot reserves 4 GiB + guard,
/// untouched, so the pool is ~4 TiB of the 128 TiB a 64-bit process has.
pub const POOL_SLOTS: u32 = 1_000;

/// Memory of a released instance kept resident for the next instance in its slot (reset in
/// place rather than unmapped and faulted in again): what a fresh instance per reconcile saves.
const KEEP_RESIDENT: usize = 2 << 20;

/// Released slots that keep [`KEEP_RESIDENT`] memory; older ones are given back, so what the
/// pool keeps resident is bounded (about 16 × 2.5 MiB).
const WARM_SLOTS: u32 = 16;

/// Which of wasmtime's compilers turns guests into machine code.
///
/// Measured on a 17.9 MB Go component (debug host, 2 cores): Cranelift compiles it in ~14 s,
/// Winch in ~3.5 s; Winch's code runs slower (it does no optimisation). The author's commands
/// (`krec dev`, `check`, `replay`) take Winch — an edit of a Go guest runs seconds sooner —
/// `krec run` and the test kits Cranelift. See BENCHMARKS.md, "The author's inner loop".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Compiler {
    /// Cranelift: optimising, the code a cluster should run.
    #[default]
    Cranelift,
    /// Winch: a baseline compiler, one pass per function — compiles several times faster, runs
    /// slower.
    Winch,
}

/// Build the engine for instances that live long (`isolation: reuse`, a worker's instance kept
/// across reconciles): component model and epoch interruption (async support is always on),
/// instances allocated on demand with copy-on-write memory images — no cap on how many guests
/// hold one.
pub fn new_engine() -> wasmtime::Result<Engine> {
    new_engine_compiled_by(Compiler::Cranelift)
}

/// [`new_engine`], its guests compiled by `compiler`.
pub fn new_engine_compiled_by(compiler: Compiler) -> wasmtime::Result<Engine> {
    let engine = Engine::new(&base_config(compiler))?;
    spawn_epoch_ticker(&engine);
    Ok(engine)
}

/// Build the engine for instances made per call (`isolation: per-reconcile`): the same, its
/// instances taken from a pool of [`POOL_SLOTS`] pre-reserved slots whose memory, tables and
/// stacks stay resident between instances (instantiation 61 → 26 µs, a fresh reconcile
/// 245 → 151 µs in `guest_call`). If the pool's address space cannot be reserved (a
/// `ulimit -v`), instances are allocated on demand instead, with a warning; when all slots are
/// in use, instantiation fails and the key is retried with backoff.
pub fn new_pooled_engine(compiler: Compiler) -> wasmtime::Result<Engine> {
    let mut config = base_config(compiler);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool()));
    match Engine::new(&config) {
        Ok(engine) => {
            spawn_epoch_ticker(&engine);
            Ok(engine)
        }
        Err(err) => {
            tracing::warn!(
                "per-reconcile instances are allocated on demand: the instance pool cannot be set up: {err:#}"
            );
            new_engine_compiled_by(compiler)
        }
    }
}

fn base_config(compiler: Compiler) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.strategy(match compiler {
        Compiler::Cranelift => Strategy::Cranelift,
        Compiler::Winch => Strategy::Winch,
    });
    // A build with `wasm-profiling`: `KREC_WASM_PROFILE=perfmap` writes /tmp/perf-PID.map, so
    // `perf report` names guests' functions.
    #[cfg(feature = "wasm-profiling")]
    if std::env::var("KREC_WASM_PROFILE").as_deref() == Ok("perfmap") {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    config
}

/// The pool: room for [`POOL_SLOTS`] instances, with limits no tighter than the on-demand
/// allocator puts on what a guest may declare (a 4 GiB memory; as many tables, memories and
/// core instances as Rust, Go and C components use); the manifest's memory limit is enforced
/// per store as before.
fn pool() -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(POOL_SLOTS)
        .total_memories(POOL_SLOTS)
        .total_tables(2 * POOL_SLOTS)
        .total_stacks(POOL_SLOTS)
        .total_core_instances(5 * POOL_SLOTS)
        .max_memory_size(4 << 30)
        .max_memories_per_module(2)
        .max_tables_per_module(4)
        .table_elements(100_000)
        .linear_memory_keep_resident(KEEP_RESIDENT)
        // Where the kernel has the PAGEMAP_SCAN ioctl (Linux 6.7+), a slot's reset finds the
        // pages the last instance wrote and restores only those, not the whole resident part
        // (test: a fresh instance sees nothing an earlier one left in memory).
        .pagemap_scan(wasmtime::Enabled::Auto)
        .table_keep_resident(256 << 10)
        .async_stack_keep_resident(256 << 10)
        .max_unused_warm_slots(WARM_SLOTS);
    pool
}

/// Advance `engine`'s epoch every [`EPOCH_TICK`] until the engine is dropped.
///
/// A plain thread rather than a tokio task: it keeps ticking when the runtime is busy running
/// guests or when tests pause tokio's clock.
fn spawn_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new()
        .name("krec-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        });
    if let Err(err) = spawned {
        // Without the ticker no deadline ever fires; that must not go unnoticed.
        tracing::error!("cannot start the epoch ticker thread, guest timeouts are disabled: {err}");
    }
}
