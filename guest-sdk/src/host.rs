//! The host a natively running guest calls: the [`Host`] trait, the one installed on this thread,
//! and the `client`, `events` and `log` calls over it with the generated bindings' signatures
//! (what `crate::imports` names outside WebAssembly).

use std::cell::RefCell;
use std::sync::Arc;

use kube_core::GroupVersionKind;

use crate::bindings::krec::reconciler::{events as wit_events, log as wit_log, types as wit};
use crate::error::{Error, Result};
use crate::params::{EventType, ListParams, Preconditions};

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

/// What a natively running reconciler's `Context` calls: the host side of the
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
pub(crate) struct Installed(Option<Arc<dyn Host>>);

impl Drop for Installed {
    fn drop(&mut self) {
        let previous = self.0.take();
        HOST.with(|slot| *slot.borrow_mut() = previous);
    }
}

/// Install `host` on this thread until the returned guard is dropped (the host before it is put
/// back then, also when the guest panics).
pub(crate) fn install(host: Arc<dyn Host>) -> Installed {
    let previous = HOST.with(|slot| slot.borrow_mut().replace(host));
    Installed(previous)
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
    use crate::params::{ListParams, Preconditions};

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
            EventType::Normal => crate::params::EventType::Normal,
            EventType::Warning => crate::params::EventType::Warning,
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
