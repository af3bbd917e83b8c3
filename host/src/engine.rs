//! The one wasmtime [`Engine`] the host compiles and runs every guest with, and its epoch ticker.
//!
//! Guests run asynchronously (a guest's host calls await the API server without blocking a
//! thread) and are interrupted by epochs: a background thread advances the engine's epoch every
//! [`EPOCH_TICK`], and each store's deadline callback yields to the async executor on every tick
//! and traps once the reconcile's time limit has passed, so an infinite loop can neither run
//! forever nor hold a runtime thread.

use std::time::Duration;

use wasmtime::{Config, Engine};

/// How often the epoch advances: the granularity of timeouts and of yielding to other tasks.
pub const EPOCH_TICK: Duration = Duration::from_millis(1);

/// Build the engine: component model and epoch interruption (async support is always on).
pub fn new_engine() -> wasmtime::Result<Engine> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    let engine = Engine::new(&config)?;
    spawn_epoch_ticker(&engine);
    Ok(engine)
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
