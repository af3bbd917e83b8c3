//! Objects waiting for a guest's `map` export (watches with `mapByGuest`), coalesced per object.
//!
//! controller-runtime runs a map function inside the event handler, once per event. Here the
//! map runs in the guest, one call at a time, so a burst of events for one object must not
//! queue one call each: like the workqueue, the backlog holds each object once, in the order it
//! first arrived, and keeps two of its states: the newest (whose targets must be reconciled)
//! and the one before the events it holds — the old state of an update, or, when the first
//! event held was a create or delete, that event's state (a deleted object's targets, or
//! targets named by a state a swap's replay sent). States in between were never mapped, so no
//! target acted on them. That costs at most one map call more than the newest state alone and
//! never loses a state controller-runtime's per-event map would have reconciled.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use krec_core::ObjectKey;

use krec_core::Gvk;

/// Which object: its kind and its key.
type Key = (Gvk, ObjectKey);

/// The states of one object to map.
#[derive(Debug)]
pub(super) struct MapJob {
    /// The object's kind.
    pub gvk: Gvk,
    /// The newest state, then (if it differs) the last state mapped before this job's events.
    pub objects: Vec<Arc<str>>,
}

#[derive(Default)]
struct Pending {
    newest: Option<Arc<str>>,
    before: Option<Arc<str>>,
}

#[derive(Default)]
struct Inner {
    order: VecDeque<Key>,
    pending: HashMap<Key, Pending>,
}

/// The backlog: [`push`](Self::push) from event handlers, [`next`](Self::next) from the task
/// that runs the map calls.
#[derive(Default)]
pub(super) struct MapBacklog {
    inner: Mutex<Inner>,
    ready: Notify,
    /// Jobs pushed and not yet [finished](Self::finished): waiting or being mapped.
    unfinished: AtomicUsize,
}

impl MapBacklog {
    /// Record an event: `object` is the new (or, for a delete, last) state; `old` the state
    /// before an update.
    pub fn push(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        object: &Arc<str>,
        old: Option<&Arc<str>>,
    ) {
        let key = (gvk.clone(), ObjectKey::new(namespace, name));
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Inner { order, pending } = &mut *inner;
        match pending.entry(key) {
            Entry::Occupied(mut entry) => {
                let pending = entry.get_mut();
                let previous = pending.newest.replace(object.clone());
                if pending.before.is_none() {
                    pending.before = previous;
                }
            }
            Entry::Vacant(entry) => {
                self.unfinished.fetch_add(1, Ordering::SeqCst);
                order.push_back(entry.key().clone());
                entry.insert(Pending {
                    newest: Some(object.clone()),
                    before: old.cloned(),
                });
            }
        }
        drop(inner);
        self.ready.notify_one();
    }

