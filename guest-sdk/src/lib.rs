//! The SDK for writing krec reconcilers: Kubernetes controllers compiled to `wasm32-wasip2`
//! components and run by the krec host.
//!
//! A reconciler is a type implementing [`Reconciler`], exported with [`export!`]. The host calls
//! [`Reconciler::reconcile`] once per request taken from its workqueue; the reconciler reads and
//! writes cluster state through the [`Context`] it is given, with `k8s-openapi` types, your own
//! custom resource types ([`CustomResource`] derive), or untyped [`DynamicObject`]s. Everything
//! else — watches, the shared cache, the workqueue, retries with backoff, leader election — is
//! the host's job, configured in the guest's manifest.
//!
//! # Example
//!
//! A reconciler that labels every ReplicaSet with the number of its pods:
//!
//! ```no_run
//! use krec_guest::prelude::*;
//! use krec_guest::k8s_openapi::api::{apps::v1::ReplicaSet, core::v1::Pod};
//!
//! #[derive(Default)]
//! struct PodCounter;
//!
//! impl Reconciler for PodCounter {
//!     fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
//!         // The object may be gone by the time we run: that is not an error.
//!         let Some(mut rs) = ctx.get_opt::<ReplicaSet>(req.namespace(), &req.name)? else {
//!             return Ok(Action::done());
//!         };
//!         let selector = rs
//!             .spec
//!             .as_ref()
//!             .and_then(|spec| spec.selector.match_labels.as_ref())
//!             .map(|labels| labels_to_selector(labels))
//!             .unwrap_or_default();
//!         let pods = ctx.list::<Pod>(&ListParams::default().namespace(req.namespace()).labels(&selector))?;
//!         let count = pods.len().to_string();
//!         let labels = rs.metadata.labels.get_or_insert_default();
//!         if labels.get("pod-count") != Some(&count) {
//!             info!("{} has {count} pods", req.name);
//!             labels.insert("pod-count".into(), count);
//!             ctx.update(&rs)?; // fails with Error::Conflict if the ReplicaSet changed meanwhile
//!         }
//!         Ok(Action::done())
//!     }
//! }
//!
//! export!(PodCounter);
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2`: the `.wasm` in
//! `target/wasm32-wasip2/release/` is a component the host loads, named by a manifest.
//!
//! # The crate
//!
//! A guest is a `cdylib`:
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! krec-guest = { path = "../krec/guest-sdk" }
//! ```
//!
//! and a manifest (see the krec README) names its `.wasm`, what it reconciles, and the
//! `permissions` every [`Context`] call is checked against.
//!
//! # Errors and retries
//!
//! Every [`Context`] call returns [`Result`]; `?` passes failures up, and a reconcile that returns
//! `Err` is logged by the host and retried with per-key exponential backoff. Return
//! [`Action::requeue_after`] to look again later without an error.

#![warn(missing_docs)]

// The generated bindings refer to this crate by its public path, also from inside it.
extern crate self as krec_guest;

mod admission;
mod context;
mod error;
mod helpers;
mod reconciler;

pub mod log;
#[cfg(not(target_arch = "wasm32"))]
pub mod native;
#[cfg(all(feature = "testing", not(target_arch = "wasm32")))]
pub mod testing;

// The guide's Rust examples are tests of the SDK.
#[cfg(all(doctest, feature = "testing"))]
#[doc = include_str!("../../docs/guide.md")]
pub struct Guide;

/// The calls to the host: the WIT imports in a component, the installed [`native::Host`]
/// elsewhere. Both have the generated bindings' signatures.
mod imports {
    #[cfg(target_arch = "wasm32")]
    pub(crate) use crate::bindings::krec::reconciler::{client, events, log};
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) use crate::native::{client, events, log};
}

