//! Cluster access: the one seam between the guest plumbing and wherever objects live.
//!
//! The host side of the WIT `client` and `events` interfaces calls a [`ClusterAccess`] after
//! checking the guest's permissions. Its backends: `MemoryCluster` (an in-memory object set
//! for tests and `krec check`, on the embedded API server's store; without the
//! `embedded-apiserver` feature, `EmptyCluster` in its place) and [`live::LiveCluster`] (reads from the shared cache, writes to the
//! API server through [`crate::cluster::client::ApiClient`], each write within the guest's
//! [`fence`] when guests are sharded). The words they share are [`krec_core`]'s.

pub mod cache;
pub mod client;
pub mod connect;
#[cfg(not(feature = "embedded-apiserver"))]
mod empty;
pub mod fence;
pub mod layer;
pub mod live;
#[cfg(feature = "embedded-apiserver")]
mod memory;
pub mod permissions;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use krec_core::{
    CallError, EventRecord, Gvk, ListOptions, ObjectHead, PatchType, Preconditions, WriteKind,
};

#[cfg(not(feature = "embedded-apiserver"))]
pub use empty::EmptyCluster;
pub use layer::{Fenced, Logged};
#[cfg(feature = "embedded-apiserver")]
pub use memory::{MAX_EVENTS, MemoryCluster, RecordedEvent};

/// The object a call names.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// Its kind.
    pub gvk: &'a Gvk,
    /// Its namespace (`None`: cluster-scoped).
    pub namespace: Option<&'a str>,
    /// Its name.
    pub name: &'a str,
}

impl std::fmt::Display for Target<'_> {
    /// `Kind ns/name`, as log lines name an object.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.gvk.kind, self.name),
            None => write!(f, "{} {}", self.gvk.kind, self.name),
        }
    }
}

/// One call to the cluster, as a value: what a [`layer`] sees and a backend answers.
/// Each case names the [`Reply`] it gets.
#[derive(Debug)]
pub enum Request<'a> {
    /// Read one object: [`Reply::Object`].
    Get(Target<'a>),
    /// List objects: [`Reply::Objects`].
    List {
        /// The kind.
        gvk: &'a Gvk,
        /// Namespace, selectors and whether to read past the cache.
        options: &'a ListOptions,
    },
    /// Whether objects of a kind live in namespaces (`false`: cluster-scoped), as the API
    /// server serves the kind: [`Reply::Namespaced`]. Permission checks ask it: a namespace
    /// given for a cluster-scoped kind grants nothing. A kind not served is `not-found`.
    Namespaced(&'a Gvk),
    /// Create or replace an object (or its status) given as JSON text, whose `head` was read
    /// from it: [`Reply::Stored`]. A client of the API server sends the text as it is.
    Write {
        /// Create, update or update-status.
        kind: WriteKind,
        /// Its kind, namespace and name, read from the text.
        head: &'a ObjectHead,
        /// The object.
        json: &'a str,
    },
    /// Patch an object (or its status): [`Reply::Stored`].
    Patch {
        /// The object.
        target: Target<'a>,
        /// The patch's type.
        patch_type: PatchType,
        /// The patch.
        body: Value,
        /// Whether it patches the status subresource.
        status: bool,
    },
    /// Delete an object: [`Reply::Done`].
    Delete {
        /// The object.
        target: Target<'a>,
        /// Its expected `uid` and `resourceVersion`.
        preconditions: Option<&'a Preconditions>,
    },
    /// Record an Event: [`Reply::Done`].
    Event(EventRecord),
}

impl Request<'_> {
    /// Whether the call changes the cluster (everything but reads).
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            Request::Get(_) | Request::List { .. } | Request::Namespaced(_)
        )
    }
}

/// A call's answer. Objects are JSON text: a cache hands out the text it holds, and the
/// guest receives text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// One object ([`Request::Get`]).
    Object(Arc<str>),
    /// A list's items ([`Request::List`]).
    Objects(Vec<Arc<str>>),
    /// Whether the kind is namespaced ([`Request::Namespaced`]).
    Namespaced(bool),
    /// The object as stored after a write ([`Request::Write`], [`Request::Patch`]).
    Stored(String),
    /// Done ([`Request::Delete`], [`Request::Event`]).
    Done,
}

/// Where guests' reads and writes go: one method, one [`Request`] at a time.
///
/// Backends apply Kubernetes semantics: optimistic concurrency on `resourceVersion`,
/// `generateName`, the status subresource, finalizers. Layers ([`layer`]) wrap a backend and
/// answer the same calls. Permission checks happen before a call reaches this trait. The typed
/// calls (`get_json`, `patch`, …) are [`ClusterCalls`]'s, over any access.
#[async_trait]
pub trait ClusterAccess: Send + Sync + 'static {
    /// Carry `request` out.
    async fn call(&self, request: Request<'_>) -> Result<Reply, CallError>;
}

