//! [`AccessError`]: why a cluster call failed — the workspace's one list of error cases
//! ([`krec_core::CallError`], the WIT `error` variant's cases, which the guest SDK's `Error` is
//! too), and the host's mapping to its bindings of that variant.

use super::record::cut;
use crate::bindings::WitError;

/// Why a cluster call failed; mirrors the WIT `error` variant and Kubernetes' status reasons.
pub use krec_core::CallError as AccessError;

/// `error` with its control characters escaped ([`printable`](super::printable)) and its
/// message then cut at `max` bytes (marked `[truncated]`): what a guest's error may carry into
/// the host's log.
#[must_use]
pub fn truncated(mut error: AccessError, max: usize) -> AccessError {
    let message = error.message_mut();
    // Escaped first, so that what is kept is at most `max` bytes as written.
    if let std::borrow::Cow::Owned(escaped) = super::printable(message) {
        *message = escaped;
    }
    if cut(message, max) {
        message.push_str(" [truncated]");
    }
    error
}

/// The conversions between [`AccessError`] and the WIT `error` variant the guests see, from the
/// list of the cases.
macro_rules! cases {
    ($($case:ident),* $(,)?) => {
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
    };
}

krec_core::with_call_error_cases!(cases);
