//! The error type of every [`Context`](crate::Context) call and of a reconcile.

use crate::bindings::krec::reconciler::types as wit;

/// Why a host call or a reconcile failed. Each variant carries a human-readable message.
///
/// Returned from a reconcile, any error makes the host log it and retry the request with backoff.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The object does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// `create` of an object whose name is taken.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The object changed since it was read, or a precondition failed: read it again and retry.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The manifest does not permit the call, or the API server refused it.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// Malformed object or arguments, or failed validation.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The call or the reconcile took too long.
    #[error("timeout: {0}")]
    Timeout(String),
    /// The API server is unreachable or not ready; retry later.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Anything else, including errors of the reconciler's own logic.
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// An [`Error::Other`] with this message, for failures of the reconciler's own logic.
    pub fn other(message: impl std::fmt::Display) -> Self {
        Error::Other(message.to_string())
    }

    /// Whether the error says the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound(_))
    }

    /// Whether the error says the object changed meanwhile.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict(_))
    }

    /// Whether the error says the object already exists.
    pub fn is_already_exists(&self) -> bool {
        matches!(self, Error::AlreadyExists(_))
    }
}

/// The result of every [`Context`](crate::Context) call and of a reconcile.
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

impl From<serde_json::Error> for Error {
    fn from(err: serde_json::Error) -> Self {
        Error::Invalid(format!("json: {err}"))
    }
}

/// The conversions between [`Error`] and the WIT `error` variant, and each case's reason (as
/// Kubernetes names it), from one list of the cases: adding a WIT error case means adding it to
/// the enum above and to this list — nothing else in the SDK.
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

        impl Error {
            /// The case's name, as Kubernetes names the reason: `NotFound`, `Conflict`, ….
            pub fn reason(&self) -> &'static str {
                match self {
                    $(Error::$case(_) => stringify!($case),)*
                }
            }
        }
    };
}

cases!(
    NotFound,
    AlreadyExists,
    Conflict,
    Forbidden,
    Invalid,
    Timeout,
    Unavailable,
    Other
);
