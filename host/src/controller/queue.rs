//! [`WorkQueue`]: the per-guest workqueue of reconcile requests — dedup, one key at a time,
//! rate-limited retries and delayed re-adds — with client-go's workqueue semantics.
//!
//! # Guarantees
//!
//! - **Fair between namespaces, FIFO within one**: keys of one [flow](Flow) — for objects, one
//!   namespace; cluster-scoped objects form a flow of their own — are handed out in the order
//!   they were (first) added; flows with ready keys take turns, one key each. A namespace that
//!   enqueues ten thousand keys delays another namespace's next key by one key, not ten
//!   thousand (the fairness controller-runtime's workqueue lacks; its open PR #3261 asks for it).
//! - **Dedup**: a key added many times before a worker takes it is handed out once.
//! - **One at a time**: a key handed out is not handed out again until [`done`](WorkQueue::done)
//!   is called for it, however many workers call [`get`](WorkQueue::get).
//! - **Not lost while processing**: a key added while it is being processed is handed out once
//!   more after [`done`](WorkQueue::done).
//! - **Rate-limited retries**: [`add_rate_limited`](WorkQueue::add_rate_limited) delays a key by
//!   the larger of its own exponential backoff (`base_delay · 2^failures`, capped at
//!   `max_delay`) and the delay the queue-wide token bucket (`qps`, `burst`) imposes;
//!   [`forget`](WorkQueue::forget) resets the key's backoff.
//! - **Delayed adds**: [`add_after`](WorkQueue::add_after) adds a key once its delay has passed;
//!   of several pending delays for one key the earliest wins.
//! - **Why a key is there**: every add carries a [`Cause`] — its [`Trigger`] (a watch event of
//!   the `for` kind, an owned or mapped object's, a ticker, the resync, a requeue, a retry, the
//!   manual trigger) and, for an event, when it was received; [`get_caused`](WorkQueue::get_caused)
//!   hands out with the key the cause that made it ready: the first, when several adds were
//!   deduplicated; carried over when the key was being processed; a delayed add's, once due.
//!   A reconcile's trace names it, and the event's instant gives the event-to-guest latency.
//! - **Shutdown**: after [`shutdown`](WorkQueue::shutdown) no new keys are accepted and
//!   [`get`](WorkQueue::get) returns `None`; keys already handed out are finished by their
//!   workers, and [`drained`](WorkQueue::drained) waits for that.
//!
//! Time is tokio's, so tests drive it with `tokio::time::pause`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hash, RandomState};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Rate limiting of retries: per-key exponential backoff and an overall token bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimit {
    /// First retry delay of a failing key.
    pub base_delay: Duration,
    /// Cap of the per-key delay.
    pub max_delay: Duration,
    /// Rate-limited adds per second, overall.
    pub qps: f64,
    /// Token bucket size.
    pub burst: u32,
}

impl Default for RateLimit {
    /// client-go's defaults: 5 ms → 1000 s per key, 10 qps with a burst of 100 overall.
    fn default() -> Self {
        RateLimit {
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(1000),
            qps: 10.0,
            burst: 100,
        }
    }
}

/// A token bucket that hands out reservations, like Go's `rate.Limiter.Reserve`: a reservation
/// always succeeds and says how long to wait.
#[derive(Debug)]
struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    updated: Instant,
}

impl TokenBucket {
    fn new(qps: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps: qps.max(f64::MIN_POSITIVE),
            burst,
            tokens: burst,
            updated: now,
        }
    }

    /// Take one token; the delay until it is really available.
    fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.updated = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

pub use crate::process::metrics::QueueObserver;

/// Which fairness flow a key belongs to: keys of one flow are handed out in the order they were
/// added; flows with ready keys take turns (see the [module docs](self)).
pub trait Flow {
    /// The flow's name; every key of `None` is in one flow.
    fn flow(&self) -> Option<&str>;
}

