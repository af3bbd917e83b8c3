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
//! struct PodCounter;
//!
//! impl Reconciler for PodCounter {
//!     fn reconcile(req: Request, ctx: &Context) -> Result<Action> {
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

mod context;
mod error;
mod reconciler;

#[doc(hidden)]
pub mod log;
#[cfg(not(target_arch = "wasm32"))]
pub mod native;

/// The calls to the host: the WIT imports in a component, the installed [`native::Host`]
/// elsewhere. Both have the generated bindings' signatures.
mod imports {
    #[cfg(target_arch = "wasm32")]
    pub(crate) use crate::bindings::krec::reconciler::{client, events, log};
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) use crate::native::{client, events, log};
}

pub use context::{
    Context, EventType, ListParams, Patch, Preconditions, labels_to_selector, selector_string,
};
pub use error::{Error, Result};
pub use reconciler::{Action, Reconciler, Request};

/// The `k8s-openapi` crate the SDK is built with: typed Kubernetes objects.
pub use k8s_openapi;
/// The `kube-core` crate the SDK is built with: [`Resource`](kube_core::Resource),
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
    pub use crate::{
        Action, Context, Error, EventType, ListParams, Patch, Reconciler, Request, Resource,
        ResourceExt, Result, debug, error, export, info, labels_to_selector, selector_string,
        trace, warn,
    };
}

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "reconciler",
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

    use crate::bindings::krec::reconciler::types as wit;
    use crate::{Action, Context, Reconciler, Request};

    /// Run one reconcile of `R` for a request from the host.
    pub fn reconcile<R: Reconciler>(req: wit::Request) -> Result<wit::Action, wit::Error> {
        let req = Request {
            namespace: req.namespace,
            name: req.name,
        };
        match R::reconcile(req, &Context::new()) {
            Ok(action) => Ok(action.into()),
            Err(err) => Err(err.into()),
        }
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

/// Export a [`Reconciler`] as the component's `reconcile` function.
///
/// Use it once per crate, at the top level: `export!(MyReconciler);`. The crate must be a
/// `cdylib` built for `wasm32-wasip2`. Compiled for any other target it expands to nothing: run
/// the reconciler there with [`native::reconcile`].
#[macro_export]
macro_rules! export {
    ($reconciler:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct KrecGuestExport;
            impl $crate::bindings::Guest for KrecGuestExport {
                fn reconcile(
                    req: $crate::bindings::krec::reconciler::types::Request,
                ) -> ::core::result::Result<
                    $crate::bindings::krec::reconciler::types::Action,
                    $crate::bindings::krec::reconciler::types::Error,
                > {
                    $crate::__private::reconcile::<$reconciler>(req)
                }
            }
    $crate::bindings::__export_world!(KrecGuestExport with_types_in $crate::bindings);
        };
    };
}
