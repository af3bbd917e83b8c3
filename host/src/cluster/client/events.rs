//! Event aggregation, as client-go's `EventCorrelator` does it: repeats of one Event update the
//! Event already written instead of creating another, and each reporter's Events about one
//! object are rate limited.
//!
//! - **Repeats** — the same reporter, object (kind, namespace, name, UID), type, reason and
//!   message — are counted into the Event first written for them: its `count` grows and its
//!   `lastTimestamp` moves, by a merge patch (client-go's `eventObserve`). Up to
//!   [`MAX_TRACKED`] distinct Events are remembered, the least recently seen forgotten first.
//! - **Rate limit**: each reporter may write [`BURST`] Events (creates or patches) about one
//!   object at once, then one every [`REFILL`] — client-go's spam filter (25, then one per 5
//!   minutes). Unlike client-go, a repeat that arrives while the bucket is empty is not lost: its
//!   count is written with the object's next write, and a pending count is written as soon as a
//!   token is free even if no new repeat arrives.
//! - An Event deleted meanwhile (Events expire after an hour) is created again with the count
//!   so far.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use krec_core::{CallError, EventRecord};

/// Events written at once per reporter and object (client-go's `defaultSpamBurst`).
pub const BURST: u32 = 25;
/// Time for one more write once the burst is spent (client-go's `defaultSpamQPS`, 1/300).
pub const REFILL: Duration = Duration::from_secs(300);
/// Distinct Events remembered for aggregation (client-go's `maxLruCacheEntries`).
pub const MAX_TRACKED: usize = 4096;

/// Where Events are written: the API server, or a fake in tests.
#[async_trait::async_trait]
pub trait EventWriter: Send + Sync {
    /// Create `event` (a `v1 Event`) as `field_manager`; returns the created object.
    async fn create_event(&self, event: &Value, field_manager: &str) -> Result<Value, CallError>;
    /// Merge-patch the Event `namespace/name` as `field_manager`.
    async fn patch_event(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
        field_manager: &str,
    ) -> Result<Value, CallError>;
}

/// How many writes an Event recorder allows; see the module's documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Writes at once per reporter and object.
    pub burst: u32,
    /// Time to earn one more write.
    pub refill: Duration,
    /// Distinct Events remembered.
    pub tracked: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            burst: BURST,
            refill: REFILL,
            tracked: MAX_TRACKED,
        }
    }
}

/// One distinct Event: what makes two records repeats of each other.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EventKey {
    object: Subject,
    event_type: &'static str,
    reason: String,
    message: String,
}

/// A reporter and the object it reports about: what the rate limit is kept for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Subject {
    reporter: String,
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
    uid: Option<String>,
}

/// What is known of one distinct Event.
#[derive(Debug)]
struct Seen {
    /// The Event written for it (namespace, name), once created.
    written: Option<(String, String)>,
    /// Times it was recorded.
    count: u64,
    /// `count` as last written.
    count_written: u64,
    first_timestamp: String,
    last_timestamp: String,
    /// A task is waiting for a token to write the count.
    flush_pending: bool,
}

/// A token bucket per reporter and object.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

#[derive(Debug, Default)]
struct State {
    /// Each Event with the tick it was last seen at.
    events: HashMap<EventKey, (u64, Arc<tokio::sync::Mutex<Seen>>)>,
    /// Keys by the tick they were seen at, oldest first; an entry whose tick is not its key's
    /// latest is stale.
    order: VecDeque<(u64, EventKey)>,
    tick: u64,
    buckets: HashMap<Subject, Bucket>,
}

/// Records Events through an [`EventWriter`], aggregating repeats and rate limiting writes.
/// Cheap to clone (shared state).
#[derive(Clone)]
pub struct EventRecorder {
    writer: Arc<dyn EventWriter>,
    limits: Limits,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// What recording one Event did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// A new Event was created.
    Created,
    /// An earlier Event's count was raised to this.
    Counted(u64),
    /// Counted (to this), to be written when the rate limit allows.
    Deferred(u64),
}

fn now_text() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