/// An object's flow is its namespace: one tenant's flood does not starve the others' keys.
impl Flow for krec_core::ObjectKey {
    fn flow(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
}

/// A ready key: the key, when it entered the queue, and its cause.
type Entry<K> = (K, Instant, Cause);

/// The keys ready to be handed out, one FIFO per flow, the flows with keys taking turns.
///
/// Flows are told apart by a hash of their name (keyed randomly per queue, so that no
/// namespace can be named to share another's turns); two flows whose hashes met would only
/// share one turn — no key is lost or reordered within its flow.
struct Ready<K> {
    flows: HashMap<u64, VecDeque<Entry<K>>, BuildHasherDefault<FlowIdHasher>>,
    /// Emptied flows' deques, kept small, for the next flows (a flow holding one key at a time
    /// would otherwise allocate at every add).
    spare: Vec<VecDeque<Entry<K>>>,
    /// The flows with keys, in the order of their turns.
    turns: VecDeque<u64>,
    len: usize,
    hasher: RandomState,
    /// Bytes freed by shrinking or dropping flows, not yet reported.
    freed: usize,
}

/// Most emptied deques [`Ready`] keeps for reuse.
const SPARE_FLOWS: usize = 8;

/// The hasher of flow ids, which are hashes already.
#[derive(Default)]
struct FlowIdHasher(u64);

impl std::hash::Hasher for FlowIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id;
    }
}

impl<K: Flow> Ready<K> {
    fn new() -> Self {
        Ready {
            flows: HashMap::default(),
            spare: Vec::new(),
            turns: VecDeque::new(),
            len: 0,
            hasher: RandomState::new(),
            freed: 0,
        }
    }

    fn push_back(&mut self, entry: Entry<K>) {
        let id = self.hasher.hash_one(entry.0.flow());
        let spare = &mut self.spare;
        let flow = self
            .flows
            .entry(id)
            .or_insert_with(|| spare.pop().unwrap_or_default());
        if flow.is_empty() {
            self.turns.push_back(id);
        }
        flow.push_back(entry);
        self.len += 1;
    }

    /// The next key of the flow whose turn it is; that flow goes to the back of the turns.
    fn pop_front(&mut self) -> Option<Entry<K>> {
        let id = self.turns.pop_front()?;
        let flow = self.flows.get_mut(&id)?;
        let entry = flow.pop_front();
        if flow.is_empty() {
            if let Some(flow) = self.flows.remove(&id) {
                if self.spare.len() < SPARE_FLOWS && flow.capacity() <= KEEP_CAPACITY {
                    self.spare.push(flow);
                } else {
                    self.freed += flow.capacity() * std::mem::size_of::<Entry<K>>();
                }
            }
        } else {
            if sparse(flow.len(), flow.capacity()) {
                let before = flow.capacity();
                flow.shrink_to((2 * flow.len()).max(KEEP_CAPACITY));
                self.freed += (before - flow.capacity()) * std::mem::size_of::<Entry<K>>();
            }
            self.turns.push_back(id);
        }
        self.len -= usize::from(entry.is_some());
        entry
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.flows.values().map(VecDeque::capacity).sum()
    }

    fn clear(&mut self) {
        self.flows.clear();
        self.turns.clear();
        self.len = 0;
    }

    /// Bytes given back since the last call, shrinking the turns and the flows' map when sparse.
    fn take_freed(&mut self) -> usize {
        let mut freed = std::mem::take(&mut self.freed);
        if sparse(self.turns.len(), self.turns.capacity()) {
            let before = self.turns.capacity();
            self.turns
                .shrink_to((2 * self.turns.len()).max(KEEP_CAPACITY));
            freed += (before - self.turns.capacity()) * std::mem::size_of::<u64>();
        }
        if sparse(self.flows.len(), self.flows.capacity()) {
            let before = self.flows.capacity();
            self.flows
                .shrink_to((2 * self.flows.len()).max(KEEP_CAPACITY));
            freed += (before - self.flows.capacity()) * entry_size(&self.flows);
        }
        freed
    }
}

/// What queued a key, as a reconcile's trace names it (`krec.trigger`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Trigger {
    /// A watch event on an object of the guest's `for` kind.
    Event,
    /// A watch event on an object the guest owns (`owns`, or a `watches` entry mapping to the
    /// owner), for its owner.
    Owner,
    /// A watch event mapped by a `watches` entry (a fixed request, a label, an annotation, the
    /// namespace) or by the guest's `map` export.
    Map,
    /// One of the guest's `tickers`.
    Ticker,
    /// The `resyncPeriod`.
    Resync,
    /// The last reconcile asked to be requeued (with the key's backoff).
    Requeue,
    /// The last reconcile asked to be requeued after a delay.
    RequeueAfter,
    /// The last reconcile failed or trapped: retried with backoff.
    Retry,
    /// Added by hand: the manual trigger, a test.
    #[default]
    Manual,
}

impl Trigger {
    /// The trigger's name in traces.
    pub fn label(self) -> &'static str {
        match self {
            Trigger::Event => "event",
            Trigger::Owner => "owner",
            Trigger::Map => "map",
            Trigger::Ticker => "ticker",
            Trigger::Resync => "resync",
            Trigger::Requeue => "requeue",
            Trigger::RequeueAfter => "requeue_after",
            Trigger::Retry => "retry",
            Trigger::Manual => "manual",
        }
    }
}

