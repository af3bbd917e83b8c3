//! [`AccessError`]: why a cluster call failed.

use krec_core::ErrorKind;

use super::record::cut;
use crate::bindings::WitError;

/// Why a cluster call failed; mirrors the WIT `error` variant and Kubernetes' status reasons.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// 404 NotFound.
    #[error("not found: {0}")]
    NotFound(String),
    /// 409 AlreadyExists.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// 409 Conflict: stale resourceVersion or failed precondition.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Not permitted by the manifest or by the API server.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// 400/422: malformed or invalid.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The call timed out.
    #[error("timeout: {0}")]
    Timeout(String),
    /// The API server is unreachable or not ready.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl From<krec_core::ApiError> for AccessError {
    fn from(err: krec_core::ApiError) -> Self {
        AccessError::of(err.kind(), err.code, err.reason, err.message)
    }
}

impl From<krec_core::MissingField> for AccessError {
    fn from(err: krec_core::MissingField) -> Self {
        AccessError::Invalid(err.to_string())
    }
}

impl AccessError {
    /// The error for a response of `kind` (with its `code`, `reason` and `message`).
    #[must_use]
    pub fn of(kind: ErrorKind, code: u16, reason: &str, message: String) -> Self {
        match kind {
            ErrorKind::NotFound => AccessError::NotFound(message),
            ErrorKind::AlreadyExists => AccessError::AlreadyExists(message),
            ErrorKind::Conflict => AccessError::Conflict(message),
            ErrorKind::Forbidden => AccessError::Forbidden(message),
            ErrorKind::Invalid => AccessError::Invalid(message),
            ErrorKind::Timeout => AccessError::Timeout(message),
            ErrorKind::Unavailable => AccessError::Unavailable(message),
            ErrorKind::Other => AccessError::Other(format!("{code} {reason}: {message}")),
        }
    }

    /// The same error with its control characters escaped ([`printable`](super::printable))
    /// and its message then cut at `max` bytes (marked `[truncated]`): what a guest's error may
    /// carry into the host's log.
    #[must_use]
    pub fn truncated(mut self, max: usize) -> Self {
        let message = self.message_mut();
        // Escaped first, so that what is kept is at most `max` bytes as written.
        if let std::borrow::Cow::Owned(escaped) = super::printable(message) {
            *message = escaped;
        }
        if cut(message, max) {
            message.push_str(" [truncated]");
        }
        self
    }
}

/// The conversions between [`AccessError`] and the other enums with the same cases — the WIT
/// `error` variant the guests see, and the guest SDK's `Error` (the native arm) — and each
/// case's metrics label, from one list of the cases. Adding a WIT error case means adding it to
/// the enum above and to this list: nothing else in the host.
macro_rules! cases {
    ($($case:ident => $label:literal),* $(,)?) => {
        impl AccessError {
            /// The case's label in `krec_host_calls_total{result}`.
            pub fn label(&self) -> &'static str {
                match self {
                    $(AccessError::$case(_) => $label,)*
                }
            }

            fn message_mut(&mut self) -> &mut String {
                match self {
                    $(AccessError::$case(m))|* => m,
                }
            }
        }

        impl From<AccessError> for WitError {
            fn from(err: AccessError) -> Self {
                match err {
                    $(AccessError::$case(m) => WitError::$case(m),)*
                }
            }
        }

        impl From<WitError> for AccessError {
            fn from(err: WitError) -> Self {
                match err {
                    $(WitError::$case(m) => AccessError::$case(m),)*
                }
            }
        }

        #[cfg(feature = "native")]
        impl From<AccessError> for krec_guest::Error {
            fn from(err: AccessError) -> Self {
                match err {
                    $(AccessError::$case(m) => krec_guest::Error::$case(m),)*
                }
            }
        }

        #[cfg(feature = "native")]
        impl From<krec_guest::Error> for AccessError {
            fn from(err: krec_guest::Error) -> Self {
                match err {
                    $(krec_guest::Error::$case(m) => AccessError::$case(m),)*
                }
            }
        }
    };
}

cases! {
    NotFound => "not_found",
    AlreadyExists => "already_exists",
    Conflict => "conflict",
    Forbidden => "forbidden",
    Invalid => "invalid",
    Timeout => "timeout",
    Unavailable => "unavailable",
    Other => "other",
}
