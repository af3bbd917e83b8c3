//! Why a guest's call failed: a trap's cause (a timeout, a memory or stack overflow, a panic,
//! …) read from wasmtime's error, and the deadline a call runs under.

use std::fmt;
use std::time::{Duration, Instant};

use krec_core::CallError;
use wasmtime::Trap;

use super::limits::LimitExceeded;
use super::one_line;

/// Why a guest trapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TrapCause {
    /// The reconcile exceeded `limits.timeout`.
    Timeout,
    /// The guest tried to grow memory (or tables, instances) beyond its limits.
    OutOfMemory,
    /// The guest panicked or hit `unreachable`.
    Panic,
    /// The guest overflowed its stack: the host-managed call stack, or the shadow stack in its
    /// linear memory (deep recursion).
    StackOverflow,
    /// The guest accessed memory out of bounds (an overflow of the shadow stack a Rust guest
    /// keeps in linear memory is told apart by its address and counted as `StackOverflow`).
    MemoryFault,
    /// Instantiation failed (e.g. the start function trapped).
    Instantiate,
    /// Any other trap.
    Other,
}

impl TrapCause {
    /// Every cause.
    pub const ALL: [TrapCause; 7] = [
        TrapCause::Timeout,
        TrapCause::OutOfMemory,
        TrapCause::Panic,
        TrapCause::StackOverflow,
        TrapCause::MemoryFault,
        TrapCause::Instantiate,
        TrapCause::Other,
    ];

    /// Short name for logs and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            TrapCause::Timeout => "timeout",
            TrapCause::OutOfMemory => "out_of_memory",
            TrapCause::Panic => "panic",
            TrapCause::StackOverflow => "stack_overflow",
            TrapCause::MemoryFault => "memory_fault",
            TrapCause::Instantiate => "instantiate",
            TrapCause::Other => "other",
        }
    }
}

impl fmt::Display for TrapCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a reconcile failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReconcileError {
    /// The guest returned an error value.
    #[error("guest {guest} returned an error for {request}: {error}")]
    Guest {
        /// The guest.
        guest: String,
        /// The request.
        request: String,
        /// The guest's error.
        error: CallError,
    },
    /// The guest trapped; its instance was discarded.
    #[error("guest {guest} trapped ({cause}) reconciling {request}: {message}")]
    Trap {
        /// The guest.
        guest: String,
        /// The request.
        request: String,
        /// Classified cause.
        cause: TrapCause,
        /// Wasmtime's description, one line.
        message: String,
    },
    /// The guest's `init` refused the manifest's `spec.config`.
    #[error("{path}: guest {guest} refused its configuration: {message}")]
    Config {
        /// The guest.
        guest: String,
        /// The manifest file.
        path: String,
        /// The guest's message, naming the field (`spec.config.period: …`).
        message: String,
    },
}

/// `timeout` from now, saturating far in the future rather than overflowing.
pub(super) fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// Extra time past `limits.timeout` before a reconcile blocked in a host call (where epochs do not
/// reach) is abandoned.
pub const HOST_CALL_GRACE: Duration = Duration::from_secs(1);

/// The error an epoch callback raises when a reconcile runs past its deadline.
#[derive(Debug, thiserror::Error)]
#[error("reconcile exceeded its time limit of {0:?}")]
pub(super) struct DeadlineExceeded(pub(super) Duration);

pub(super) fn classify(err: &wasmtime::Error) -> TrapCause {
    if err.downcast_ref::<DeadlineExceeded>().is_some() {
        return TrapCause::Timeout;
    }
    if err.downcast_ref::<LimitExceeded>().is_some() {
        return TrapCause::OutOfMemory;
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::StackOverflow) => TrapCause::StackOverflow,
        Some(Trap::UnreachableCodeReached) => TrapCause::Panic,
        Some(Trap::Interrupt) => TrapCause::Timeout,
        Some(Trap::AllocationTooLarge) => TrapCause::OutOfMemory,
        Some(Trap::MemoryOutOfBounds) if shadow_stack_overflow(err) => TrapCause::StackOverflow,
        Some(Trap::MemoryOutOfBounds) => TrapCause::MemoryFault,
        // Creating more instances, tables or memories than allowed fails instantiation.
        _ if one_line(err).contains("resource limit exceeded") => TrapCause::OutOfMemory,
        _ => TrapCause::Other,
    }
}

/// Lowest faulting address taken for an overflow of a guest's shadow stack. Rust (and C) wasm32
/// guests keep their stack in linear memory, below `__stack_pointer`, growing down towards 0;
/// overflowing it wraps the 32-bit stack pointer to just under 4 GiB, far past any memory a
/// guest can have (its limit is at most 4 GiB and a fault there is never an honest access).
const SHADOW_STACK_WRAP: u64 = 0xFFF0_0000;

/// Whether an out-of-bounds trap is a shadow-stack overflow: wasmtime reports the faulting
/// address ("memory fault at wasm address 0x… in linear memory of size 0x…").
pub(super) fn shadow_stack_overflow(err: &wasmtime::Error) -> bool {
    let text = one_line(err);
    let Some(rest) = text.split("memory fault at wasm address 0x").nth(1) else {
        return false;
    };
    let hex: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
    u64::from_str_radix(&hex, 16).is_ok_and(|address| address >= SHADOW_STACK_WRAP)
}