/// Why a key is in the queue: its trigger and, when a watch event caused it, when the event
/// was received (a std instant: the informer's clock, never tokio's paused one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cause {
    /// What queued it.
    pub trigger: Trigger,
    /// When the watch event behind it was received, if one was.
    pub received: Option<std::time::Instant>,
}

impl Cause {
    /// A cause without a watch event behind it.
    pub fn of(trigger: Trigger) -> Self {
        Cause {
            trigger,
            received: None,
        }
    }

    /// A watch event received at `received`, for `trigger`'s handler.
    pub fn event(trigger: Trigger, received: std::time::Instant) -> Self {
        Cause {
            trigger,
            received: Some(received),
        }
    }
}

struct State<K> {
    /// Keys ready to be handed out, with when each entered the queue and its cause.
    queue: Ready<K>,
    /// Keys waiting in `queue` or to be re-queued when their processing ends.
    dirty: HashSet<K>,
    /// Keys being processed, with when each was handed out.
    processing: HashMap<K, Instant>,
    /// The cause of a key added again while it is processed, for when it goes back.
    causes: HashMap<K, Cause>,
    /// Earliest time each delayed key is due, and its trigger.
    waiting: HashMap<K, (Instant, Trigger)>,
    /// The same due times, ordered (stale entries are skipped).
    due: BinaryHeap<Reverse<(Instant, u64, K)>>,
    sequence: u64,
    failures: HashMap<K, u32>,
    bucket: TokenBucket,
    rate_limit: RateLimit,
    shutting_down: bool,
}

/// Below this capacity a collection of the queue is never shrunk.
const KEEP_CAPACITY: usize = 64;

/// Whether a collection holding `len` of `capacity` should give memory back: past
/// [`KEEP_CAPACITY`] and less than a quarter full. Shrinking to twice `len` makes it amortized:
/// the next shrink needs at least as many removals as this one freed slots for.
fn sparse(len: usize, capacity: usize) -> bool {
    capacity > KEEP_CAPACITY && len < capacity / 4
}

/// Bytes a shrink must free for the queue to ask for the freed memory to go back to the
/// operating system ([`crate::process::memory::release_soon`]): the end of a burst, not of the ordinary
/// coming and going of keys.
const RELEASE_AFTER: usize = 64 << 10;

impl<K: Eq + Hash + Ord + Flow> State<K> {
    /// Release the memory a burst left: a resync or an initial list enqueues every key at once
    /// (10 000 Pods leave a queue and a set sized for 10 000, about 2 MiB, for the life of the
    /// controller — per guest), and hash maps and deques never shrink by themselves. The allocator
    /// keeps what is freed for the next allocations: past [`RELEASE_AFTER`], the queue asks
    /// for it to be returned.
    fn shrink_if_sparse(&mut self) {
        let mut freed = self.queue.take_freed();
        macro_rules! shrink {
            ($($collection:expr),*) => {$(
                if sparse($collection.len(), $collection.capacity()) {
                    let before = $collection.capacity();
                    $collection.shrink_to((2 * $collection.len()).max(KEEP_CAPACITY));
                    freed += (before - $collection.capacity()) * entry_size(&$collection);
                }
            )*};
        }
        shrink!(
            self.dirty,
            self.processing,
            self.causes,
            self.waiting,
            self.due,
            self.failures
        );
        if freed >= RELEASE_AFTER {
            crate::process::memory::release_soon();
        }
    }
}

/// The size of one entry of a collection (its keys' own allocations not counted).
fn entry_size<C: IntoIterator>(_: &C) -> usize {
    std::mem::size_of::<C::Item>()
}

/// A workqueue of keys. See the [module docs](self) for its guarantees.
pub struct WorkQueue<K> {
    state: Mutex<State<K>>,
    observer: std::sync::OnceLock<std::sync::Arc<dyn QueueObserver>>,
    /// Wakes `get` callers: something was queued, something became due, or shutdown.
    ready: Notify,
    /// Wakes `drained` callers: processing finished.
    idle: Notify,
    /// How many `drained` callers wait (so that `done` skips waking nobody).
    draining: std::sync::atomic::AtomicUsize,
}

/// What one look into the queue found.
enum Take<K> {
    /// A key, handed out, and its cause.
    Key(K, Cause),
    /// Nothing ready; the next delayed key is due then, if any.
    Empty(Option<Instant>),
    /// The queue is shut down.
    Shutdown,
}

