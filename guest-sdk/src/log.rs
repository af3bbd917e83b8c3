//! Logging into the host's log: the [`info!`](crate::info) family of macros.
//!
//! Lines are tagged by the host with the guest's name and the request being reconciled.

pub use crate::bindings::krec::reconciler::log::Level;

/// Write one line to the host's log. Prefer the macros.
pub fn write(level: Level, message: &str) {
    crate::imports::log::log(level, message);
}

/// Log at trace level, with `format!` arguments.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Trace, &::std::format!($($arg)+)) };
}

/// Log at debug level, with `format!` arguments.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Debug, &::std::format!($($arg)+)) };
}

/// Log at info level, with `format!` arguments.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Info, &::std::format!($($arg)+)) };
}

/// Log at warn level, with `format!` arguments.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Warn, &::std::format!($($arg)+)) };
}

/// Log at error level, with `format!` arguments.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Error, &::std::format!($($arg)+)) };
}
