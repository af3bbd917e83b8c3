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
#[doc(hidden)]
#[allow(clippy::too_many_arguments)] // generated: the `patch` import and the exports' glue
pub mod bindings;
mod context;
mod error;
mod helpers;
#[cfg(not(target_arch = "wasm32"))]
mod host;
mod imports;
pub mod lazy;
mod params;
mod reconciler;

#[doc(hidden)]
#[path = "glue.rs"]
pub mod __private;

pub mod log;
#[cfg(not(target_arch = "wasm32"))]
pub mod native;
#[cfg(all(feature = "testing", not(target_arch = "wasm32")))]
pub mod testing;

// The guide's Rust examples are tests of the SDK.
#[cfg(all(doctest, feature = "testing"))]
#[doc = include_str!("../../docs/guide.md")]
pub struct Guide;

pub use admission::{
    AdmissionRequest, Converter, Mutator, Operation, UserInfo, Validator, Verdict,
};
pub use context::Context;
pub use error::{Error, Result, ResultExt};
pub use helpers::{
    Api, FinalizerEvent, OperationResult, condition, find_condition, is_controlled_by,
    set_condition, set_controller_reference,
};
pub use lazy::{FromJson, Lazy};
pub use params::{
    EventType, ListParams, Patch, Preconditions, labels_to_selector, selector_string,
};
pub use reconciler::{Action, FromConfig, NoConfig, Reconciler, Request};

/// The `k8s-openapi` crate the SDK is built with: typed Kubernetes objects.
pub use k8s_openapi;
/// The `kube-core` crate the SDK is built with: [`Resource`],
/// [`DynamicObject`], [`GroupVersionKind`].
pub use kube_core;
/// An object's metadata alone (`PartialObjectMetadata`): how a guest reads a kind its manifest
/// watches with `metadataOnly` (`ctx.get::<PartialObjectMeta<Pod>>(…)`).
pub use kube_core::PartialObjectMeta;
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
    // The logging macros (`crate::log`), by their exported names.
    pub use crate::{
        __krec_debug as debug, __krec_error as error, __krec_info as info, __krec_trace as trace,
        __krec_warn as warn,
    };
    pub use crate::{
        Action, AdmissionRequest, Context, Converter, Error, EventType, FinalizerEvent, FromConfig,
        Lazy, ListParams, Mutator, Operation, OperationResult, PartialObjectMeta, Patch,
        Reconciler, Request, Resource, ResourceExt, Result, Validator, Verdict, export,
        is_controlled_by, labels_to_selector, selector_string, set_controller_reference,
    };
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
            let _ = <$v as $crate::FromConfig>::from_config;
            let _ = <$v as $crate::Validator>::validate;
            let _ = <$m as $crate::FromConfig>::from_config;
            let _ = <$m as $crate::Mutator>::mutate;
            let _ = <$c as $crate::FromConfig>::from_config;
            let _ = <$c as $crate::Converter>::convert;
        };
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            use $crate::bindings::krec::reconciler::admission_types as review;
            use $crate::bindings::krec::reconciler::types as wit;
            struct KrecGuestExport;
            ::std::thread_local! {
                static RECONCILER: ::std::cell::OnceCell<$r> = const { ::std::cell::OnceCell::new() };
                static VALIDATOR: ::std::cell::OnceCell<$v> = const { ::std::cell::OnceCell::new() };
                static MUTATOR: ::std::cell::OnceCell<$m> = const { ::std::cell::OnceCell::new() };
                static CONVERTER: ::std::cell::OnceCell<$c> = const { ::std::cell::OnceCell::new() };
            }
            impl $crate::bindings::Guest for KrecGuestExport {
                fn init(config: ::std::string::String) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::__private::init::<$r, $v, $m, $c>(
                        (&RECONCILER, &VALIDATOR, &MUTATOR, &CONVERTER),
                        config,
                    )
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
                    $crate::__private::validate::<$v>(&VALIDATOR, request)
                }
                fn mutate(request: review::AdmissionRequest) -> review::Verdict {
                    $crate::__private::mutate::<$m>(&MUTATOR, request)
                }
                fn convert(
                    objects: ::std::vec::Vec<::std::string::String>,
                    desired_api_version: ::std::string::String,
                ) -> ::core::result::Result<
                    ::std::vec::Vec<::std::string::String>,
                    ::std::string::String,
                > {
                    $crate::__private::convert::<$c>(&CONVERTER, objects, desired_api_version)
                }
            }
            $crate::bindings::__export_world!(KrecGuestExport with_types_in $crate::bindings);
        };
    };
}