/// A reply of another kind than the request asks for: a backend's bug, said as such.
fn mismatched(verb: &str, reply: &Reply) -> CallError {
    CallError::Other(format!(
        "the cluster answered a {verb} with {}",
        match reply {
            Reply::Object(_) => "an object",
            Reply::Objects(_) => "a list",
            Reply::Namespaced(_) => "a kind's scope",
            Reply::Stored(_) => "a stored object",
            Reply::Done => "nothing",
        }
    ))
}

fn parse(json: &str) -> Result<Value, CallError> {
    serde_json::from_str(json).map_err(|e| CallError::Other(format!("decoding an object: {e}")))
}

fn encode(object: &Value) -> Result<String, CallError> {
    serde_json::to_string(object).map_err(|e| CallError::Other(format!("encoding object: {e}")))
}

/// The typed calls over any [`ClusterAccess`]: each builds its [`Request`] and takes its
/// [`Reply`] apart. The `_json` calls keep objects as text (the guest's path); the others
/// parse them (tests, the native host).
#[async_trait]
pub trait ClusterCalls: ClusterAccess {
    /// Get one object as JSON text.
    async fn get_json(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<str>, CallError> {
        let target = Target {
            gvk,
            namespace,
            name,
        };
        match self.call(Request::Get(target)).await? {
            Reply::Object(json) => Ok(json),
            other => Err(mismatched("get", &other)),
        }
    }

    /// Get one object.
    async fn get(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, CallError> {
        parse(&self.get_json(gvk, namespace, name).await?)
    }

    /// List objects as JSON text.
    async fn list_json(
        &self,
        gvk: &Gvk,
        options: &ListOptions,
    ) -> Result<Vec<Arc<str>>, CallError> {
        match self.call(Request::List { gvk, options }).await? {
            Reply::Objects(items) => Ok(items),
            other => Err(mismatched("list", &other)),
        }
    }

    /// List objects.
    async fn list(&self, gvk: &Gvk, options: &ListOptions) -> Result<Vec<Value>, CallError> {
        let items = self.list_json(gvk, options).await?;
        items.iter().map(|json| parse(json)).collect()
    }

    /// Whether objects of `gvk` live in namespaces (see [`Request::Namespaced`]).
    async fn namespaced(&self, gvk: &Gvk) -> Result<bool, CallError> {
        match self.call(Request::Namespaced(gvk)).await? {
            Reply::Namespaced(namespaced) => Ok(namespaced),
            other => Err(mismatched("scope question", &other)),
        }
    }

    /// Write an object given as JSON text (`head` read from it); the object as stored, as text.
    async fn write_json(
        &self,
        kind: WriteKind,
        head: &ObjectHead,
        json: &str,
    ) -> Result<String, CallError> {
        match self.call(Request::Write { kind, head, json }).await? {
            Reply::Stored(json) => Ok(json),
            other => Err(mismatched("write", &other)),
        }
    }

    /// Create an object; returns it as stored.
    async fn create(&self, object: Value) -> Result<Value, CallError> {
        let json = encode(&object)?;
        let head = ObjectHead::parse(&json)?;
        parse(&self.write_json(WriteKind::Create, &head, &json).await?)
    }

    /// Replace an object (or only its status when `status` is true); returns it as stored.
    async fn update(&self, object: Value, status: bool) -> Result<Value, CallError> {
        let json = encode(&object)?;
        let head = ObjectHead::parse(&json)?;
        let kind = if status {
            WriteKind::UpdateStatus
        } else {
            WriteKind::Update
        };
        parse(&self.write_json(kind, &head, &json).await?)
    }

    /// Patch an object (or its status); returns it as stored, as JSON text.
    async fn patch_json(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        body: Value,
        status: bool,
    ) -> Result<String, CallError> {
        let request = Request::Patch {
            target: Target {
                gvk,
                namespace,
                name,
            },
            patch_type,
            body,
            status,
        };
        match self.call(request).await? {
            Reply::Stored(json) => Ok(json),
            other => Err(mismatched("patch", &other)),
        }
    }

    /// Patch an object (or its status); returns it as stored.
    async fn patch(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        body: Value,
        status: bool,
    ) -> Result<Value, CallError> {
        let stored = self
            .patch_json(gvk, namespace, name, patch_type, body, status)
            .await?;
        parse(&stored)
    }

    /// Delete an object.
    async fn delete(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        preconditions: Option<&Preconditions>,
    ) -> Result<(), CallError> {
        let target = Target {
            gvk,
            namespace,
            name,
        };
        match self
            .call(Request::Delete {
                target,
                preconditions,
            })
            .await?
        {
            Reply::Done => Ok(()),
            other => Err(mismatched("delete", &other)),
        }
    }

    /// Record an Event.
    async fn record_event(&self, event: EventRecord) -> Result<(), CallError> {
        match self.call(Request::Event(event)).await? {
            Reply::Done => Ok(()),
            other => Err(mismatched("event", &other)),
        }
    }
}

impl<C: ClusterAccess + ?Sized> ClusterCalls for C {}
