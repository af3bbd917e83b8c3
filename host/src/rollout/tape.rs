//! What one reconcile read and did — its [`Tape`] — and the [`Tap`] that takes it down.
//!
//! A tape holds every read's answer (by call, in order), every write as the guest asked for it
//! with the answer it got, every Event and the reconcile's result. The shadow feeds a live
//! reconcile's tape to the candidate; `krec record` writes tapes as JSON lines (one
//! [`Reconcile`] per line) and `krec replay` serves them back.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::cluster::{ClusterAccess, Reply, Request};
use crate::guest::{Action, ReconcileError};
use krec_core::{CallError, EventRecord, Gvk, ListOptions, PatchType, Preconditions, WriteKind};

/// JSON text kept as it is: an object as the cache handed it out, written into a recording
/// without being parsed again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Json(pub Arc<str>);

impl Serialize for Json {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw = RawValue::from_string(self.0.to_string()).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Through a value: a recording's lines have flattened fields, which serde buffers,
        // and raw JSON cannot be read from a buffer.
        let value = Value::deserialize(deserializer)?;
        Ok(Json(Arc::from(value.to_string())))
    }
}

impl Json {
    /// The text of `value`.
    pub fn of(value: &Value) -> Self {
        Json(Arc::from(value.to_string()))
    }

    /// The text parsed (`null` if it is not JSON, which a tape never holds).
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

/// A kind as a recording names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindName {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
}

impl KindName {
    /// The kind of `gvk`.
    pub fn of(gvk: &Gvk) -> Self {
        KindName {
            api_version: gvk.api_version(),
            kind: gvk.kind.clone(),
        }
    }

    /// Back to a [`Gvk`].
    pub fn gvk(&self) -> Gvk {
        Gvk::from_api_version(&self.api_version, &self.kind)
    }
}

/// A read a guest made: what identifies it, so that a replay can answer the same call.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "camelCase")]
pub enum ReadCall {
    /// `get`.
    #[serde(rename_all = "camelCase")]
    Get {
        /// The kind.
        #[serde(flatten)]
        kind: KindName,
        /// Its namespace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        /// Its name.
        name: String,
    },
    /// `list`.
    #[serde(rename_all = "camelCase")]
    List {
        /// The kind.
        #[serde(flatten)]
        kind: KindName,
        /// Only this namespace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        /// Label selector.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label_selector: Option<String>,
        /// Field selector.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        field_selector: Option<String>,
        /// Read past the cache.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        uncached: bool,
    },
    /// Whether a kind is namespaced (asked by permission checks).
    Namespaced {
        /// The kind.
        #[serde(flatten)]
        kind: KindName,
    },
}

impl ReadCall {
    fn get(gvk: &Gvk, namespace: Option<&str>, name: &str) -> Self {
        ReadCall::Get {
            kind: KindName::of(gvk),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    fn list(gvk: &Gvk, options: &ListOptions) -> Self {
        ReadCall::List {
            kind: KindName::of(gvk),
            namespace: options.namespace.clone(),
            label_selector: options.label_selector.clone(),
            field_selector: options.field_selector.clone(),
            uncached: options.uncached,
        }
    }

    /// The kind read.
    pub fn kind(&self) -> &KindName {
        match self {
            ReadCall::Get { kind, .. }
            | ReadCall::List { kind, .. }
            | ReadCall::Namespaced { kind } => kind,
        }
    }
}

impl std::fmt::Display for ReadCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadCall::Get {
                kind,
                namespace,
                name,
            } => {
                let key = krec_core::KeyRef {
                    namespace: namespace.as_deref(),
                    name,
                };
                write!(f, "get {} {} {key}", kind.api_version, kind.kind)
            }
            ReadCall::List {
                kind,
                namespace,
                label_selector,
                field_selector,
                ..
            } => {
                write!(f, "list {} {}", kind.api_version, kind.kind)?;
                if let Some(ns) = namespace {
                    write!(f, " in {ns}")?;
                }
                if let Some(l) = label_selector {
                    write!(f, " -l {l}")?;
                }
                if let Some(s) = field_selector {
                    write!(f, " --field-selector {s}")?;
                }
                Ok(())
            }
            ReadCall::Namespaced { kind } => {
                write!(f, "scope of {} {}", kind.api_version, kind.kind)
            }
        }
    }
}

