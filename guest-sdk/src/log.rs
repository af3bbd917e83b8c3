//! Logging into the host's log: [`trace!`], [`debug!`], [`info!`], [`warn!`] and [`error!`].
//!
//! Lines are tagged by the host with the guest's name and the request being reconciled. The
//! macros are in the `prelude`. A crate that also glob-imports `tracing::*` or
//! `log::*` meets two `info!`s; name the module instead: `use krec_guest::log;` and
//! `log::info!(..)`, or import the macros by name.

#[doc(hidden)]
pub use crate::bindings::krec::reconciler::log::Level;

/// Write one line to the host's log. Prefer the macros.
#[doc(hidden)]
pub fn write(level: Level, message: &str) {
    crate::imports::log::log(level, message);
}

/// Log at trace level, with `format!` arguments.
#[doc(inline)]
pub use crate::__krec_trace as trace;

/// Log at debug level, with `format!` arguments.
#[doc(inline)]
pub use crate::__krec_debug as debug;

/// Log at info level, with `format!` arguments: `info!("{req} has {count} pods")`.
#[doc(inline)]
pub use crate::__krec_info as info;

/// Log at warn level, with `format!` arguments.
#[doc(inline)]
pub use crate::__krec_warn as warn;

/// Log at error level, with `format!` arguments.
#[doc(inline)]
pub use crate::__krec_error as error;

// The macros are exported under private names at the crate root (where `#[macro_export]` puts
// them) and public only as `krec_guest::log::*`, so the crate root holds no `error`/`warn`.
#[doc(hidden)]
#[macro_export]
macro_rules! __krec_trace {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Trace, &::std::format!($($arg)+)) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __krec_debug {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Debug, &::std::format!($($arg)+)) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __krec_info {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Info, &::std::format!($($arg)+)) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __krec_warn {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Warn, &::std::format!($($arg)+)) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __krec_error {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Error, &::std::format!($($arg)+)) };
}
