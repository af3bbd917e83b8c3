//! [`Replay`]: a [`ClusterAccess`] that answers a guest's reads from a recorded reconcile and
//! keeps its writes instead of applying them.
//!
//! Reads are matched by call (the same `get` or `list` with the same selectors): the answers
//! recorded for a call are served in order, the last one again when the guest reads more often
//! than the recording did. A read the recording lacks goes to the fallback when there is one
//! (the shadow's: the live cache), and is otherwise refused — reported, never invented.
//!
//! A write the recording holds (the same request, normalised) gets its recorded answer. Any
//! other goes to the dry-run client when there is one (the shadow's: validated and admitted by
//! the API server, never stored; sent without `resourceVersion` and delete preconditions, since
//! the live version's own write has moved the object on) and is otherwise answered with the
//! object as written (a patch: the object as last read). Events are kept, never sent.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

use super::compare::normalised;
use super::tape::{
    Answer, Event, Expect, Json, KindName, Read, ReadCall, Reconcile, Tape, Verb, Write, answer_of,
    read_of, write_of,
};
use crate::cluster::client::ApiClient;
use crate::cluster::{ClusterAccess, Reply, Request, Target};
use krec_core::{CallError, PatchType, WriteKind};

/// The recorded answers of one reconcile, as they are served.
#[derive(Default)]
struct Script {
    reads: HashMap<ReadCall, (VecDeque<Answer>, Option<Answer>)>,
    writes: Vec<Option<Write>>,
    /// Every write the recording holds, matched or not: what the live version did to the
    /// world after reading it.
    live_writes: Vec<Write>,
    tape: Tape,
    missing: Vec<String>,
}

/// Writes that go to the API server as dry runs, as the guest's field manager.
#[derive(Clone)]
pub struct DryRun {
    /// The dry-run client.
    pub api: Arc<ApiClient>,
    /// The guest's field manager.
    pub field_manager: String,
}

/// See the [module docs](self).
pub struct Replay {
    script: Mutex<Script>,
    fallback: Option<Arc<dyn ClusterAccess>>,
    dry_run: Option<DryRun>,
}

/// What a replayed reconcile did, and the reads the recording could not answer.
pub struct Played {
    /// Its reads, writes and Events.
    pub tape: Tape,
    /// The reads the recording lacked (and no fallback answered), as `get v1 Pod ns/name`.
    pub missing: Vec<String>,
}

