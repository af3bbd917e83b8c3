//! [`CallError`]: why a call to the cluster failed — the cases of the WIT `error` variant, the
//! one list the host (`AccessError`) and the guest SDK (`Error`) both use.

use crate::error::{ApiError, ErrorKind};
use crate::gvk::MissingField;

/// Why a call to the cluster (or a reconcile) failed; each case carries a human-readable
/// message. The cases are the WIT `error` variant's; each crate keeps only its mapping to its
/// own bindings of that variant.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The object does not exist (404).
    #[error("not found: {0}")]
    NotFound(String),
    /// `create` of an object whose name is taken (409 `AlreadyExists`).
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The object changed since it was read, or a precondition failed (409): read it again and
    /// retry.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The manifest does not permit the call, or the API server refused it.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// Malformed object or arguments, or failed validation (400, 422).
    #[error("invalid: {0}")]
    Invalid(String),
    /// The call or the reconcile took too long.
    #[error("timeout: {0}")]
    Timeout(String),
    /// The API server is unreachable or not ready; retry later.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Anything else, including errors of a reconciler's own logic.
    #[error("{0}")]
    Other(String),
}

/// Calls `$callback!(NotFound, AlreadyExists, …)` with the cases of [`CallError`], in order:
/// how a crate maps them to its own bindings of the WIT `error` variant without listing them
/// again.
///
/// ```
/// macro_rules! count {
///     ($($case:ident),*) => { [$(stringify!($case)),*].len() };
/// }
/// assert_eq!(krec_core::with_call_error_cases!(count), 8);
/// ```
#[macro_export]
macro_rules! with_call_error_cases {
    ($callback:ident) => {
        $callback! {
            NotFound,
            AlreadyExists,
            Conflict,
            Forbidden,
            Invalid,
            Timeout,
            Unavailable,
            Other
        }
    };
}

/// The cases with their reason (as Kubernetes names it) and their metrics label, from one list.
macro_rules! cases {
    ($($case:ident => $label:literal),* $(,)?) => {
        impl CallError {
            /// The case's name, as Kubernetes names the reason: `NotFound`, `Conflict`, ….
            pub fn reason(&self) -> &'static str {
                match self {
                    $(CallError::$case(_) => stringify!($case),)*
                }
            }

            /// The case's label in metrics (`krec_host_calls_total{result}`): `not_found`, ….
            pub fn label(&self) -> &'static str {
                match self {
                    $(CallError::$case(_) => $label,)*
                }
            }

            /// What a client can do about it: the [`ErrorKind`] of the same name.
            #[must_use]
            pub fn kind(&self) -> ErrorKind {
                match self {
                    $(CallError::$case(_) => ErrorKind::$case,)*
                }
            }

            /// The error of `kind` with `message`.
            #[must_use]
            pub fn new(kind: ErrorKind, message: String) -> Self {
                match kind {
                    $(ErrorKind::$case => CallError::$case(message),)*
                }
            }

            /// The message, to change in place.
            pub fn message_mut(&mut self) -> &mut String {
                match self {
                    $(CallError::$case(m))|* => m,
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

impl CallError {
    /// This error with its control characters escaped ([`printable`](crate::printable)) and
    /// its message then cut at `max` bytes (marked `[truncated]`): what a guest's error may
    /// carry into the host's log.
    #[must_use]
    pub fn truncated(mut self, max: usize) -> Self {
        let message = self.message_mut();
        // Escaping maps each character on its own, so the escaped form of the first `max`
        // bytes is the start of the whole message's: only those are looked at (a guest's
        // 20 MB error costs no more than a short one). Cut again after escaping, so that what
        // is kept is at most `max` bytes as written.
        let long = crate::cut(message, max);
        if let std::borrow::Cow::Owned(escaped) = crate::printable(message) {
            *message = escaped;
        }
        if crate::cut(message, max) || long {
            message.push_str(" [truncated]");
        }
        self
    }

    /// A [`CallError::Other`] with this message, for failures of a reconciler's own logic.
    pub fn other(message: impl std::fmt::Display) -> Self {
        CallError::Other(message.to_string())
    }

    /// The error for a response of `kind` (with its `code`, `reason` and `message`).
    #[must_use]
    pub fn of(kind: ErrorKind, code: u16, reason: &str, message: String) -> Self {
        match kind {
            ErrorKind::Other => CallError::Other(format!("{code} {reason}: {message}")),
            kind => CallError::new(kind, message),
        }
    }

    /// Whether the error says the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CallError::NotFound(_))
    }

    /// Whether the error says the object changed meanwhile.
    pub fn is_conflict(&self) -> bool {
        matches!(self, CallError::Conflict(_))
    }

    /// Whether the error says the object already exists.
    pub fn is_already_exists(&self) -> bool {
        matches!(self, CallError::AlreadyExists(_))
    }
}

impl From<ApiError> for CallError {
    fn from(err: ApiError) -> Self {
        CallError::of(err.kind(), err.code, err.reason, err.message)
    }
}

impl From<MissingField> for CallError {
    fn from(err: MissingField) -> Self {
        CallError::Invalid(err.to_string())
    }
}

impl From<serde_json::Error> for CallError {
    fn from(err: serde_json::Error) -> Self {
        CallError::Invalid(format!("json: {err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_truncated_message_should_be_escaped_and_cut_as_if_escaped_whole() {
        let whole = |message: &str, max: usize| {
            let mut escaped = crate::printable(message).into_owned();
            if crate::cut(&mut escaped, max) {
                escaped.push_str(" [truncated]");
            }
            escaped
        };
        for message in [
            "short",
            "exactly ten",
            "line\nbreaks\u{1b}[31m and é\u{202e}more",
            &"é\n".repeat(40),
            &"x".repeat(1 << 20),
        ] {
            for max in [0, 1, 5, 10, 11, 12, 30, 64] {
                let cut = CallError::Other(message.to_owned()).truncated(max);
                assert_eq!(
                    cut,
                    CallError::Other(whole(message, max)),
                    "{message:.20} at {max}"
                );
            }
        }
    }

    #[test]
    fn an_api_error_should_become_the_case_its_code_and_reason_name() {
        let err = CallError::from(ApiError::not_found("apps", "deployments", "web"));
        assert!(err.is_not_found(), "{err:?}");
        assert_eq!((err.reason(), err.label()), ("NotFound", "not_found"));
        let teapot = CallError::of(ErrorKind::of(418, "Teapot"), 418, "Teapot", "short".into());
        assert_eq!(teapot, CallError::Other("418 Teapot: short".into()));
        assert_eq!(teapot.to_string(), "418 Teapot: short");
        for kind in [ErrorKind::NotFound, ErrorKind::Timeout, ErrorKind::Other] {
            assert_eq!(CallError::new(kind, "m".into()).kind(), kind);
        }
    }
}