/// An error as a recording keeps it: its reason (`NotFound`, …) and message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorText {
    /// The reason, as [`CallError::reason`] names it.
    pub reason: String,
    /// The message.
    pub message: String,
}

impl From<&CallError> for ErrorText {
    fn from(err: &CallError) -> Self {
        let mut err = err.clone();
        ErrorText {
            reason: err.reason().to_owned(),
            message: std::mem::take(err.message_mut()),
        }
    }
}

impl ErrorText {
    /// The error again (`Other` for a reason this host does not know).
    pub fn error(&self) -> CallError {
        macro_rules! by_reason {
            ($($case:ident),* $(,)?) => {
                match self.reason.as_str() {
                    $(stringify!($case) => CallError::$case(self.message.clone()),)*
                    _ => CallError::Other(self.message.clone()),
                }
            };
        }
        krec_core::with_call_error_cases!(by_reason)
    }
}

/// What a read was answered with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Answer {
    /// One object.
    Object(Json),
    /// A list's items.
    Items(Vec<Json>),
    /// Whether the kind is namespaced.
    Namespaced(bool),
    /// The call failed.
    Error(ErrorText),
}

/// One read and its answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    /// The call.
    #[serde(flatten)]
    pub call: ReadCall,
    /// Its answer.
    pub answer: Answer,
}

/// A write's verb: the manifest's (create, update, update-status, patch, patch-status,
/// delete).
pub use crate::manifest::Verb;

/// The verb of a whole-object write.
pub fn verb_of(kind: WriteKind) -> Verb {
    match kind {
        WriteKind::Create => Verb::Create,
        WriteKind::Update => Verb::Update,
        WriteKind::UpdateStatus => Verb::UpdateStatus,
    }
}

/// A write a guest asked for, and what it got back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Write {
    /// The verb.
    pub verb: Verb,
    /// The kind written.
    #[serde(flatten)]
    pub kind: KindName,
    /// Its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name (absent on a create with `generateName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A patch's `Content-Type`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<String>,
    /// The object or patch sent (a delete's preconditions), as the guest sent it.
    pub body: Json,
    /// The object stored (`null` for a delete), or the error.
    pub answer: Answer,
}

impl Write {
    /// `update apps/v1 Deployment default/web`.
    pub fn target(&self) -> String {
        let key = krec_core::KeyRef {
            namespace: self.namespace.as_deref(),
            name: self.name.as_deref().unwrap_or("(generated name)"),
        };
        format!(
            "{} {} {} {key}",
            self.verb, self.kind.api_version, self.kind.kind
        )
    }
}

/// An Event a guest recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// The object it is about: kind, namespace, name.
    pub regarding: String,
}

impl Event {
    /// An Event as a tape keeps it.
    pub(crate) fn of(event: &EventRecord) -> Self {
        let r = &event.regarding;
        Event {
            event_type: event.event_type.as_str().to_owned(),
            reason: event.reason.clone(),
            message: event.message.clone(),
            regarding: format!(
                "{} {}",
                r.gvk,
                krec_core::KeyRef {
                    namespace: r.namespace.as_deref(),
                    name: &r.name
                }
            ),
        }
    }
}

/// What a reconcile read and did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tape {
    /// Every read, in order.
    #[serde(default)]
    pub reads: Vec<Read>,
    /// Every write, in order.
    #[serde(default)]
    pub writes: Vec<Write>,
    /// Every Event.
    #[serde(default)]
    pub events: Vec<Event>,
    /// The tape was cut at [`MAX_TAPE_BYTES`]: not a whole reconcile (never shadowed nor
    /// recorded).
    #[serde(skip)]
    pub cut: bool,
}