impl Replay {
    /// A replay with no recording loaded yet: reads the recording lacks go to `fallback` (or
    /// are refused), writes it lacks to `dry_run` (or are answered as written).
    pub fn new(fallback: Option<Arc<dyn ClusterAccess>>, dry_run: Option<DryRun>) -> Self {
        Replay {
            script: Mutex::new(Script::default()),
            fallback,
            dry_run,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serve `recorded`'s answers from now on.
    pub fn load(&self, recorded: &Reconcile) {
        let mut script = Script::default();
        for Read { call, answer } in &recorded.tape.reads {
            script
                .reads
                .entry(call.clone())
                .or_default()
                .0
                .push_back(answer.clone());
        }
        script.writes = recorded.tape.writes.iter().cloned().map(Some).collect();
        script.live_writes = recorded.tape.writes.clone();
        *self.lock() = script;
    }

    /// What the reconcile since [`load`](Self::load) did.
    pub fn take(&self) -> Played {
        let script = std::mem::take(&mut *self.lock());
        Played {
            tape: script.tape,
            missing: script.missing,
        }
    }

    /// The recorded answer of `call`, if the recording has one.
    fn recorded(&self, call: &ReadCall) -> Option<Answer> {
        let mut script = self.lock();
        let (queue, last) = script.reads.get_mut(call)?;
        let answer = queue.pop_front().or_else(|| last.clone())?;
        *last = Some(answer.clone());
        Some(answer)
    }

    /// A read's answer: recorded, from the fallback, or refused as missing.
    async fn read(&self, call: ReadCall, request: Request<'_>) -> Answer {
        let answer = match self.recorded(&call) {
            Some(answer) => answer,
            None => match &self.fallback {
                Some(fallback) => answer_of(&fallback.call(request).await),
                None => {
                    let text = call.to_string();
                    self.lock().missing.push(text.clone());
                    Answer::Error(
                        (&CallError::Unavailable(format!(
                            "the recording has no answer for {text} (not invented by a replay)"
                        )))
                            .into(),
                    )
                }
            },
        };
        self.lock().tape.reads.push(Read {
            call,
            answer: answer.clone(),
        });
        answer
    }

    /// The object `target` was last read as, from the recording.
    fn last_seen(&self, kind: &KindName, namespace: Option<&str>, name: &str) -> Option<Json> {
        let script = self.lock();
        let call = ReadCall::Get {
            kind: kind.clone(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        };
        match script.reads.get(&call) {
            Some((_, Some(Answer::Object(json)))) => Some(json.clone()),
            _ => None,
        }
    }

    /// The answer of a candidate's `write` that a dry run would judge against the live
    /// version's own write of the same object in this reconcile instead of the world the live
    /// version read: a create after the live version created it (the server would answer
    /// `AlreadyExists`), any write after the live version deleted it (`NotFound`). Answered
    /// from the tape: a create as the object written with the server's fields of the live
    /// version's answer, a delete as done, an update as written, a patch as the object last
    /// read.
    fn after_live_write(&self, write: &Write) -> Option<Answer> {
        let live = self
            .lock()
            .live_writes
            .iter()
            .find(|live| {
                live.kind == write.kind
                    && live.namespace == write.namespace
                    && live.name.is_some()
                    && live.name == write.name
                    && !matches!(live.answer, Answer::Error(_))
                    && (live.verb == Verb::Delete
                        || (live.verb == Verb::Create && write.verb == Verb::Create))
            })?
            .clone();
        let answer = match write.verb {
            Verb::Create => {
                let mut object = write.body.value();
                if let (Some(meta), Answer::Object(stored)) = (
                    object.get_mut("metadata").and_then(Value::as_object_mut),
                    &live.answer,
                ) {
                    let stored = stored.value();
                    for field in ["uid", "resourceVersion", "creationTimestamp", "generation"] {
                        if let Some(value) = stored.pointer(&format!("/metadata/{field}")) {
                            meta.insert(field.to_owned(), value.clone());
                        }
                    }
                }
                Answer::Object(Json::of(&object))
            }
            Verb::Delete => Answer::Object(Json(Arc::from("null"))),
            Verb::Patch | Verb::PatchStatus => {
                let name = write.name.as_deref()?;
                let seen = self.last_seen(&write.kind, write.namespace.as_deref(), name);
                Answer::Object(seen.unwrap_or_else(|| write.body.clone()))
            }
            _ => Answer::Object(write.body.clone()),
        };
        Some(answer)
    }

    /// The answer of `write` (`request` as the tape keeps it): recorded, from a dry run, or
    /// the object as written.
    async fn write(&self, mut write: Write, request: Request<'_>) -> Answer {
        let recorded = {
            let mut script = self.lock();
            let same_request =
                |w: &Write| w.target() == write.target() && w.patch_type == write.patch_type;
            // The same text first (nothing to parse), then the same body normalised.
            let position = script
                .writes
                .iter()
                .position(|w| {
                    w.as_ref()
                        .is_some_and(|w| same_request(w) && w.body == write.body)
                })
                .or_else(|| {
                    let body = normalised(&write.body.value());
                    script.writes.iter().position(|w| {
                        w.as_ref()
                            .is_some_and(|w| same_request(w) && normalised(&w.body.value()) == body)
                    })
                });
            position.and_then(|i| script.writes[i].take())
        };
        let answer = match (recorded, &self.dry_run) {
            (Some(recorded), _) => recorded.answer,
            (None, _) if let Some(answer) = self.after_live_write(&write) => answer,
            (None, Some(dry_run)) => answer_of(&dry_run.send(request).await),
            (None, None) => match write.verb {
                Verb::Delete => Answer::Object(Json(Arc::from("null"))),
                Verb::Patch | Verb::PatchStatus => {
                    let seen = write.name.as_deref().and_then(|name| {
                        self.last_seen(&write.kind, write.namespace.as_deref(), name)
                    });
                    Answer::Object(seen.unwrap_or_else(|| write.body.clone()))
                }
                _ => Answer::Object(write.body.clone()),
            },
        };
        write.answer = answer.clone();
        self.lock().tape.writes.push(write);
        answer
    }
}

/// `object` without `metadata.resourceVersion`: a dry run of a write based on what the live
/// version read, after the live version's own write moved the object on.
fn unconditional(mut object: Value) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    object
}

impl DryRun {
    /// `request` (a write) as a dry run, without the preconditions the live version's own
    /// write has made stale.
    async fn send(&self, request: Request<'_>) -> Result<Reply, CallError> {
        let fm = &self.field_manager;
        let stored = match request {
            Request::Write { kind, json, .. } => {
                let object: Value = serde_json::from_str(json)
                    .map_err(|e| CallError::Invalid(format!("object is not valid JSON: {e}")))?;
                match kind {
                    WriteKind::Create => self.api.create(&object, fm).await?,
                    WriteKind::Update | WriteKind::UpdateStatus => {
                        let status = kind == WriteKind::UpdateStatus;
                        self.api.update(&unconditional(object), status, fm).await?
                    }
                }
            }
            Request::Patch {
                target,
                patch_type,
                body,
                status,
            } => {
                let body = match patch_type {
                    PatchType::Json => body,
                    _ => unconditional(body),
                };
                let Target {
                    gvk,
                    namespace,
                    name,
                } = target;
                self.api
                    .patch(gvk, namespace, name, patch_type, &body, status, fm)
                    .await?
            }
            Request::Delete { target, .. } => {
                let Target {
                    gvk,
                    namespace,
                    name,
                } = target;
                self.api.delete(gvk, namespace, name, None).await?;
                return Ok(Reply::Done);
            }
            _ => return Err(CallError::Other("a dry run of a read".into())),
        };
        Ok(Reply::Stored(stored.to_string()))
    }
}

#[async_trait]
impl ClusterAccess for Replay {
    async fn call(&self, request: Request<'_>) -> Result<Reply, CallError> {
        let expects = Expect::of(&request);
        if let Request::Event(event) = &request {
            self.lock().tape.events.push(Event::of(event));
            return Ok(Reply::Done);
        }
        let answer = if let Some(call) = read_of(&request) {
            self.read(call, request).await
        } else if let Some(write) = write_of(&request) {
            self.write(write, request).await
        } else {
            return Err(CallError::Other("a call neither read nor write".into()));
        };
        answer.reply(expects)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ClusterCalls;
    use crate::rollout::tape::{Outcome, object_write};
    use krec_core::Gvk;
    use serde_json::json;

    fn pod(name: &str, rv: &str, label: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "resourceVersion": rv,
                "labels": {"app": label}}})
    }

