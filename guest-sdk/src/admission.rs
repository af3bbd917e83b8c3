//! Admission webhooks: [`Validator`] and [`Mutator`] judge (and change) objects before the API
//! server stores them, as controller-runtime's `webhook.Validator` and `webhook.Defaulter` do;
//! [`Converter`] converts a custom resource between versions (a CRD conversion webhook).
//!
//! The host calls them for the requests the manifest's `spec.webhooks` rules select. During a
//! review the [`Context`] reads from the host's cache (`get`, `list`) and every write is refused:
//! a webhook must not have side effects.
//!
//! Like a reconciler, each is built from the manifest's `spec.config` (implement
//! [`FromConfig`](crate::FromConfig); one with no settings derives `Default`), once per
//! instance, so a policy's labels, limits and namespaces are settings, not constants. All the
//! parts of a guest read the same `spec.config`.
//!
//! ```
//! use krec_guest::k8s_openapi::api::core::v1::ConfigMap;
//! use krec_guest::prelude::*;
//!
//! #[derive(Default)]
//! struct NoSecretsInConfigMaps;
//!
//! impl Validator for NoSecretsInConfigMaps {
//!     type Object = ConfigMap;
//!
//!     fn validate(&self, req: &AdmissionRequest<ConfigMap>, _ctx: &Context) -> Verdict {
//!         let Some(map) = &req.object else { return Verdict::allow() };
//!         match map.data.as_ref().and_then(|d| d.get("password")) {
//!             Some(_) => Verdict::deny("data.password: use a Secret for passwords"),
//!             None => Verdict::allow(),
//!         }
//!     }
//! }
//!
//! export!(validator: NoSecretsInConfigMaps);
//! ```

use serde::Serialize;

use kube_core::GroupVersionKind;

use crate::context::Context;
use crate::lazy::FromJson;

/// What a request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// A create (also a server-side apply of a new object).
    Create,
    /// An update, patch or apply of an existing object.
    Update,
    /// A delete: [`AdmissionRequest::object`] is `None`, the object is in `old_object`.
    Delete,
    /// A connect (exec, port-forward, proxy).
    Connect,
}

/// Who makes the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    /// The user's name, e.g. `krec` or `system:kube-controller-manager`.
    pub username: String,
    /// The user's groups.
    pub groups: Vec<String>,
}

/// One admission request, with its objects decoded as `K`.
#[derive(Clone, Debug)]
pub struct AdmissionRequest<K> {
    /// Identifies the request (the host answers with it).
    pub uid: String,
    /// The object's kind.
    pub kind: GroupVersionKind,
    /// The resource's plural, e.g. `pods`.
    pub resource: String,
    /// The subresource, e.g. `status`.
    pub sub_resource: Option<String>,
    /// The object's name (`None` for a create that has only `generateName`).
    pub name: Option<String>,
    /// The object's namespace.
    pub namespace: Option<String>,
    /// What the request does.
    pub operation: Operation,
    /// Who makes it.
    pub user: UserInfo,
    /// The new object (`None` for a delete).
    pub object: Option<K>,
    /// The stored object (`None` for a create).
    pub old_object: Option<K>,
    /// The request will not be persisted.
    pub dry_run: bool,
}

/// A webhook's answer: allowed, or denied with a message (and an HTTP code and reason), with
/// warnings for the client either way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the request may go on.
    pub allowed: bool,
    /// The HTTP code of a denial (400 when unset, as kube-apiserver answers).
    pub code: Option<u16>,
    /// Why, for people: kubectl shows `admission webhook "NAME" denied the request: MESSAGE`.
    pub message: Option<String>,
    /// Why, for machines: a Kubernetes `StatusReason` (`Invalid`, `Forbidden`, …).
    pub reason: Option<String>,
    /// Warnings for the client (kubectl prints them).
    pub warnings: Vec<String>,
    /// Annotations for the audit log.
    pub audit_annotations: Vec<(String, String)>,
}