/// The most JSON one reconcile's tape holds (reads' answers and writes' bodies); a reconcile
/// that reads more is neither shadowed nor recorded (counted as skipped or dropped).
pub const MAX_TAPE_BYTES: usize = 16 << 20;

/// How a reconcile ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// `done`.
    Done,
    /// `requeue`.
    Requeue,
    /// `requeue-after`, in milliseconds.
    RequeueAfter(u64),
    /// The guest returned an error.
    Error(ErrorText),
    /// The guest trapped (its cause, e.g. `panic`).
    Trap(String),
}

impl Outcome {
    /// The outcome of a reconcile's result.
    pub fn of(result: &Result<Action, ReconcileError>) -> Self {
        match result {
            Ok(Action::Done) => Outcome::Done,
            Ok(Action::Requeue) => Outcome::Requeue,
            Ok(Action::RequeueAfter(d)) => {
                Outcome::RequeueAfter(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            }
            Err(ReconcileError::Trap { cause, .. }) => Outcome::Trap(cause.as_str().to_owned()),
            Err(ReconcileError::Guest { error, .. }) => Outcome::Error(error.into()),
            Err(err @ ReconcileError::Config { .. }) => Outcome::Error(ErrorText {
                reason: "Invalid".into(),
                message: err.to_string(),
            }),
        }
    }

    /// Whether it is a trap.
    pub fn is_trap(&self) -> bool {
        matches!(self, Outcome::Trap(_))
    }

    /// Whether the guest returned an error.
    pub fn is_error(&self) -> bool {
        matches!(self, Outcome::Error(_))
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Done => f.write_str("done"),
            Outcome::Requeue => f.write_str("requeue"),
            Outcome::RequeueAfter(ms) => write!(f, "requeue-after {ms}ms"),
            Outcome::Error(e) => write!(f, "error {}: {}", e.reason, e.message),
            Outcome::Trap(cause) => write!(f, "trap ({cause})"),
        }
    }
}

/// One reconcile: the request, the clock it ran at, its tape and its outcome (a line of a
/// recording).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reconcile {
    /// Its number in the recording, from 1.
    pub seq: u64,
    /// The request's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The request's name.
    pub name: String,
    /// The wall clock when it started, in milliseconds since the Unix epoch.
    pub clock_ms: u64,
    /// What it read and did.
    #[serde(flatten)]
    pub tape: Tape,
    /// How it ended.
    pub outcome: Outcome,
}

impl Reconcile {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        krec_core::KeyRef {
            namespace: self.namespace.as_deref(),
            name: &self.name,
        }
        .to_string()
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A [`ClusterAccess`] that passes every call on and, while armed, takes each down on its
/// [`Tape`]. One per worker: a worker runs one reconcile at a time, so the tape is that
/// reconcile's.
pub struct Tap {
    inner: Arc<dyn ClusterAccess>,
    armed: AtomicBool,
    tape: Mutex<(Tape, usize)>,
}

impl Tap {
    /// A disarmed tap on `inner`.
    pub fn new(inner: Arc<dyn ClusterAccess>) -> Self {
        Tap {
            inner,
            armed: AtomicBool::new(false),
            tape: Mutex::new((Tape::default(), 0)),
        }
    }

    /// Take calls down (or stop); the tape is emptied either way.
    pub fn arm(&self, armed: bool) {
        self.armed.store(armed, Ordering::Relaxed);
        *self.lock() = (Tape::default(), 0);
    }

    /// Whether calls are taken down.
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    /// Whether the tape was cut at [`MAX_TAPE_BYTES`].
    pub fn is_cut(&self) -> bool {
        self.lock().0.cut
    }