pub use admission::{
    AdmissionRequest, Converter, Mutator, Operation, UserInfo, Validator, Verdict,
};
pub use context::{
    Context, EventType, ListParams, Patch, Preconditions, labels_to_selector, selector_string,
};
pub use error::{Error, Result, ResultExt};
pub use helpers::{
    Api, FinalizerEvent, OperationResult, condition, find_condition, is_controlled_by,
    set_condition, set_controller_reference,
};
pub use reconciler::{Action, FromConfig, NoConfig, Reconciler, Request};

/// The `k8s-openapi` crate the SDK is built with: typed Kubernetes objects.
pub use k8s_openapi;
/// The `kube-core` crate the SDK is built with: [`Resource`],
/// [`DynamicObject`], [`GroupVersionKind`].
pub use kube_core;
/// Untyped Kubernetes object, for kinds without a Rust type.
pub use kube_core::{DynamicObject, GroupVersionKind, Resource, ResourceExt};
/// `serde_json`, for building untyped objects and patches.
pub use serde_json;

/// Derive a custom resource type (kube's `CustomResource`), e.g. for your own CRD.
///
/// Use it with `#[kube(crates(kube_core = "::krec_guest::kube_core", k8s_openapi =
/// "::krec_guest::k8s_openapi", serde_json = "::krec_guest::serde_json"), schema = "disabled")]`
/// so that your crate needs no direct dependency on kube; see `sample-guests/foo-controller`.
#[cfg(feature = "derive")]
pub use kube_derive::CustomResource;

/// Everything a reconciler usually needs, in one `use`.
pub mod prelude {
    pub use crate::log::{debug, error, info, trace, warn};
    pub use crate::{
        Action, AdmissionRequest, Context, Converter, Error, EventType, FinalizerEvent, FromConfig,
        ListParams, Mutator, Operation, OperationResult, Patch, Reconciler, Request, Resource,
        ResourceExt, Result, Validator, Verdict, export, is_controlled_by, labels_to_selector,
        selector_string, set_controller_reference,
    };
}

#[doc(hidden)]
#[allow(clippy::too_many_arguments)] // generated: the `patch` import and the exports' glue
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "controller",
        pub_export_macro: true,
        export_macro_name: "__export_world",
        default_bindings_module: "::krec_guest::bindings",
        runtime_path: "::krec_guest::__private::wit_bindgen::rt",
    });
}

#[doc(hidden)]
pub mod __private {
    //! Support for the [`export!`](crate::export) macro; not part of the public API.
    pub use wit_bindgen;

    use std::cell::OnceCell;
    use std::thread::LocalKey;

    use crate::bindings::krec::reconciler::types as wit;
    use crate::{Action, Context, FromConfig, Reconciler, Request};

    /// Where an instance keeps its reconciler, built once by `init` (or, for a host older than
    /// WIT 0.1.2 that never calls `init`, at the first call, without configuration).
    pub type Slot<R> = LocalKey<OnceCell<R>>;

    /// Build `R` from the manifest's `spec.config` (JSON text): a message naming the field
    /// when it does not deserialize, or `from_config`'s refusal.
    pub fn build<R: FromConfig>(config: &str) -> Result<R, String> {
        let mut decoder = serde_json::Deserializer::from_str(config);
        let settings: R::Config =
            serde_path_to_error::deserialize(&mut decoder).map_err(|err| {
                let path = err.path().to_string();
                // The position is in the host's JSON rendering of the YAML, which nobody sees.
                let inner = err.into_inner().to_string();
                let inner = match inner.rfind(" at line ") {
                    Some(at) => &inner[..at],
                    None => &inner,
                };
                if path == "." {
                    format!("spec.config: {inner}")
                } else {
                    format!("spec.config.{path}: {inner}")
                }
            })?;
        R::from_config(settings).map_err(|err| format!("spec.config: {err}"))
    }