impl<K: Clone + Eq + Hash + Ord + Flow> WorkQueue<K> {
    /// An empty queue with the given retry limits.
    pub fn new(rate_limit: RateLimit) -> Self {
        let bucket = TokenBucket::new(rate_limit.qps, rate_limit.burst, Instant::now());
        WorkQueue {
            observer: std::sync::OnceLock::new(),
            state: Mutex::new(State {
                queue: Ready::new(),
                dirty: HashSet::new(),
                processing: HashMap::new(),
                causes: HashMap::new(),
                waiting: HashMap::new(),
                due: BinaryHeap::new(),
                sequence: 0,
                failures: HashMap::new(),
                bucket,
                rate_limit,
                shutting_down: false,
            }),
            ready: Notify::new(),
            idle: Notify::new(),
            draining: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        // Every critical section leaves the state consistent before anything can panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Report to `observer` (once; later calls are ignored).
    pub fn set_observer(&self, observer: std::sync::Arc<dyn QueueObserver>) {
        let _ = self.observer.set(observer);
    }

    fn observe(&self, f: impl FnOnce(&dyn QueueObserver)) {
        if let Some(observer) = self.observer.get() {
            f(observer.as_ref());
        }
    }

    fn insert(state: &mut State<K>, key: K, cause: Cause) -> bool {
        if state.shutting_down || !state.dirty.insert(key.clone()) {
            return false;
        }
        if !state.processing.contains_key(&key) {
            state.queue.push_back((key, Instant::now(), cause));
            return true;
        }
        state.causes.insert(key, cause);
        false
    }

    /// Add a key now, by hand ([`Trigger::Manual`]).
    pub fn add(&self, key: K) {
        self.add_caused(key, Cause::default());
    }

    /// Add a key now, for `cause` (see [`get_caused`](Self::get_caused)).
    pub fn add_caused(&self, key: K, cause: Cause) {
        let queued = Self::insert(&mut self.lock(), key, cause);
        if queued {
            self.observe(|o| o.added());
            self.ready.notify_one();
        }
    }

    /// Add a key for `trigger` once `delay` has passed.
    pub fn add_after(&self, key: K, delay: Duration, trigger: Trigger) {
        if delay.is_zero() {
            return self.add_caused(key, Cause::of(trigger));
        }
        let mut state = self.lock();
        if state.shutting_down {
            return;
        }
        let at = Instant::now() + delay;
        if state
            .waiting
            .get(&key)
            .is_some_and(|(earlier, _)| *earlier <= at)
        {
            return;
        }
        state.waiting.insert(key.clone(), (at, trigger));
        state.sequence += 1;
        let sequence = state.sequence;
        state.due.push(Reverse((at, sequence, key)));
        drop(state);
        // A sleeping `get` may need to wake earlier than it planned.
        self.ready.notify_waiters();
        self.ready.notify_one();
    }

    /// Add a key after its rate-limited delay, for `trigger` (a failed or requeued reconcile).
    pub fn add_rate_limited(&self, key: K, trigger: Trigger) {
        self.add_rate_limited_at_least(key, Duration::ZERO, trigger);
    }

    /// Like [`add_rate_limited`](Self::add_rate_limited), waiting at least `floor` (a key
    /// quarantined for trapping again and again).
    pub fn add_rate_limited_at_least(&self, key: K, floor: Duration, trigger: Trigger) {
        let delay = {
            let mut state = self.lock();
            let failures = state.failures.entry(key.clone()).or_insert(0);
            let exponent = (*failures).min(63);
            *failures = failures.saturating_add(1);
            let limit = &state.rate_limit;
            let backoff = limit
                .base_delay
                .checked_mul(1u32.checked_shl(exponent).unwrap_or(u32::MAX))
                .unwrap_or(limit.max_delay)
                .min(limit.max_delay);
            let bucket = state.bucket.reserve(Instant::now());
            backoff.max(bucket).max(floor)
        };
        self.observe(|o| o.retried());
        self.add_after(key, delay, trigger);
    }

    /// Change the retry limits (a guest's new manifest). Keys keep their failure counts; the
    /// token bucket starts full at the new size.
    pub fn set_rate_limit(&self, rate_limit: RateLimit) {
        let mut state = self.lock();
        if state.rate_limit != rate_limit {
            state.bucket = TokenBucket::new(rate_limit.qps, rate_limit.burst, Instant::now());
            state.rate_limit = rate_limit;
        }
    }

    /// Reset a key's backoff (its reconcile succeeded).
    pub fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    /// How many rate-limited adds the key has had since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Keys ready to be handed out.
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether no key is ready.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys handed out and not yet done.
    pub fn processing(&self) -> usize {
        self.lock().processing.len()
    }

    /// How long each key being processed has been, longest first (client-go's unfinished
    /// work and longest running processor).
    pub fn in_progress(&self) -> Vec<Duration> {
        let now = Instant::now();
        let mut running: Vec<Duration> = self
            .lock()
            .processing
            .values()
            .map(|t| now.saturating_duration_since(*t))
            .collect();
        running.sort_by(|a, b| b.cmp(a));
        running
    }

    /// Move due delayed keys into the queue; the next due time, if any. Returns also how many
    /// keys entered the queue.
    fn promote_due(state: &mut State<K>, now: Instant) -> (Option<Instant>, usize) {
        let mut added = 0;
        while let Some(Reverse((at, _, key))) = state.due.peek().cloned() {
            let trigger = match state.waiting.get(&key) {
                Some(&(due, trigger)) if due == at => trigger,
                // Superseded by an earlier time, or already promoted.
                _ => {
                    state.due.pop();
                    continue;
                }
            };
            if at > now {
                return (Some(at), added);
            }
            state.due.pop();
            state.waiting.remove(&key);
            if Self::insert(state, key, Cause::of(trigger)) {
                added += 1;
            }
        }
        (None, added)
    }

    /// Hand out the next ready key, if any, after moving due delayed keys into the queue.
    fn take(&self) -> Take<K> {
        let (next_due, added, taken) = {
            let mut state = self.lock();
            if state.shutting_down {
                return Take::Shutdown;
            }
            let now = Instant::now();
            let (next_due, added) = Self::promote_due(&mut state, now);
            let taken = state.queue.pop_front().map(|(key, enqueued, cause)| {
                state.dirty.remove(&key);
                state.processing.insert(key.clone(), now);
                (key, now.saturating_duration_since(enqueued), cause)
            });
            state.shrink_if_sparse();
            if taken.is_some() && !state.queue.is_empty() {
                // Let another worker take the next one.
                self.ready.notify_one();
            }
            (next_due, added, taken)
        };
        for _ in 0..added {
            self.observe(|o| o.added());
        }
        match taken {
            Some((key, waited, cause)) => {
                self.observe(|o| o.taken(waited));
                Take::Key(key, cause)
            }
            None => Take::Empty(next_due),
        }
    }

    /// Wait for the next key; `None` once the queue is shut down.
    pub async fn get(&self) -> Option<K> {
        self.get_caused().await.map(|(key, _)| key)
    }

    /// [`get`](Self::get), with the [`Cause`] that made the key ready.
    pub async fn get_caused(&self) -> Option<(K, Cause)> {
        // A ready key is handed out without registering as a waiter.
        match self.take() {
            Take::Key(key, cause) => return Some((key, cause)),
            Take::Shutdown => return None,
            Take::Empty(_) => {}
        }
        loop {
            let notified = self.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // Registered: a key added from now on wakes us, so look once more before sleeping.
            let next_due = match self.take() {
                Take::Key(key, cause) => return Some((key, cause)),
                Take::Shutdown => return None,
                Take::Empty(next_due) => next_due,
            };
            match next_due {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Mark a key handed out by [`get`](Self::get) as processed; re-queue it if it was added
    /// meanwhile.
    pub fn done(&self, key: &K) {
        let mut state = self.lock();
        let now = Instant::now();
        let worked = state
            .processing
            .remove(key)
            .map(|t| now.saturating_duration_since(t));
        // Only a key that was being processed goes back: `done` for any other key must not
        // queue it a second time.
        let requeue = worked.is_some() && state.dirty.contains(key) && !state.shutting_down;
        let cause = state.causes.remove(key).unwrap_or_default();
        if requeue {
            state.queue.push_back((key.clone(), now, cause));
        }
        let idle = state.processing.is_empty();
        drop(state);
        if let Some(worked) = worked {
            self.observe(|o| o.finished(worked));
        }
        if requeue {
            self.observe(|o| o.added());
            self.ready.notify_one();
        }
        if idle && self.draining.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            self.idle.notify_waiters();
        }
    }

    /// Stop: no new keys, `get` returns `None`. Keys being processed are finished by their workers.
    pub fn shutdown(&self) {
        let mut state = self.lock();
        state.shutting_down = true;
        state.queue.clear();
        state.dirty.clear();
        state.causes.clear();
        state.waiting.clear();
        state.due.clear();
        drop(state);
        self.ready.notify_waiters();
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }

    /// Wait until no key is being processed.
    pub async fn drained(&self) {
        /// Counts this caller among the waiters for as long as it waits.
        struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        self.draining
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _waiting = Waiting(&self.draining);
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.lock().processing.is_empty() {
                return;
            }
            idle.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use krec_core::ObjectKey;

    /// Plain keys are all in one flow.
    impl Flow for &'static str {
        fn flow(&self) -> Option<&str> {
            None
        }
    }

    impl Flow for String {
        fn flow(&self) -> Option<&str> {
            None
        }
    }

    impl Flow for u32 {
        fn flow(&self) -> Option<&str> {
            None
        }
    }

    fn queue() -> WorkQueue<&'static str> {
        WorkQueue::new(RateLimit::default())
    }

    async fn get_now(q: &WorkQueue<&'static str>) -> Option<&'static str> {
        tokio::time::timeout(Duration::from_millis(1), q.get())
            .await
            .ok()
            .flatten()
    }

    #[tokio::test(start_paused = true)]
    async fn queue_should_be_fifo_and_dedup_pending_keys() {
        let q = queue();
        for key in ["a", "b", "a", "c", "b", "a"] {
            q.add(key);
        }
        assert_eq!(q.len(), 3);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.get().await, Some("b"));
        assert_eq!(q.get().await, Some("c"));
        assert_eq!(get_now(&q).await, None, "each key once");
    }

    #[tokio::test(start_paused = true)]
    async fn namespaces_should_take_turns_and_each_keep_its_order() {
        let q = WorkQueue::new(RateLimit::default());
        let key = |ns: Option<&str>, name: &str| ObjectKey::new(ns, name);
        // A tenant floods the queue; then two other namespaces and a cluster-scoped key.
        for i in 0..1_000 {
            q.add(key(Some("flood"), &format!("k{i}")));
        }
        q.add(key(Some("quiet"), "q0"));
        q.add(key(None, "c0"));
        q.add(key(Some("quiet"), "q1"));
        let mut order = Vec::new();
        for _ in 0..7 {
            let got = q.get().await.expect("a key");
            q.done(&got);
            order.push(got.to_string());
        }
        assert_eq!(
            order,
            [
                "flood/k0", "quiet/q0", "c0", "flood/k1", "quiet/q1", "flood/k2", "flood/k3"
            ]
        );
        assert_eq!(q.len(), 996);
    }

    #[tokio::test(start_paused = true)]
    async fn no_key_should_be_lost_or_processed_twice_at_once_across_flows() {
        // A random walk over adds, delayed adds, hand-outs and dones of 15 keys in three
        // namespaces and one cluster-scoped flow; every key added is handed out after its
        // last add, and never while it is being processed.
        let q = WorkQueue::new(RateLimit::default());
        let keys: Vec<ObjectKey> = [Some("a"), Some("b"), Some("c"), None]
            .into_iter()
            .flat_map(|ns| (0..4).map(move |i| ObjectKey::new(ns, &format!("k{i}"))))
            .collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut pending: HashSet<ObjectKey> = HashSet::new();
        let mut processing: Vec<ObjectKey> = Vec::new();
        // Delayed keys with their earliest due time: a hand-out from then on serves them.
        let mut delayed: HashMap<ObjectKey, Instant> = HashMap::new();
        fn take(
            q: &WorkQueue<ObjectKey>,
            pending: &mut HashSet<ObjectKey>,
            processing: &mut Vec<ObjectKey>,
            delayed: &mut HashMap<ObjectKey, Instant>,
        ) -> bool {
            let Take::Key(key, _) = q.take() else {
                return false;
            };
            assert!(!processing.contains(&key), "{key} handed out twice at once");
            pending.remove(&key);
            if delayed.get(&key).is_some_and(|due| *due <= Instant::now()) {
                delayed.remove(&key);
            }
            processing.push(key);
            true
        }
        for _ in 0..20_000 {
            match next(10) {
                0..=3 => {
                    let key = keys[next(keys.len())].clone();
                    q.add(key.clone());
                    pending.insert(key);
                }
                4 => {
                    let key = keys[next(keys.len())].clone();
                    let delay = Duration::from_millis(next(5) as u64 + 1);
                    q.add_after(key.clone(), delay, Trigger::RequeueAfter);
                    let due = Instant::now() + delay;
                    delayed
                        .entry(key)
                        .and_modify(|earlier| *earlier = (*earlier).min(due))
                        .or_insert(due);
                }
                5 => tokio::time::advance(Duration::from_millis(1)).await,
                6 | 7 => {
                    take(&q, &mut pending, &mut processing, &mut delayed);
                }
                _ => {
                    if !processing.is_empty() {
                        let key = processing.swap_remove(next(processing.len()));
                        q.done(&key);
                    }
                }
            }
        }
        // Finish: everything processed, every delay passed, the queue drained.
        for key in processing.drain(..) {
            q.done(&key);
        }
        tokio::time::advance(Duration::from_millis(10)).await;
        while take(&q, &mut pending, &mut processing, &mut delayed) {
            for key in processing.drain(..) {
                q.done(&key);
            }
        }
        assert!(pending.is_empty(), "lost: {pending:?}");
        assert!(delayed.is_empty(), "delayed and lost: {delayed:?}");
        assert_eq!(q.len(), 0);
        assert_eq!(q.processing(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_should_carry_the_cause_that_made_it_ready() {
        let q = queue();
        let (first, second, third) = {
            let now = std::time::Instant::now();
            (
                now,
                now + Duration::from_millis(1),
                now + Duration::from_millis(2),
            )
        };
        q.add_caused("a", Cause::event(Trigger::Owner, first));
        // Deduplicated: the first event's cause stays.
        q.add_caused("a", Cause::event(Trigger::Event, second));
        q.add("b");
        let take =
            || async { tokio::time::timeout(Duration::from_millis(1), q.get_caused()).await };
        assert_eq!(
            take().await.ok().flatten(),
            Some(("a", Cause::event(Trigger::Owner, first)))
        );
        assert_eq!(
            take().await.ok().flatten(),
            Some(("b", Cause::of(Trigger::Manual))),
            "by hand"
        );
        // A cause for a key being processed goes back with the key.
        q.add_caused("a", Cause::event(Trigger::Map, third));
        q.done(&"a");
        assert_eq!(
            take().await.ok().flatten(),
            Some(("a", Cause::event(Trigger::Map, third)))
        );
        q.done(&"a");
        // Re-added after processing without an event: no stale instant.
        q.add_caused("a", Cause::of(Trigger::Ticker));
        assert_eq!(
            take().await.ok().flatten(),
            Some(("a", Cause::of(Trigger::Ticker)))
        );
        q.done(&"a");
        // A delayed add carries its trigger, once due; the earlier of two delays wins, with
        // its trigger.
        q.add_after("c", Duration::from_millis(50), Trigger::RequeueAfter);
        q.add_rate_limited("c", Trigger::Retry);
        tokio::time::advance(Duration::from_millis(6)).await;
        assert_eq!(
            take().await.ok().flatten(),
            Some(("c", Cause::of(Trigger::Retry)))
        );
        q.done(&"c");
        // An event before a delayed add is due: the key is ready for the event, and later
        // for the delay.
        q.add_after("d", Duration::from_millis(5), Trigger::RequeueAfter);
        q.add_caused("d", Cause::event(Trigger::Event, first));
        assert_eq!(
            take().await.ok().flatten(),
            Some(("d", Cause::event(Trigger::Event, first)))
        );
        q.done(&"d");
        tokio::time::advance(Duration::from_millis(6)).await;
        assert_eq!(
            take().await.ok().flatten(),
            Some(("d", Cause::of(Trigger::RequeueAfter)))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_should_not_leave_its_memory_behind() {
        let q: WorkQueue<String> = WorkQueue::new(RateLimit::default());
        for i in 0..10_000 {
            q.add(format!("key-{i}"));
        }
        let held = |q: &WorkQueue<String>| {
            let state = q.lock();
            (state.queue.capacity(), state.dirty.capacity())
        };
        assert!(held(&q).0 >= 10_000 && held(&q).1 >= 10_000);
        for _ in 0..10_000 {
            let key = q.get().await.expect("a key");
            q.done(&key);
        }
        let (queue, dirty) = held(&q);
        assert!(
            queue <= 2 * KEEP_CAPACITY && dirty <= 2 * KEEP_CAPACITY,
            "{queue} {dirty}"
        );
        // Still a queue: a new key is handed out.
        q.add("again".to_owned());
        assert_eq!(q.get().await.as_deref(), Some("again"));
    }

    #[tokio::test(start_paused = true)]
    async fn done_for_a_key_not_handed_out_should_not_queue_it_again() {
        let q = queue();
        q.add("a");
        q.done(&"a");
        assert_eq!(q.len(), 1, "a waits once");
        assert_eq!(q.get().await, Some("a"));
        q.done(&"a");
        assert_eq!(get_now(&q).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_should_never_be_processed_twice_at_once_and_not_be_lost() {
        let q = queue();
        q.add("a");
        assert_eq!(q.get().await, Some("a"));
        q.add("a");
        q.add("a");
        assert_eq!(get_now(&q).await, None, "a is being processed");
        q.done(&"a");
        assert_eq!(
            q.get().await,
            Some("a"),
            "added while processing: once more after done"
        );
        q.done(&"a");
        assert_eq!(get_now(&q).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_adds_should_back_off_exponentially_and_forget_should_reset() {
        let q = queue();
        for expected_ms in [5u64, 10, 20, 40] {
            let started = Instant::now();
            q.add_rate_limited("a", Trigger::Retry);
            assert_eq!(q.get().await, Some("a"));
            assert_eq!(started.elapsed(), Duration::from_millis(expected_ms));
            q.done(&"a");
        }
        assert_eq!(q.num_requeues(&"a"), 4);
        q.forget(&"a");
        assert_eq!(q.num_requeues(&"a"), 0);
        let started = Instant::now();
        q.add_rate_limited("a", Trigger::Retry);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(started.elapsed(), Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_should_be_capped_at_max_delay() {
        let q = WorkQueue::new(RateLimit {
            max_delay: Duration::from_secs(1),
            ..RateLimit::default()
        });
        for _ in 0..40 {
            q.add_rate_limited("a", Trigger::Retry);
            q.get().await;
            q.done(&"a");
        }
        let started = Instant::now();
        q.add_rate_limited("a", Trigger::Retry);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_token_bucket_should_limit_overall_rate() {
        let q = WorkQueue::new(RateLimit {
            base_delay: Duration::from_millis(1),
            qps: 2.0,
            burst: 3,
            ..RateLimit::default()
        });
        let started = Instant::now();
        for key in ["a", "b", "c", "d", "e"] {
            q.add_rate_limited(key, Trigger::Retry);
        }
        let mut times = Vec::new();
        for _ in 0..5 {
            q.get().await.expect("key");
            times.push(started.elapsed());
        }
        // Three within the burst (after their 1 ms backoff), then one every 500 ms.
        assert_eq!(
            times,
            [1, 1, 1, 500, 1000].map(Duration::from_millis).to_vec()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_should_wait_and_keep_the_earliest_time() {
        let q = queue();
        let started = Instant::now();
        q.add_after("a", Duration::from_secs(10), Trigger::RequeueAfter);
        q.add_after("a", Duration::from_secs(3), Trigger::RequeueAfter);
        q.add_after("a", Duration::from_secs(5), Trigger::RequeueAfter);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        q.done(&"a");
        assert_eq!(get_now(&q).await, None, "the later delays were superseded");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_worker_should_wake_for_a_delayed_key() {
        let q = Arc::new(queue());
        let worker = tokio::spawn({
            let q = q.clone();
            async move { (q.get().await, Instant::now()) }
        });
        tokio::task::yield_now().await;
        let started = Instant::now();
        q.add_after("a", Duration::from_millis(250), Trigger::RequeueAfter);
        let (key, at) = worker.await.expect("worker");
        assert_eq!(key, Some("a"));
        assert_eq!(at - started, Duration::from_millis(250));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_should_stop_handing_out_keys_and_let_in_flight_ones_finish() {
        let q = Arc::new(queue());
        q.add("a");
        q.add("b");
        assert_eq!(q.get().await, Some("a"));
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        q.shutdown();
        q.add("c");
        assert_eq!(q.get().await, None);
        let drained = tokio::spawn({
            let q = q.clone();
            async move { q.drained().await }
        });
        tokio::task::yield_now().await;
        assert!(!drained.is_finished(), "a is still being processed");
        q.done(&"a");
        drained.await.expect("drained");
        // `b` was still queued at shutdown: it is not handed out.
        assert_eq!(waiter.await.expect("waiter"), None);
        assert!(q.is_shutting_down());
    }

    #[tokio::test(start_paused = true)]
    async fn many_workers_should_each_get_distinct_keys() {
        let q = Arc::new(WorkQueue::<u32>::new(RateLimit::default()));
        for key in 0..100 {
            q.add(key);
        }
        let mut workers = Vec::new();
        for _ in 0..4 {
            let q = q.clone();
            workers.push(tokio::spawn(async move {
                let mut got = Vec::new();
                while let Ok(Some(key)) =
                    tokio::time::timeout(Duration::from_millis(10), q.get()).await
                {
                    got.push(key);
                    q.done(&key);
                }
                got
            }));
        }
        let mut all = Vec::new();
        for w in workers {
            all.extend(w.await.expect("worker"));
        }
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
    }
}