    fn recorded() -> Reconcile {
        let gvk = Gvk::new("", "v1", "Pod");
        let get = |rv: &str| Read {
            call: ReadCall::Get {
                kind: KindName::of(&gvk),
                namespace: Some("default".into()),
                name: "web".into(),
            },
            answer: Answer::Object(Json::of(&pod("web", rv, "a"))),
        };
        let mut update = object_write(
            Verb::Update,
            &pod("web", "1", "b"),
            Answer::Object(Json(Arc::from("null"))),
        );
        update.answer = Answer::Object(Json::of(&pod("web", "2", "b")));
        Reconcile {
            seq: 1,
            namespace: Some("default".into()),
            name: "web".into(),
            clock_ms: 0,
            tape: Tape {
                reads: vec![get("1"), get("2")],
                writes: vec![update],
                ..Tape::default()
            },
            outcome: Outcome::Done,
        }
    }

    #[tokio::test]
    async fn reads_should_be_served_in_order_then_the_last_again_and_missing_ones_refused() {
        let replay = Replay::new(None, None);
        replay.load(&recorded());
        let gvk = Gvk::new("", "v1", "Pod");
        let rv = |v: Value| v["metadata"]["resourceVersion"].clone();
        for expected in ["1", "2", "2"] {
            let got = replay.get(&gvk, Some("default"), "web").await.expect("get");
            assert_eq!(rv(got), json!(expected));
        }
        let err = replay
            .get(&gvk, Some("default"), "other")
            .await
            .expect_err("not recorded");
        assert!(
            err.to_string().contains("get v1 Pod default/other"),
            "{err}"
        );
        let played = replay.take();
        assert_eq!(played.missing, ["get v1 Pod default/other"]);
        assert_eq!(played.tape.reads.len(), 4);
    }

    #[tokio::test]
    async fn a_create_after_the_live_versions_own_should_be_answered_from_the_tape() {
        let mut recorded = recorded();
        let mut create = object_write(
            Verb::Create,
            &pod("copy", "", "a"),
            Answer::Object(Json(Arc::from("null"))),
        );
        let mut stored = pod("copy", "7", "a");
        stored["metadata"]["uid"] = json!("u-1");
        create.answer = Answer::Object(Json::of(&stored));
        recorded.tape.writes = vec![create];
        let replay = Replay::new(None, None);
        replay.load(&recorded);
        // Another body (a label changed): not the live request, yet the object exists only
        // because the live version created it.
        let answer = replay
            .create(pod("copy", "", "b"))
            .await
            .expect("answered from the tape, not AlreadyExists");
        assert_eq!(answer["metadata"]["uid"], "u-1");
        assert_eq!(
            answer["metadata"]["labels"]["app"], "b",
            "as the candidate wrote it"
        );
    }

    #[tokio::test]
    async fn a_recorded_write_should_get_its_answer_and_another_the_object_as_written() {
        let replay = Replay::new(None, None);
        replay.load(&recorded());
        // The same write, another resourceVersion: normalised, the same request.
        let stored = replay
            .update(pod("web", "9", "b"), false)
            .await
            .expect("update");
        assert_eq!(
            stored["metadata"]["resourceVersion"], "2",
            "the recorded answer"
        );
        let other = replay
            .update(pod("web", "1", "c"), false)
            .await
            .expect("update");
        assert_eq!(
            other["metadata"]["labels"]["app"], "c",
            "answered as written"
        );
        let played = replay.take();
        assert_eq!(played.tape.writes.len(), 2);
        let compared = crate::rollout::compare::compare(
            &recorded(),
            &Reconcile {
                tape: played.tape,
                ..recorded()
            },
        );
        assert_eq!(
            compared.lines,
            ["write 2: candidate update v1 Pod default/web, live made no such write"]
        );
    }
}