    /// The `init` export: build the instance's reconciler from its configuration.
    pub fn init<R: Reconciler + FromConfig + 'static>(
        slot: &'static Slot<R>,
        config: String,
    ) -> Result<(), String> {
        let reconciler = build::<R>(&config)?;
        slot.with(|cell| {
            // A second `init` of one instance keeps the first configuration.
            let _ = cell.set(reconciler);
        });
        Ok(())
    }

    /// Run `call` on the instance's reconciler, built without configuration if `init` never
    /// ran (a host older than WIT 0.1.2).
    fn with_reconciler<R: Reconciler + FromConfig + 'static, T>(
        slot: &'static Slot<R>,
        call: impl FnOnce(&R) -> Result<T, wit::Error>,
    ) -> Result<T, wit::Error> {
        slot.with(|cell| {
            if cell.get().is_none() {
                let built = build::<R>("null").map_err(wit::Error::Invalid)?;
                let _ = cell.set(built);
            }
            match cell.get() {
                Some(reconciler) => call(reconciler),
                None => Err(wit::Error::Other("the reconciler was not built".into())),
            }
        })
    }

    /// Run one reconcile of `R` for a request from the host.
    pub fn reconcile<R: Reconciler + FromConfig + 'static>(
        slot: &'static Slot<R>,
        req: wit::Request,
    ) -> Result<wit::Action, wit::Error> {
        let req = Request {
            namespace: req.namespace,
            name: req.name,
        };
        with_reconciler(slot, |r| match r.reconcile(req, &Context::new()) {
            Ok(action) => Ok(action.into()),
            Err(err) => Err(err.into()),
        })
    }

    /// The `map` export: `R::map` of one object of a watched kind.
    pub fn map<R: Reconciler + FromConfig + 'static>(
        slot: &'static Slot<R>,
        kind: wit::Gvk,
        object: String,
    ) -> Result<Vec<wit::Request>, wit::Error> {
        let gvk = crate::GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
        let object: crate::DynamicObject = serde_json::from_str(&object).map_err(|err| {
            wit::Error::Invalid(format!("the {} to map does not decode: {err}", kind.kind))
        })?;
        with_reconciler(slot, |r| {
            Ok(r.map(&gvk, &object)
                .into_iter()
                .map(|req| wit::Request {
                    namespace: req.namespace,
                    name: req.name,
                })
                .collect())
        })
    }

    use crate::bindings::krec::reconciler::admission_types as review;
    use crate::{AdmissionRequest, Converter, Mutator, Operation, UserInfo, Validator, Verdict};

    /// Stands for the parts of a guest it does not implement: each says so when called.
    #[derive(Default)]
    pub struct Unimplemented;

    impl Reconciler for Unimplemented {
        fn reconcile(&self, _: Request, _: &Context) -> crate::Result<Action> {
            Err(crate::Error::Other(
                "this guest exports no reconciler (export!(reconciler: …))".into(),
            ))
        }
    }

    // A webhook a guest does not implement traps: the host answers HTTP 500 and the API
    // server applies the webhook's `failurePolicy`, as for any webhook that cannot answer.
    impl Validator for Unimplemented {
        type Object = serde_json::Value;
        fn validate(_: &AdmissionRequest<Self::Object>, _: &Context) -> Verdict {
            panic!("this guest exports no validator (export!(validator: …))")
        }
    }

    impl Mutator for Unimplemented {
        type Object = serde_json::Value;
        fn mutate(
            _: &AdmissionRequest<Self::Object>,
            _: &mut Self::Object,
            _: &Context,
        ) -> Verdict {
            panic!("this guest exports no mutator (export!(mutator: …))")
        }
    }

    impl Converter for Unimplemented {
        fn convert(_: serde_json::Value, _: &str) -> Result<serde_json::Value, String> {
            Err("this guest exports no converter (export!(converter: …))".into())
        }
    }

    /// The request decoded as `K`; a message when an object does not decode.
    fn request<K: serde::de::DeserializeOwned>(
        req: &review::AdmissionRequest,
    ) -> Result<AdmissionRequest<K>, String> {
        let decode = |which: &str, text: &Option<String>| -> Result<Option<K>, String> {
            text.as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|e| format!("the request's {which} does not decode: {e}"))
        };
        Ok(AdmissionRequest {
            uid: req.uid.clone(),
            kind: crate::GroupVersionKind::gvk(&req.kind.group, &req.kind.version, &req.kind.kind),
            resource: req.resource.clone(),
            sub_resource: req.sub_resource.clone(),
            name: req.name.clone(),
            namespace: req.namespace.clone(),
            operation: match req.operation {
                review::Operation::Create => Operation::Create,
                review::Operation::Update => Operation::Update,
                review::Operation::Delete => Operation::Delete,
                review::Operation::Connect => Operation::Connect,
            },
            user: UserInfo {
                username: req.user_info.username.clone(),
                groups: req.user_info.groups.clone(),
            },
            object: decode("object", &req.object)?,
            old_object: decode("oldObject", &req.old_object)?,
            dry_run: req.dry_run,
        })
    }

    fn answer(verdict: Verdict, patched: Option<String>) -> review::Verdict {
        review::Verdict {
            allowed: verdict.allowed,
            code: verdict.code,
            message: verdict.message,
            reason: verdict.reason,
            warnings: verdict.warnings,
            audit_annotations: verdict.audit_annotations,
            patched,
        }
    }

    fn undecodable(message: String) -> review::Verdict {
        answer(
            Verdict::deny(message)
                .with_code(400)
                .with_reason("BadRequest"),
            None,
        )
    }

    /// Run `V::validate` for a review from the host.
    pub fn validate<V: Validator>(req: review::AdmissionRequest) -> review::Verdict {
        match request::<V::Object>(&req) {
            Ok(typed) => answer(V::validate(&typed, &Context::new()), None),
            Err(message) => undecodable(message),
        }
    }

    /// Run `M::mutate` for a review from the host: the object it leaves, as the request's
    /// object with the changes `mutate` made to its typed form (so fields the type does not
    /// know survive).
    pub fn mutate<M: Mutator>(req: review::AdmissionRequest) -> review::Verdict {
        let typed = match request::<M::Object>(&req) {
            Ok(typed) => typed,
            Err(message) => return undecodable(message),
        };
        let Some(mut object) = typed.object.clone() else {
            // A delete: nothing to change.
            return answer(Verdict::allow(), None);
        };
        let before = serde_json::to_value(&object);
        let verdict = M::mutate(&typed, &mut object, &Context::new());
        let after = serde_json::to_value(&object);
        let (Ok(before), Ok(after)) = (before, after) else {
            panic!("the mutated object does not encode as JSON");
        };
        if before == after {
            return answer(verdict, None);
        }
        let changes = json_patch::diff(&before, &after);
        let mut original: serde_json::Value = req
            .object
            .as_deref()
            .and_then(|o| serde_json::from_str(o).ok())
            .unwrap_or(serde_json::Value::Null);
        // The request's object and its typed form differ where the change is: sending the
        // typed form whole would drop what the type does not know, so the review traps (and
        // the webhook's `failurePolicy` decides).
        if let Err(err) = json_patch::patch(&mut original, &changes) {
            panic!("the mutation cannot be applied to the request's object: {err}");
        }
        let patched = original;
        answer(verdict, Some(patched.to_string()))
    }

    /// Run `C::convert` on each object for a conversion review from the host.
    pub fn convert<C: Converter>(
        objects: Vec<String>,
        desired: String,
    ) -> Result<Vec<String>, String> {
        objects
            .iter()
            .map(|text| {
                let object = serde_json::from_str(text)
                    .map_err(|e| format!("an object does not decode: {e}"))?;
                C::convert(object, &desired).map(|converted| converted.to_string())
            })
            .collect()
    }

    impl From<Action> for wit::Action {
        fn from(action: Action) -> Self {
            match action {
                Action::Done => wit::Action::Done,
                Action::Requeue => wit::Action::Requeue,
                Action::RequeueAfter(after) => {
                    wit::Action::RequeueAfter(u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
                }
            }
        }
    }
}

