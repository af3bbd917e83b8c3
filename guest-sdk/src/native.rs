//! Running a reconciler natively, outside WebAssembly: the same crate, compiled for the host's
//! target, with its [`Context`] calls served by a [`Host`] you provide.
//!
//! In a component, every [`Context`] call and every log line is a WIT import the
//! krec host serves. Compiled for any other target, they go to the [`Host`] installed by
//! [`reconcile`] for the duration of one call. That is how krec's benchmarks run one reconciler
//! both as a Wasm guest and natively in the same host, and how a guest author can unit-test a
//! reconciler with `cargo test` against an in-memory [`Host`] of their own, without building a
//! component.
//!
//! Objects cross this seam as JSON text, exactly as they cross the WIT boundary, so a reconciler
//! behaves the same in both places.
//!
//! # Caveats
//!
//! A native reconciler is ordinary code in the caller's process: no sandbox, no time or memory
//! limit. Outside [`reconcile`], [`Context`] calls fail with
//! [`Error::Unavailable`] and log lines go to standard error.
//!
//! # Example: a reconciler under `cargo test`
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::sync::{Arc, Mutex};
//!
//! use krec_guest::native::{self, Host, Level, ObjectReference, PatchType};
//! use krec_guest::prelude::*;
//! use krec_guest::{GroupVersionKind, Preconditions};
//! use krec_guest::k8s_openapi::api::core::v1::ConfigMap;
//! use krec_guest::serde_json;
//!
//! /// The reconciler under test: labels every ConfigMap `seen=yes`.
//! #[derive(Default)]
//! struct Labeler;
//!
//! impl Reconciler for Labeler {
//!     fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
//!         let mut cm = ctx.get::<ConfigMap>(req.namespace(), &req.name)?;
//!         cm.labels_mut().insert("seen".into(), "yes".into());
//!         ctx.update(&cm)?;
//!         Ok(Action::done())
//!     }
//! }
//!
//! /// A fake cluster: objects by name, as JSON text.
//! #[derive(Default)]
//! struct FakeCluster(Mutex<BTreeMap<String, String>>);
//!
//! fn name_of(json: &str) -> Result<String> {
//!     let value: serde_json::Value = serde_json::from_str(json)?;
//!     Ok(value["metadata"]["name"].as_str().unwrap_or_default().to_owned())
//! }
//!
//! impl Host for FakeCluster {
//!     fn get(&self, _: &GroupVersionKind, _: Option<&str>, name: &str) -> Result<String> {
//!         let objects = self.0.lock().map_err(Error::other)?;
//!         objects.get(name).cloned().ok_or_else(|| Error::NotFound(name.into()))
//!     }
//!     fn list(&self, _: &GroupVersionKind, _: &ListParams) -> Result<Vec<String>> {
//!         Ok(self.0.lock().map_err(Error::other)?.values().cloned().collect())
//!     }
//!     fn create(&self, object: &str) -> Result<String> {
//!         self.0.lock().map_err(Error::other)?.insert(name_of(object)?, object.into());
//!         Ok(object.into())
//!     }
//!     fn update(&self, object: &str, _status: bool) -> Result<String> {
//!         self.create(object)
//!     }
//!     fn patch(&self, _: &GroupVersionKind, _: Option<&str>, _: &str, _: PatchType, _: &str, _: bool) -> Result<String> {
//!         Err(Error::other("patch is not faked"))
//!     }
//!     fn delete(&self, _: &GroupVersionKind, _: Option<&str>, name: &str, _: Option<&Preconditions>) -> Result<()> {
//!         self.0.lock().map_err(Error::other)?.remove(name);
//!         Ok(())
//!     }
//!     fn record_event(&self, _: &ObjectReference, _: EventType, _: &str, _: &str) -> Result<()> {
//!         Ok(())
//!     }
//!     fn log(&self, level: Level, message: &str) {
//!         println!("[{level:?}] {message}");
//!     }
//! }
//!
//! # fn main() -> Result<()> {
//! let cluster = Arc::new(FakeCluster::default());
//! cluster.create(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"default"}}"#)?;
//! let request = Request { namespace: Some("default".into()), name: "a".into() };
//! assert_eq!(native::reconcile::<Labeler>(cluster.clone(), request)?, Action::done());
//! assert!(cluster.get(&GroupVersionKind::gvk("", "v1", "ConfigMap"), None, "a")?.contains(r#""seen":"yes""#));
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

