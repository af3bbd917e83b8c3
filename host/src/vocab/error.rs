//! [`AccessError`]: why a cluster call failed.

use krec_apiserver::ErrorKind;

use super::record::cut;

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

impl From<krec_apiserver::ApiError> for AccessError {
    fn from(err: krec_apiserver::ApiError) -> Self {
        AccessError::of(err.kind(), err.code, err.reason, err.message)
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

    /// The same error with its message cut at `max` bytes (marked `[truncated]`).
    #[must_use]
    pub fn truncated(mut self, max: usize) -> Self {
        let message = match &mut self {
            AccessError::NotFound(m)
            | AccessError::AlreadyExists(m)
            | AccessError::Conflict(m)
            | AccessError::Forbidden(m)
            | AccessError::Invalid(m)
            | AccessError::Timeout(m)
            | AccessError::Unavailable(m)
            | AccessError::Other(m) => m,
        };
        if cut(message, max) {
            message.push_str(" [truncated]");
        }
        self
    }
}