/// Export a guest's parts: a [`Reconciler`], and admission webhooks — a [`Validator`], a
/// [`Mutator`], a [`Converter`].
///
/// Use it once per crate, at the top level: `export!(MyReconciler);` for a reconciler, or name
/// the parts, in this order, each optional: `export!(reconciler: R, validator: V, mutator: M,
/// converter: C);`. The parts not named answer that they are not implemented. The crate must be
/// a `cdylib` built for `wasm32-wasip2`. Compiled for any other target it expands to nothing:
/// run the reconciler there with [`native::reconcile`].
#[macro_export]
macro_rules! export {
    ($reconciler:ty) => {
        $crate::export!(reconciler: $reconciler);
    };
    ($($part:ident : $ty:ty),+ $(,)?) => {
        $crate::__export_guest!(
            @parts
            [$crate::__private::Unimplemented]
            [$crate::__private::Unimplemented]
            [$crate::__private::Unimplemented]
            [$crate::__private::Unimplemented]
            $($part : $ty,)+
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_guest {
    (@parts [$r:ty] [$v:ty] [$m:ty] [$c:ty] reconciler : $x:ty, $($rest:tt)*) => {
        $crate::__export_guest!(@parts [$x] [$v] [$m] [$c] $($rest)*);
    };
    (@parts [$r:ty] [$v:ty] [$m:ty] [$c:ty] validator : $x:ty, $($rest:tt)*) => {
        $crate::__export_guest!(@parts [$r] [$x] [$m] [$c] $($rest)*);
    };
    (@parts [$r:ty] [$v:ty] [$m:ty] [$c:ty] mutator : $x:ty, $($rest:tt)*) => {
        $crate::__export_guest!(@parts [$r] [$v] [$x] [$c] $($rest)*);
    };
    (@parts [$r:ty] [$v:ty] [$m:ty] [$c:ty] converter : $x:ty, $($rest:tt)*) => {
        $crate::__export_guest!(@parts [$r] [$v] [$m] [$x] $($rest)*);
    };
    (@parts [$r:ty] [$v:ty] [$m:ty] [$c:ty]) => {
        // Compiled for the host (unit tests), the parts are used by no export: say they are, so
        // that a guest's `cargo test` has no "never constructed" warnings.
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            let _ = <$r as $crate::FromConfig>::from_config;
            let _ = <$v as $crate::Validator>::validate;
            let _ = <$m as $crate::Mutator>::mutate;
            let _ = <$c as $crate::Converter>::convert;
        };
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            use $crate::bindings::krec::reconciler::admission_types as review;
            use $crate::bindings::krec::reconciler::types as wit;
            struct KrecGuestExport;
            ::std::thread_local! {
                static RECONCILER: ::std::cell::OnceCell<$r> = const { ::std::cell::OnceCell::new() };
            }
            impl $crate::bindings::Guest for KrecGuestExport {
                fn init(config: ::std::string::String) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::__private::init::<$r>(&RECONCILER, config)
                }
                fn reconcile(
                    req: wit::Request,
                ) -> ::core::result::Result<wit::Action, wit::Error> {
                    $crate::__private::reconcile::<$r>(&RECONCILER, req)
                }
                fn map(
                    kind: wit::Gvk,
                    object: ::std::string::String,
                ) -> ::core::result::Result<::std::vec::Vec<wit::Request>, wit::Error> {
                    $crate::__private::map::<$r>(&RECONCILER, kind, object)
                }
                fn validate(request: review::AdmissionRequest) -> review::Verdict {
                    $crate::__private::validate::<$v>(request)
                }
                fn mutate(request: review::AdmissionRequest) -> review::Verdict {
                    $crate::__private::mutate::<$m>(request)
                }
                fn convert(
                    objects: ::std::vec::Vec<::std::string::String>,
                    desired_api_version: ::std::string::String,
                ) -> ::core::result::Result<
                    ::std::vec::Vec<::std::string::String>,
                    ::std::string::String,
                > {
                    $crate::__private::convert::<$c>(objects, desired_api_version)
                }
            }
            $crate::bindings::__export_world!(KrecGuestExport with_types_in $crate::bindings);
        };
    };
}
