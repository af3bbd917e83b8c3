//! [`ApiError`]: a failed API request, rendered as the `Status` object kube-apiserver returns.

use serde_json::{Value, json};

/// One cause of a 422: the field path and the message (`Required value: …`, `Invalid value: …`).
pub type Cause = (String, String);

/// A failed request: HTTP code, Kubernetes `reason`, message and optional details.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{reason} ({code}): {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `StatusReason`, e.g. `NotFound`.
    pub reason: &'static str,
    /// Human-readable message, as kube-apiserver phrases it.
    pub message: String,
    /// `details`: name, group, kind and field causes.
    pub details: Option<Value>,
}

/// What a client can do about a failed request, from its HTTP code and reason: the one table
/// the host's cluster access and the SDK's fake cluster share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// 404: the object (or kind) does not exist.
    NotFound,
    /// 409 `AlreadyExists`: a create met an existing object.
    AlreadyExists,
    /// Any other 409: a stale `resourceVersion` or a field-manager conflict.
    Conflict,
    /// 401, 403: not allowed.
    Forbidden,
    /// 400, 405, 413, 415, 422: the request itself is wrong; retrying it cannot help.
    Invalid,
    /// 408, 504: the server gave up waiting.
    Timeout,
    /// 429 and 5xx: try again later.
    Unavailable,
    /// Any other code.
    Other,
}

impl ErrorKind {
    /// The kind of a response with `code` and `reason`.
    #[must_use]
    pub fn of(code: u16, reason: &str) -> Self {
        match (code, reason) {
            (404, _) => ErrorKind::NotFound,
            (409, "AlreadyExists") => ErrorKind::AlreadyExists,
            (409, _) => ErrorKind::Conflict,
            (401 | 403, _) => ErrorKind::Forbidden,
            (400 | 405 | 413 | 415 | 422, _) => ErrorKind::Invalid,
            (408 | 504, _) => ErrorKind::Timeout,
            (429 | 500.., _) => ErrorKind::Unavailable,
            _ => ErrorKind::Other,
        }
    }
}

impl ApiError {
    /// What a client can do about this error.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::of(self.code, self.reason)
    }

    fn new(code: u16, reason: &'static str, message: String) -> Self {
        ApiError {
            code,
            reason,
            message,
            details: None,
        }
    }

    /// Attach `details.{name, group, kind}`.
    pub fn about(mut self, group: &str, plural: &str, name: &str) -> Self {
        let details = self.details.get_or_insert_with(|| json!({}));
        details["name"] = json!(name);
        details["group"] = json!(group);
        details["kind"] = json!(plural);
        self
    }

    /// 404 NotFound: `{plural}.{group} "{name}" not found`.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, plural)),
        )
        .about(group, plural, name)
    }

    /// 404 for a path that names no resource.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, plural)),
        )
        .about(group, plural, name)
    }

    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(group, plural)
            ),
        )
        .about(group, plural, name)
    }

    /// 409 Conflict for a failed delete precondition.
    pub fn precondition(group: &str, plural: &str, name: &str, problem: String) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {problem}",
                qualified(group, plural)
            ),
        )
        .about(group, plural, name)
    }

    /// 422 Invalid, with one cause per `(field, message)`. Each message starts as
    /// kube-apiserver's do (`Required value: …`, `Invalid value: …`, `Forbidden: …`), which
    /// gives the cause's reason; several causes are listed in brackets, as kube-apiserver's
    /// aggregated errors are.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<(String, String)>) -> Self {
        let each: Vec<String> = causes
            .iter()
            .map(|(field, message)| format!("{field}: {message}"))
            .collect();
        let summary = match each.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let causes: Vec<Value> = causes
            .into_iter()
            .map(|(field, message)| {
                json!({"reason": cause_reason(&message), "message": message, "field": field})
            })
            .collect();
        ApiError {
            code: 422,
            reason: "Invalid",
            message: format!(
                "{kind}{} \"{name}\" is invalid: {summary}",
                if group.is_empty() {
                    String::new()
                } else {
                    format!(".{group}")
                }
            ),
            details: Some(json!({"name": name, "group": group, "kind": kind, "causes": causes})),
        }
    }

    /// 406 NotAcceptable: no media type the client accepts can carry the answer.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message.into())
    }

    /// 409 Conflict with its own message and causes (a server-side apply's field conflicts).
    pub fn conflict_with(
        message: String,
        kind: &str,
        group: &str,
        name: &str,
        causes: Vec<Value>,
    ) -> Self {
        ApiError {
            code: 409,
            reason: "Conflict",
            message,
            details: Some(json!({"name": name, "group": group, "kind": kind, "causes": causes})),
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into())
    }

    /// 422 Invalid without field causes (a patch the server cannot apply to the object).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message.into())
    }

    /// 401 Unauthorized: the request carries no credentials the server knows.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized".into())
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message.into())
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message.into())
    }

    /// 410 Gone (Expired): the requested resourceVersion is older than the retained history.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message.into())
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 413 RequestEntityTooLarge with kube-apiserver's message for a request that is too large
    /// in some other way than its body's bytes.
    pub fn too_large_message(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message.into())
    }

    /// 504 Timeout: the request did not complete in time (kube-apiserver's timeout filter).
    pub fn timeout() -> Self {
        Self::new(
            504,
            "Timeout",
            "Timeout: request did not complete within the allotted timeout".into(),
        )
    }

    /// 504 Timeout: a watch or list asked for a resourceVersion the server has not reached
    /// (kube-apiserver's `NewTooLargeResourceVersionError`, retry after one second).
    pub fn too_large_resource_version(asked: u64, current: u64) -> Self {
        let mut err = Self::new(
            504,
            "Timeout",
            format!("Too large resource version: {asked}, current: {current}"),
        );
        err.details = Some(json!({
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        }));
        err
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message.into())
    }

    /// 429 TooManyRequests.
    pub fn too_many_requests(message: impl Into<String>) -> Self {
        Self::new(429, "TooManyRequests", message.into())
    }

    /// 503 ServiceUnavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message.into())
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message.into())
    }

    /// A webhook's denial: its code and message, and its reason when it is one of
    /// Kubernetes' `StatusReason`s (an unknown reason is left empty, as a client would not
    /// recognise it).
    pub fn from_webhook(code: u16, reason: &str, message: String) -> Self {
        const REASONS: &[&str] = &[
            "Unauthorized",
            "Forbidden",
            "NotFound",
            "AlreadyExists",
            "Conflict",
            "Gone",
            "Invalid",
            "ServerTimeout",
            "Timeout",
            "TooManyRequests",
            "BadRequest",
            "MethodNotAllowed",
            "NotAcceptable",
            "RequestEntityTooLarge",
            "UnsupportedMediaType",
            "InternalError",
            "Expired",
            "ServiceUnavailable",
        ];
        let reason = REASONS
            .iter()
            .find(|r| **r == reason)
            .copied()
            .unwrap_or("");
        Self::new(code, reason, message)
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    }
}

/// The `reason` of a 422 cause, from the start of its message (apimachinery's `field.ErrorType`).
fn cause_reason(message: &str) -> &'static str {
    const REASONS: &[(&str, &str)] = &[
        ("Required value", "FieldValueRequired"),
        ("Forbidden", "FieldValueForbidden"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
        ("Not found", "FieldValueNotFound"),
        ("Internal error", "InternalError"),
        ("Invalid value", "FieldValueInvalid"),
    ];
    REASONS
        .iter()
        .find(|(prefix, _)| message.starts_with(prefix))
        .map_or("FieldValueInvalid", |(_, reason)| reason)
}