impl EventRecorder {
    /// A recorder writing through `writer` within `limits`.
    pub fn new(writer: Arc<dyn EventWriter>, limits: Limits) -> Self {
        EventRecorder {
            writer,
            limits,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update leaves the maps whole: usable after a panic elsewhere.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record `event`: create it, count it into the Event written for an earlier repeat, or
    /// count it for a later write when its reporter's writes about the object are over the rate
    /// limit.
    ///
    /// # Errors
    ///
    /// The API server's refusal of a create or patch (the count stays recorded).
    pub async fn record(&self, event: &EventRecord) -> Result<Recorded, CallError> {
        let r = &event.regarding;
        let object = Subject {
            reporter: event.reporter.clone(),
            api_version: r.gvk.api_version(),
            kind: r.gvk.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
        };
        let key = EventKey {
            object: object.clone(),
            event_type: event.event_type.as_str(),
            reason: event.reason.clone(),
            message: event.message.clone(),
        };
        let entry = self.seen(&key);
        let mut seen = entry.lock().await;
        seen.count += 1;
        seen.last_timestamp = now_text();
        if !self.take_token(&object) {
            let count = seen.count;
            if !seen.flush_pending {
                seen.flush_pending = true;
                self.flush_later(object, entry.clone(), event.clone());
            }
            return Ok(Recorded::Deferred(count));
        }
        self.write(&mut seen, event).await
    }

    /// The entry for `key`, new or remembered, now the most recently seen.
    fn seen(&self, key: &EventKey) -> Arc<tokio::sync::Mutex<Seen>> {
        let tracked = self.limits.tracked.max(1);
        let mut state = self.state();
        state.tick += 1;
        let tick = state.tick;
        state.order.push_back((tick, key.clone()));
        let seen = match state.events.get_mut(key) {
            Some((seen_at, seen)) => {
                *seen_at = tick;
                seen.clone()
            }
            None => {
                let now = now_text();
                let seen = Arc::new(tokio::sync::Mutex::new(Seen {
                    written: None,
                    count: 0,
                    count_written: 0,
                    first_timestamp: now.clone(),
                    last_timestamp: now,
                    flush_pending: false,
                }));
                state.events.insert(key.clone(), (tick, seen.clone()));
                seen
            }
        };
        // Forget the least recently seen beyond the limit.
        while state.events.len() > tracked {
            let Some((at, oldest)) = state.order.pop_front() else {
                break;
            };
            if state
                .events
                .get(&oldest)
                .is_some_and(|(last, _)| *last == at)
            {
                state.events.remove(&oldest);
            }
        }
        // Drop stale order entries now and then, so repeats do not grow it without bound.
        if state.order.len() > 2 * tracked {
            let State { events, order, .. } = &mut *state;
            order.retain(|(at, k)| events.get(k).is_some_and(|(last, _)| last == at));
        }
        // Buckets of objects no Event is remembered for go with them.
        if state.buckets.len() > tracked {
            let live: std::collections::HashSet<Subject> =
                state.events.keys().map(|k| k.object.clone()).collect();
            state.buckets.retain(|k, _| live.contains(k));
        }
        seen
    }

    /// Take a write token for `object`, if one is free.
    fn take_token(&self, object: &Subject) -> bool {
        let mut state = self.state();
        let now = Instant::now();
        let burst = f64::from(self.limits.burst.max(1));
        let bucket = state.buckets.entry(object.clone()).or_insert(Bucket {
            tokens: burst,
            updated: now,
        });
        let earned = now.duration_since(bucket.updated).as_secs_f64()
            / self.limits.refill.as_secs_f64().max(f64::MIN_POSITIVE);
        bucket.tokens = (bucket.tokens + earned).min(burst);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// When `object`'s next token is free.
    fn next_token_in(&self, object: &Subject) -> Duration {
        let state = self.state();
        let Some(bucket) = state.buckets.get(object) else {
            return Duration::ZERO;
        };
        let missing = (1.0 - bucket.tokens).max(0.0);
        self.limits
            .refill
            .mul_f64(missing)
            .saturating_sub(bucket.updated.elapsed())
    }

    /// Write the count of `seen` (an Event about `object`) once a token is free. The task
    /// holds the entry itself, so a count held back is written even if the entry is forgotten
    /// meanwhile; a failed write is tried again with the next token, a few times.
    fn flush_later(
        &self,
        object: Subject,
        seen: Arc<tokio::sync::Mutex<Seen>>,
        event: EventRecord,
    ) {
        /// Writes tried for one held-back count before it waits for the next repeat.
        const ATTEMPTS: u32 = 5;
        let recorder = self.clone();
        // On the host's runtime: the count is written even if the guest's threads stop.
        crate::process::threads::spawn_home(async move {
            for attempt in 1..=ATTEMPTS {
                loop {
                    tokio::time::sleep(recorder.next_token_in(&object)).await;
                    if recorder.take_token(&object) {
                        break;
                    }
                }
                let mut seen = seen.lock().await;
                if seen.count <= seen.count_written {
                    seen.flush_pending = false;
                    return;
                }
                match recorder.write(&mut seen, &event).await {
                    Ok(_) => {
                        seen.flush_pending = false;
                        return;
                    }
                    Err(err) if attempt == ATTEMPTS => {
                        seen.flush_pending = false;
                        tracing::warn!(target: "krec::client", guest = %event.reporter, "writing the count of Event {}: {err}; the next repeat writes it", event.reason);
                    }
                    Err(err) => {
                        tracing::debug!(target: "krec::client", guest = %event.reporter, "writing the count of Event {}: {err}; trying again", event.reason);
                    }
                }
            }
        });
    }

    /// Create the Event, or patch its count and last timestamp.
    async fn write(&self, seen: &mut Seen, event: &EventRecord) -> Result<Recorded, CallError> {
        if let Some((namespace, name)) = &seen.written {
            let patch = json!({
                "count": seen.count,
                "lastTimestamp": seen.last_timestamp,
            });
            match self
                .writer
                .patch_event(namespace, name, &patch, &event.reporter)
                .await
            {
                Ok(_) => {
                    seen.count_written = seen.count;
                    return Ok(Recorded::Counted(seen.count));
                }
                // Deleted meanwhile (expired): create it again with the count so far.
                Err(CallError::NotFound(_)) => seen.written = None,
                Err(err) => return Err(err),
            }
        }
        let created = self
            .writer
            .create_event(&event_object(event, seen), &event.reporter)
            .await?;
        let meta = &created["metadata"];
        if let (Some(namespace), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str()) {
            seen.written = Some((namespace.to_owned(), name.to_owned()));
        }
        seen.count_written = seen.count;
        Ok(Recorded::Created)
    }
}

/// The `v1 Event` for `event`, with `seen`'s count and timestamps.
fn event_object(event: &EventRecord, seen: &Seen) -> Value {
    let regarding = &event.regarding;
    // Events about cluster-scoped objects live in `default`, as client-go puts them.
    let namespace = regarding.namespace.as_deref().unwrap_or("default");
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": format!("{}.", regarding.name), "namespace": namespace},
        "involvedObject": {
            "apiVersion": regarding.gvk.api_version(),
            "kind": regarding.gvk.kind,
            "namespace": regarding.namespace,
            "name": regarding.name,
            "uid": regarding.uid,
        },
        "type": event.event_type.as_str(),
        "reason": event.reason,
        "message": event.message,
        "source": {"component": event.reporter},
        "reportingComponent": event.reporter,
        "firstTimestamp": seen.first_timestamp,
        "lastTimestamp": seen.last_timestamp,
        "count": seen.count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use krec_core::{EventType, Gvk, ObjectReference};

    /// Events kept in memory, with the writes made.
    #[derive(Default)]
    struct Fake {
        events: Mutex<Vec<Value>>,
        creates: Mutex<u32>,
        patches: Mutex<u32>,
    }

    #[async_trait::async_trait]
    impl EventWriter for Fake {
        async fn create_event(&self, event: &Value, _: &str) -> Result<Value, CallError> {
            let mut events = self.events.lock().expect("lock");
            let mut event = event.clone();
            event["metadata"]["name"] = json!(format!("e{}", events.len()));
            events.push(event.clone());
            *self.creates.lock().expect("lock") += 1;
            Ok(event)
        }

        async fn patch_event(
            &self,
            _namespace: &str,
            name: &str,
            patch: &Value,
            _: &str,
        ) -> Result<Value, CallError> {
            let mut events = self.events.lock().expect("lock");
            let Some(event) = events.iter_mut().find(|e| e["metadata"]["name"] == name) else {
                return Err(CallError::NotFound(name.into()));
            };
            json_patch::merge(event, patch);
            *self.patches.lock().expect("lock") += 1;
            Ok(event.clone())
        }
    }

    fn failing(message: &str) -> EventRecord {
        EventRecord {
            regarding: ObjectReference {
                gvk: Gvk::new("apps", "v1", "Deployment"),
                namespace: Some("default".into()),
                name: "web".into(),
                uid: Some("u-1".into()),
            },
            event_type: EventType::Warning,
            reason: "ReconcileFailed".into(),
            message: message.into(),
            reporter: "guest".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hundred_repeats_should_make_one_event_counting_a_hundred() {
        let fake = Arc::new(Fake::default());
        let recorder = EventRecorder::new(fake.clone(), Limits::default());
        for _ in 0..100 {
            recorder.record(&failing("boom")).await.expect("record");
        }
        // The burst is written at once, the rest counted for later.
        assert_eq!(*fake.creates.lock().expect("lock"), 1);
        assert_eq!(*fake.patches.lock().expect("lock"), 24);
        assert_eq!(fake.events.lock().expect("lock")[0]["count"], 25);
        // A token is free after REFILL: the pending count is written with no new repeat.
        tokio::time::sleep(REFILL + Duration::from_secs(1)).await;
        let events = fake.events.lock().expect("lock").clone();
        assert_eq!(events.len(), 1, "one Event object");
        assert_eq!(events[0]["count"], 100);
        assert_eq!(*fake.patches.lock().expect("lock"), 25);
    }

    #[tokio::test(start_paused = true)]
    async fn different_messages_reasons_and_objects_should_be_different_events() {
        let fake = Arc::new(Fake::default());
        let recorder = EventRecorder::new(fake.clone(), Limits::default());
        recorder.record(&failing("a")).await.expect("record");
        recorder.record(&failing("b")).await.expect("record");
        let mut other = failing("a");
        other.reason = "Other".into();
        recorder.record(&other).await.expect("record");
        let mut elsewhere = failing("a");
        elsewhere.regarding.name = "api".into();
        recorder.record(&elsewhere).await.expect("record");
        assert_eq!(
            recorder.record(&failing("a")).await.expect("record"),
            Recorded::Counted(2)
        );
        assert_eq!(fake.events.lock().expect("lock").len(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_event_should_be_created_again_with_its_count() {
        let fake = Arc::new(Fake::default());
        let recorder = EventRecorder::new(fake.clone(), Limits::default());
        recorder.record(&failing("boom")).await.expect("record");
        recorder.record(&failing("boom")).await.expect("record");
        fake.events.lock().expect("lock").clear();
        assert_eq!(
            recorder.record(&failing("boom")).await.expect("record"),
            Recorded::Created
        );
        assert_eq!(fake.events.lock().expect("lock")[0]["count"], 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_count_held_back_should_be_written_even_if_its_event_is_forgotten() {
        let fake = Arc::new(Fake::default());
        let limits = Limits {
            burst: 1,
            tracked: 1,
            ..Limits::default()
        };
        let recorder = EventRecorder::new(fake.clone(), limits);
        for _ in 0..3 {
            recorder.record(&failing("a")).await.expect("record");
        }
        // Another Event pushes "a" out of the remembered ones while its count waits.
        let mut other = failing("b");
        other.regarding.name = "api".into();
        recorder.record(&other).await.expect("record");
        assert_eq!(recorder.state().events.len(), 1);
        tokio::time::sleep(REFILL + Duration::from_secs(1)).await;
        let events = fake.events.lock().expect("lock").clone();
        let a = events.iter().find(|e| e["message"] == "a").expect("a");
        assert_eq!(a["count"], 3);
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_events_should_be_forgotten_beyond_the_limit() {
        let fake = Arc::new(Fake::default());
        let limits = Limits {
            tracked: 2,
            ..Limits::default()
        };
        let recorder = EventRecorder::new(fake.clone(), limits);
        for message in ["a", "b", "a", "c", "a"] {
            recorder.record(&failing(message)).await.expect("record");
        }
        // "b" was the least recently seen when "c" came: forgotten; "a" is still counted.
        assert_eq!(recorder.state().events.len(), 2);
        assert_eq!(
            recorder.record(&failing("a")).await.expect("record"),
            Recorded::Counted(4)
        );
        assert_eq!(
            recorder.record(&failing("b")).await.expect("record"),
            Recorded::Created
        );
    }
}