pub use crate::host::{Host, Level, ObjectReference, PatchType};

use crate::admission::Validator;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::reconciler::{Action, FromConfig, Reconciler, Request};

/// Run `R`'s reconcile of `request` natively, its [`Context`] calls and log
/// lines served by `host`, on an `R` built without configuration (a fresh one per call; see
/// [`reconcile_with`] for one you built).
///
/// # Errors
///
/// Whatever the reconciler returns; [`Error::Invalid`] when `R` cannot be built without a
/// configuration.
pub fn reconcile<R: Reconciler + FromConfig>(
    host: Arc<dyn Host>,
    request: Request,
) -> Result<Action> {
    let reconciler = crate::__private::build::<R>("null").map_err(Error::Invalid)?;
    reconcile_with(&reconciler, host, request)
}

/// Run `reconciler`'s reconcile of `request` natively, its [`Context`] calls
/// and log lines served by `host`.
///
/// # Errors
///
/// Whatever the reconciler returns.
pub fn reconcile_with<R: Reconciler>(
    reconciler: &R,
    host: Arc<dyn Host>,
    request: Request,
) -> Result<Action> {
    let _restore = crate::host::install(host);
    reconciler.reconcile(request, &Context::new())
}

/// Build `R` from a configuration given as JSON text, as the host does from the manifest's
/// `spec.config` — to test a configured reconciler natively.
///
/// # Errors
///
/// [`Error::Invalid`] naming the field that does not deserialize, or `from_config`'s refusal.
pub fn configure<R: FromConfig>(config: &str) -> Result<R> {
    crate::__private::build::<R>(config).map_err(Error::Invalid)
}

/// An admission request and verdict as the WIT `admission-types` interface declares them: what a
/// native webhook takes and answers.
pub use crate::bindings::krec::reconciler::admission_types::{
    AdmissionRequest as Review, Operation as ReviewOperation, UserInfo as ReviewUserInfo,
    Verdict as ReviewVerdict,
};
/// A kind as the WIT `types` interface declares it (a [`Review`]'s `kind`).
pub use crate::bindings::krec::reconciler::types::Gvk as WitGvk;

/// Run `V`'s validate natively on `review`, on a `V` built without configuration, its
/// [`Context`] reads and log lines served by `host` — what the guest's `validate` export does in
/// a component (see [`validate_with`] for one you built).
///
/// # Panics
///
/// When `V` cannot be built without a configuration (as the export traps).
pub fn validate<V: Validator + FromConfig>(host: Arc<dyn Host>, review: Review) -> ReviewVerdict {
    let validator = match crate::__private::build::<V>("null") {
        Ok(validator) => validator,
        Err(err) => panic!("the validator cannot be built: {err}"),
    };
    validate_with(&validator, host, review)
}

/// Run `mutator` natively on `review`, its [`Context`] reads and log lines served by `host`:
/// the verdict, with the object it leaves as `patched` when it changed it.
pub fn mutate_with<M: crate::admission::Mutator>(
    mutator: &M,
    host: Arc<dyn Host>,
    review: Review,
) -> ReviewVerdict {
    let _restore = crate::host::install(host);
    crate::__private::mutate_with(mutator, review)
}

/// Run `validator` natively on `review`, its [`Context`] reads and log lines served by `host`.
pub fn validate_with<V: Validator>(
    validator: &V,
    host: Arc<dyn Host>,
    review: Review,
) -> ReviewVerdict {
    let _restore = crate::host::install(host);
    crate::__private::validate_with(validator, review)
}