    /// The tape so far, leaving an empty one.
    pub fn take(&self) -> Tape {
        std::mem::take(&mut *self.lock()).0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Tape, usize)> {
        self.tape.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `bytes` more fit on the tape; past the bound it is cut and taking stops.
    fn fits(tape: &mut (Tape, usize), bytes: usize) -> bool {
        tape.1 = tape.1.saturating_add(bytes);
        if tape.1 > MAX_TAPE_BYTES && !tape.0.cut {
            tape.0 = Tape {
                cut: true,
                ..Tape::default()
            };
        }
        !tape.0.cut
    }

    fn read(&self, call: impl FnOnce() -> ReadCall, answer: impl FnOnce() -> Answer) {
        if self.is_armed() {
            let answer = answer();
            let mut tape = self.lock();
            if Self::fits(&mut tape, answer_bytes(&answer)) {
                tape.0.reads.push(Read {
                    call: call(),
                    answer,
                });
            }
        }
    }

    fn wrote(&self, write: impl FnOnce() -> Write) {
        if self.is_armed() {
            let write = write();
            let mut tape = self.lock();
            if Self::fits(&mut tape, write.body.0.len() + answer_bytes(&write.answer)) {
                tape.0.writes.push(write);
            }
        }
    }
}

/// The JSON an answer holds, in bytes.
fn answer_bytes(answer: &Answer) -> usize {
    match answer {
        Answer::Object(json) => json.0.len(),
        Answer::Items(items) => items.iter().map(|j| j.0.len()).sum(),
        Answer::Namespaced(_) => 0,
        Answer::Error(e) => e.message.len(),
    }
}

/// A write of a whole `object`.
#[cfg(test)]
pub(crate) fn object_write(verb: Verb, object: &Value, answer: Answer) -> Write {
    let meta = |field: &str| {
        object
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Write {
        verb,
        kind: KindName {
            api_version: object["apiVersion"].as_str().unwrap_or_default().to_owned(),
            kind: object["kind"].as_str().unwrap_or_default().to_owned(),
        },
        namespace: meta("namespace"),
        name: meta("name"),
        patch_type: None,
        body: Json::of(object),
        answer,
    }
}

/// A patch.
pub(crate) fn patch_write(
    gvk: &Gvk,
    namespace: Option<&str>,
    name: &str,
    patch_type: PatchType,
    body: &Value,
    status: bool,
    answer: Answer,
) -> Write {
    Write {
        verb: if status {
            Verb::PatchStatus
        } else {
            Verb::Patch
        },
        kind: KindName::of(gvk),
        namespace: namespace.map(str::to_owned),
        name: Some(name.to_owned()),
        patch_type: Some(patch_type.content_type().to_owned()),
        body: Json::of(body),
        answer,
    }
}

/// A delete.
pub(crate) fn delete_write(
    gvk: &Gvk,
    namespace: Option<&str>,
    name: &str,
    preconditions: Option<&Preconditions>,
    answer: Answer,
) -> Write {
    let body = match preconditions {
        Some(p) => {
            Json::of(&serde_json::json!({"uid": p.uid, "resourceVersion": p.resource_version}))
        }
        None => Json(Arc::from("null")),
    };
    Write {
        verb: Verb::Delete,
        kind: KindName::of(gvk),
        namespace: namespace.map(str::to_owned),
        name: Some(name.to_owned()),
        patch_type: None,
        body,
        answer,
    }
}

/// What a reply is, in a tape's words (a write's stored object, a delete's `null`).
pub(crate) fn answer_of(result: &Result<Reply, CallError>) -> Answer {
    match result {
        Ok(Reply::Object(json)) => Answer::Object(Json(json.clone())),
        Ok(Reply::Objects(items)) => Answer::Items(items.iter().cloned().map(Json).collect()),
        Ok(Reply::Namespaced(namespaced)) => Answer::Namespaced(*namespaced),
        Ok(Reply::Stored(json)) => Answer::Object(Json(Arc::from(json.as_str()))),
        Ok(Reply::Done) => Answer::Object(Json(Arc::from("null"))),
        Err(err) => Answer::Error(err.into()),
    }
}

/// The kind of reply a request gets, known before the request is handed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expect {
    Object,
    Objects,
    Namespaced,
    Stored,
    Done,
}

impl Expect {
    pub(crate) fn of(request: &Request<'_>) -> Self {
        match request {
            Request::Get(_) => Expect::Object,
            Request::List { .. } => Expect::Objects,
            Request::Namespaced(_) => Expect::Namespaced,
            Request::Write { .. } | Request::Patch { .. } => Expect::Stored,
            Request::Delete { .. } | Request::Event(_) => Expect::Done,
        }
    }
}

impl Answer {
    /// The reply this answer gives to a request that `expects` it.
    ///
    /// # Errors
    ///
    /// The error answered, or `Other` when the answer is of another kind than the call's.
    pub(crate) fn reply(self, expects: Expect) -> Result<Reply, CallError> {
        Ok(match (self, expects) {
            (Answer::Error(err), _) => return Err(err.error()),
            (Answer::Object(json), Expect::Object) => Reply::Object(json.0),
            (Answer::Object(json), Expect::Stored) => Reply::Stored(json.0.to_string()),
            (Answer::Items(items), Expect::Objects) => {
                Reply::Objects(items.into_iter().map(|j| j.0).collect())
            }
            (Answer::Namespaced(namespaced), Expect::Namespaced) => Reply::Namespaced(namespaced),
            (_, Expect::Done) => Reply::Done,
            _ => {
                return Err(CallError::Other(
                    "the recording answers this call with another kind of answer".into(),
                ));
            }
        })
    }
}

/// The read `request` is, as a tape names it (`None`: a write or an Event).
pub(crate) fn read_of(request: &Request<'_>) -> Option<ReadCall> {
    Some(match request {
        Request::Get(target) => ReadCall::get(target.gvk, target.namespace, target.name),
        Request::List { gvk, options } => ReadCall::list(gvk, options),
        Request::Namespaced(gvk) => ReadCall::Namespaced {
            kind: KindName::of(gvk),
        },
        _ => return None,
    })
}

/// The write `request` is, as a tape keeps it, its answer still `null` (`None`: a read or an
/// Event). A whole object is kept as the text the guest sent: parsed only if a comparison
/// needs it (off the live path).
pub(crate) fn write_of(request: &Request<'_>) -> Option<Write> {
    let pending = || Answer::Object(Json(Arc::from("null")));
    Some(match request {
        Request::Write { kind, head, json } => Write {
            verb: verb_of(*kind),
            kind: KindName::of(&head.gvk),
            namespace: head.namespace.clone(),
            name: head.name.clone(),
            patch_type: None,
            body: Json(Arc::from(*json)),
            answer: pending(),
        },
        Request::Patch {
            target,
            patch_type,
            body,
            status,
        } => patch_write(
            target.gvk,
            target.namespace,
            target.name,
            *patch_type,
            body,
            *status,
            pending(),
        ),
        Request::Delete {
            target,
            preconditions,
        } => delete_write(
            target.gvk,
            target.namespace,
            target.name,
            *preconditions,
            pending(),
        ),
        _ => return None,
    })
}

#[async_trait]
impl ClusterAccess for Tap {
    async fn call(&self, request: Request<'_>) -> Result<Reply, CallError> {
        if !self.is_armed() {
            return self.inner.call(request).await;
        }
        if let Request::Event(event) = &request {
            let mut tape = self.lock();
            if Self::fits(&mut tape, event.message.len()) {
                tape.0.events.push(Event::of(event));
            }
        }
        let read = read_of(&request);
        let write = write_of(&request);
        let result = self.inner.call(request).await;
        if let Some(call) = read {
            self.read(|| call, || answer_of(&result));
        } else if let Some(mut write) = write {
            self.wrote(|| {
                write.answer = answer_of(&result);
                write
            });
        }
        result
    }
}
