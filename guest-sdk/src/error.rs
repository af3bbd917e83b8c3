//! The error type of every `Context` call and of a reconcile.

use crate::bindings::krec::reconciler::types as wit;

/// Why a host call or a reconcile failed. Each variant carries a human-readable message.
///
/// Returned from a reconcile, any error makes the host log it and retry the request with backoff.
/// The workspace's one list of error cases ([`krec_core::CallError`]), which the host uses too.
#[doc(inline)]
pub use krec_core::CallError as Error;

/// The result of every `Context` call and of a reconcile.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `?` for errors that are not the SDK's, with what was being done (anyhow's `context`). Not in
/// the prelude, so that it never meets `anyhow::Context` by accident: `use krec_guest::ResultExt`.
///
/// ```
/// use krec_guest::prelude::*;
/// use krec_guest::ResultExt;
///
/// fn replicas(text: &str) -> Result<u32> {
///     text.parse::<u32>().context("the replicas annotation")
/// }
/// assert_eq!(replicas("3"), Ok(3));
/// assert_eq!(
///     replicas("x").unwrap_err().to_string(),
///     "the replicas annotation: invalid digit found in string"
/// );
/// ```
pub trait ResultExt<T> {
    /// The error as [`Error::Other`], its message after `what`.
    ///
    /// # Errors
    ///
    /// When `self` is an error.
    fn context(self, what: impl std::fmt::Display) -> Result<T>;

    /// The error as [`Error::Invalid`] (the input is wrong: the reconcile is retried with
    /// backoff like any error, but says so), its message after `what`.
    ///
    /// # Errors
    ///
    /// When `self` is an error.
    fn invalid(self, what: impl std::fmt::Display) -> Result<T>;
}

impl<T, E: std::fmt::Display> ResultExt<T> for std::result::Result<T, E> {
    fn context(self, what: impl std::fmt::Display) -> Result<T> {
        self.map_err(|err| Error::Other(format!("{what}: {err}")))
    }

    fn invalid(self, what: impl std::fmt::Display) -> Result<T> {
        self.map_err(|err| Error::Invalid(format!("{what}: {err}")))
    }
}

/// The conversions between [`Error`] and the WIT `error` variant, from the list of the cases.
macro_rules! cases {
    ($($case:ident),* $(,)?) => {
        impl From<wit::Error> for Error {
            fn from(err: wit::Error) -> Self {
                match err {
                    $(wit::Error::$case(m) => Error::$case(m),)*
                }
            }
        }

        impl From<Error> for wit::Error {
            fn from(err: Error) -> Self {
                match err {
                    $(Error::$case(m) => wit::Error::$case(m),)*
                }
            }
        }
    };
}

krec_core::with_call_error_cases!(cases);