    /// Take the object that has waited longest, without waiting; call
    /// [`finished`](Self::finished) once it is mapped.
    pub fn pop(&self) -> Option<MapJob> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = inner.order.pop_front()?;
        let pending = inner.pending.remove(&key).unwrap_or_default();
        let mut objects: Vec<Arc<str>> = pending.newest.into_iter().collect();
        if let Some(before) = pending.before
            && !objects.iter().any(|newest| **newest == *before)
        {
            objects.push(before);
        }
        Some(MapJob {
            gvk: key.0,
            objects,
        })
    }

    /// Record that a job [popped](Self::pop) has been mapped and its requests enqueued.
    pub fn finished(&self) {
        self.unfinished.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether every job pushed has [finished](Self::finished): nothing waits or is being mapped.
    pub fn is_idle(&self) -> bool {
        self.unfinished.load(Ordering::SeqCst) == 0
    }

    /// Take the object that has waited longest, waiting for one; call
    /// [`finished`](Self::finished) once it is mapped.
    pub async fn next(&self) -> MapJob {
        loop {
            if let Some(job) = self.pop() {
                return job;
            }
            // `notify_one` stores a permit when nobody waits, so a push between `pop` and
            // here is not missed.
            self.ready.notified().await;
        }
    }

    /// How many objects wait.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .order
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gvk() -> Gvk {
        Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
        }
    }

    fn state(text: &str) -> Arc<str> {
        Arc::from(text)
    }

    #[test]
    fn a_burst_for_one_object_is_one_call_with_the_newest_state_and_the_state_before_it() {
        let backlog = MapBacklog::default();
        let (a, b, c) = (state("a"), state("b"), state("c"));
        backlog.push(&gvk(), Some("ns"), "x", &b, Some(&a));
        backlog.push(&gvk(), Some("ns"), "y", &a, None);
        backlog.push(&gvk(), Some("ns"), "x", &c, Some(&b));
        assert_eq!(backlog.len(), 2);
        let first = backlog.pop().expect("x waits");
        assert_eq!(first.objects, vec![c, a.clone()]);
        let second = backlog.pop().expect("y waits");
        assert_eq!(second.objects, vec![a]);
        assert!(backlog.pop().is_none());
    }

    #[test]
    fn the_backlog_is_idle_only_once_every_job_popped_has_finished() {
        let backlog = MapBacklog::default();
        assert!(backlog.is_idle());
        backlog.push(&gvk(), None, "x", &state("a"), None);
        backlog.push(&gvk(), None, "x", &state("b"), None);
        assert!(!backlog.is_idle(), "waiting");
        let _job = backlog.pop().expect("x waits");
        assert!(
            !backlog.is_idle(),
            "being mapped: its requests are not queued yet"
        );
        backlog.finished();
        assert!(backlog.is_idle());
    }

    #[test]
    fn a_create_then_an_update_before_the_map_maps_both_states() {
        let backlog = MapBacklog::default();
        let (a, b) = (state("a"), state("b"));
        backlog.push(&gvk(), None, "x", &a, None);
        backlog.push(&gvk(), None, "x", &b, Some(&a));
        assert_eq!(backlog.pop().expect("x waits").objects, vec![b, a]);
    }

    #[test]
    fn a_delete_then_a_create_before_the_map_maps_the_deleted_state_too() {
        let backlog = MapBacklog::default();
        let (gone, new) = (state("names t1"), state("names t2"));
        backlog.push(&gvk(), Some("ns"), "x", &gone, None);
        backlog.push(&gvk(), Some("ns"), "x", &new, None);
        assert_eq!(backlog.pop().expect("x waits").objects, vec![new, gone]);
    }

    #[test]
    fn a_change_reverted_before_its_map_maps_the_state_once() {
        let backlog = MapBacklog::default();
        let (a, b) = (state("a"), state("b"));
        backlog.push(&gvk(), None, "x", &b, Some(&a));
        backlog.push(&gvk(), None, "x", &state("a"), Some(&b));
        assert_eq!(backlog.pop().expect("x waits").objects, vec![a]);
    }

    #[test]
    fn objects_of_the_same_name_in_other_namespaces_or_kinds_stay_apart() {
        let backlog = MapBacklog::default();
        let a = state("a");
        let other = Gvk {
            kind: "Secret".into(),
            ..gvk()
        };
        backlog.push(&gvk(), Some("one"), "x", &a, None);
        backlog.push(&gvk(), Some("two"), "x", &a, None);
        backlog.push(&other, Some("one"), "x", &a, None);
        assert_eq!(backlog.len(), 3);
    }

    #[tokio::test]
    async fn next_wakes_for_a_push_made_while_it_waits() {
        let backlog = Arc::new(MapBacklog::default());
        let waiter = tokio::spawn({
            let backlog = backlog.clone();
            async move { backlog.next().await }
        });
        tokio::task::yield_now().await;
        backlog.push(&gvk(), None, "x", &state("a"), None);
        let job = waiter.await.expect("the waiter finishes");
        assert_eq!(job.objects, vec![state("a")]);
    }
}
