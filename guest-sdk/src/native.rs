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

use std::cell::RefCell;
use std::sync::Arc;

use kube_core::GroupVersionKind;

use crate::Result;
use crate::bindings::krec::reconciler::{events as wit_events, log as wit_log, types as wit};
use crate::{
    Action, Context, Error, EventType, FromConfig, ListParams, Preconditions, Reconciler, Request,
};

/// Format of a patch body: the workspace's one list of patch types.
pub use krec_core::PatchType;

/// Severity of a guest's log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected, handled.
    Warn,
    /// A failure.
    Error,
}

/// The object an Event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectReference {
    /// Its kind.
    pub gvk: GroupVersionKind,
    /// Its namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its UID, if known.
    pub uid: Option<String>,
}

/// What a natively running reconciler's [`Context`] calls: the host side of the
/// WIT `client`, `events` and `log` interfaces, one method each. Objects are JSON text with
/// `apiVersion` and `kind`; errors are the SDK's [`Error`].
pub trait Host: Send + Sync {
    /// Get one object.
    fn get(&self, gvk: &GroupVersionKind, namespace: Option<&str>, name: &str) -> Result<String>;
    /// List objects of a kind.
    fn list(&self, gvk: &GroupVersionKind, params: &ListParams) -> Result<Vec<String>>;
    /// Create an object; returns it as stored.
    fn create(&self, object: &str) -> Result<String>;
    /// Replace an object (or only its status, when `status`); returns it as stored.
    fn update(&self, object: &str, status: bool) -> Result<String>;
    /// Patch an object (or its status); returns it as stored.
    fn patch(
        &self,
        gvk: &GroupVersionKind,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        body: &str,
        status: bool,
    ) -> Result<String>;
    /// Delete an object.
    fn delete(
        &self,
        gvk: &GroupVersionKind,
        namespace: Option<&str>,
        name: &str,
        preconditions: Option<&Preconditions>,
    ) -> Result<()>;
    /// Record a Kubernetes Event.
    fn record_event(
        &self,
        regarding: &ObjectReference,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<()>;
    /// Write a log line.
    fn log(&self, level: Level, message: &str);
}

thread_local! {
    /// The host of the reconcile running on this thread, if any.
    static HOST: RefCell<Option<Arc<dyn Host>>> = const { RefCell::new(None) };
}

/// Puts back the host that was installed before, also when the reconciler panics.
struct Installed(Option<Arc<dyn Host>>);

impl Drop for Installed {
    fn drop(&mut self) {
        let previous = self.0.take();
        HOST.with(|slot| *slot.borrow_mut() = previous);
    }
}

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
    let previous = HOST.with(|slot| slot.borrow_mut().replace(host));
    let _restore = Installed(previous);
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

/// Run `V`'s validate natively on `review`, its [`Context`] reads and log
/// lines served by `host` — what the guest's `validate` export does in a component.
pub fn validate<V: crate::Validator>(host: Arc<dyn Host>, review: Review) -> ReviewVerdict {
    let previous = HOST.with(|slot| slot.borrow_mut().replace(host));
    let _restore = Installed(previous);
    crate::__private::validate::<V>(review)
}

fn with_host<T>(call: impl FnOnce(&dyn Host) -> Result<T>) -> Result<T> {
    let host = HOST.with(|slot| slot.borrow().clone());
    match host {
        Some(host) => call(host.as_ref()),
        None => Err(Error::Unavailable(
            "no krec host: run the reconciler through krec_guest::native::reconcile".into(),
        )),
    }
}

fn gvk(kind: &wit::Gvk) -> GroupVersionKind {
    GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind)
}

fn wit_result<T>(result: Result<T>) -> Result<T, wit::Error> {
    result.map_err(wit::Error::from)
}

/// The `client` imports, with the generated bindings' signatures, over the installed [`Host`].
pub(crate) mod client {
    use super::{PatchType, gvk, wit, wit_result, with_host};
    use crate::{ListParams, Preconditions};

    pub fn get(kind: &wit::Gvk, namespace: Option<&str>, name: &str) -> Result<String, wit::Error> {
        wit_result(with_host(|h| h.get(&gvk(kind), namespace, name)))
    }

    pub fn list(kind: &wit::Gvk, options: &wit::ListOptions) -> Result<Vec<String>, wit::Error> {
        let params = ListParams {
            namespace: options.namespace.clone(),
            label_selector: options.label_selector.clone(),
            field_selector: options.field_selector.clone(),
            uncached: options.uncached,
        };
        wit_result(with_host(|h| h.list(&gvk(kind), &params)))
    }

    pub fn create(object: &str) -> Result<String, wit::Error> {
        wit_result(with_host(|h| h.create(object)))
    }

    pub fn update(object: &str) -> Result<String, wit::Error> {
        wit_result(with_host(|h| h.update(object, false)))
    }

    pub fn update_status(object: &str) -> Result<String, wit::Error> {
        wit_result(with_host(|h| h.update(object, true)))
    }

    pub fn patch(
        kind: &wit::Gvk,
        namespace: Option<&str>,
        name: &str,
        how: wit::PatchType,
        body: &str,
        status: bool,
    ) -> Result<String, wit::Error> {
        let how = match how {
            wit::PatchType::Merge => PatchType::Merge,
            wit::PatchType::Json => PatchType::Json,
            wit::PatchType::Strategic => PatchType::Strategic,
            wit::PatchType::Apply => PatchType::Apply,
        };
        wit_result(with_host(|h| {
            h.patch(&gvk(kind), namespace, name, how, body, status)
        }))
    }

    pub fn delete(
        kind: &wit::Gvk,
        namespace: Option<&str>,
        name: &str,
        preconditions: Option<&wit::Preconditions>,
    ) -> Result<(), wit::Error> {
        let preconditions = preconditions.map(|p| Preconditions {
            uid: p.uid.clone(),
            resource_version: p.resource_version.clone(),
        });
        wit_result(with_host(|h| {
            h.delete(&gvk(kind), namespace, name, preconditions.as_ref())
        }))
    }
}

/// The `events` import over the installed [`Host`].
pub(crate) mod events {
    pub use super::wit_events::{EventType, ObjectReference};
    use super::{gvk, wit, wit_result, with_host};

    pub fn record(
        regarding: &ObjectReference,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<(), wit::Error> {
        let regarding = super::ObjectReference {
            gvk: gvk(&regarding.kind),
            namespace: regarding.namespace.clone(),
            name: regarding.name.clone(),
            uid: regarding.uid.clone(),
        };
        let event_type = match event_type {
            EventType::Normal => crate::EventType::Normal,
            EventType::Warning => crate::EventType::Warning,
        };
        wit_result(with_host(|h| {
            h.record_event(&regarding, event_type, reason, message)
        }))
    }
}

/// The `log` import over the installed [`Host`]; standard error when none is installed.
pub(crate) mod log {
    pub use super::wit_log::Level;

    pub fn log(level: Level, message: &str) {
        let level = match level {
            Level::Trace => super::Level::Trace,
            Level::Debug => super::Level::Debug,
            Level::Info => super::Level::Info,
            Level::Warn => super::Level::Warn,
            Level::Error => super::Level::Error,
        };
        let host = super::HOST.with(|slot| slot.borrow().clone());
        match host {
            Some(host) => host.log(level, message),
            None => eprintln!("[{level:?}] {message}"),
        }
    }
}