impl Verdict {
    /// Allow the request.
    pub fn allow() -> Self {
        Verdict {
            allowed: true,
            ..Default::default()
        }
    }

    /// Deny the request with `message` (HTTP 400 unless [`with_code`](Self::with_code)).
    pub fn deny(message: impl Into<String>) -> Self {
        Verdict {
            allowed: false,
            message: Some(message.into()),
            ..Default::default()
        }
    }

    /// Deny as invalid: 422 `Invalid`, what kube-apiserver answers for a bad field.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::deny(message).with_code(422).with_reason("Invalid")
    }

    /// Set the HTTP code.
    #[must_use]
    pub fn with_code(mut self, code: u16) -> Self {
        self.code = Some(code);
        self
    }

    /// Set the `StatusReason`.
    #[must_use]
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Add a warning for the client.
    #[must_use]
    pub fn with_warning(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }

    /// Add an audit annotation.
    #[must_use]
    pub fn with_audit_annotation(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.audit_annotations.push((key.into(), value.into()));
        self
    }
}

/// A validating webhook: allow or deny a request (controller-runtime's `CustomValidator`).
///
/// To let the webhook's `failurePolicy` decide instead (the check itself failed, e.g. a read
/// from the cache), panic: the review traps and the API server is answered HTTP 500.
pub trait Validator {
    /// The objects it judges: a `k8s-openapi` type, a `CustomResource`, `DynamicObject`, or
    /// [`Lazy<K>`](crate::Lazy) to read only the fields it checks.
    type Object: FromJson;

    /// Judge `req`.
    fn validate(&self, req: &AdmissionRequest<Self::Object>, ctx: &Context) -> Verdict;
}

/// A mutating webhook: change the object before it is stored (controller-runtime's
/// `CustomDefaulter`). The host answers the API server with the JSON patch from the request's
/// object to the one `mutate` leaves.
pub trait Mutator {
    /// The objects it changes. Fields the type does not know are kept (the patch only touches
    /// what changed), but a type that drops fields it does not know would remove them.
    type Object: FromJson + Serialize + Clone;

    /// Change `object` (the request's new object) as needed and judge the request.
    fn mutate(
        &self,
        req: &AdmissionRequest<Self::Object>,
        object: &mut Self::Object,
        ctx: &Context,
    ) -> Verdict;
}

/// A CRD conversion webhook: convert objects to another version of their kind.
///
/// Name the CRD in the manifest (`spec.conversion: {crd: widgets.example.com}`); `krec dev`
/// points the CRD's `spec.conversion` at the guest and `krec webhooks` prints that stanza for a
/// real cluster. The API server sends every object read or written in a version other than the
/// one it holds it in; it keeps the object's name, namespace, uid and other metadata itself, so
/// a converter changes `apiVersion` and the body (and may change labels and annotations).
///
/// ```
/// use krec_guest::prelude::*;
/// use krec_guest::serde_json::Value;
///
/// /// `example.com/v1` calls a Widget's size `spec.size`; `v2` calls it `spec.count`.
/// #[derive(Default)]
/// struct WidgetConverter;
///
/// impl Converter for WidgetConverter {
///     fn convert(&self, mut object: Value, desired_api_version: &str) -> Result<Value, String> {
///         let (from, to) = match desired_api_version {
///             "example.com/v2" => ("size", "count"),
///             "example.com/v1" => ("count", "size"),
///             other => return Err(format!("cannot convert a Widget to {other}")),
///         };
///         if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
///             && let Some(value) = spec.remove(from)
///         {
///             spec.insert(to.to_owned(), value);
///         }
///         object["apiVersion"] = Value::from(desired_api_version);
///         Ok(object)
///     }
/// }
///
/// export!(converter: WidgetConverter);
/// ```
pub trait Converter {
    /// Convert `object` (a JSON object of any served version) to `desired_api_version`
    /// (`group/version`); an error fails the whole conversion with its message.
    fn convert(
        &self,
        object: serde_json::Value,
        desired_api_version: &str,
    ) -> Result<serde_json::Value, String>;
}
