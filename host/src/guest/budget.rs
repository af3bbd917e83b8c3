//! A guest's budgets: what one guest may take of what all guests share — CPU, the API server
//! and the log — so that a misbehaving or merely greedy guest cannot starve the others.
//!
//! - **CPU** ([`CpuGovernor`], [`CpuAccount`]): each guest's code may use at most its
//!   `limits.cpu`, and while two or more guests together want more than a quarter of the
//!   host's cores ([`GUEST_CORES`]), a max-min fair share of that quarter (guests using less
//!   than an equal share keep what they use; the heavy ones share the rest equally) — or, while
//!   the machine has idle cores, of what they use plus what is idle, less a quarter kept free:
//!   nobody is held back while cores idle. The rest stays with the host's own work and with the
//!   light guests' bursts. Usage — the CPU time of the threads running the guest's calls, not
//!   the wall-clock time that passed (see `cpu_clock`) — is charged while the guest
//!   runs (at every epoch tick and when a poll of its call returns) against a token bucket; a
//!   guest in debt is held back — its code yields to the
//!   runtime for the time that repays the debt, and its next reconcile waits before it starts —
//!   like a CFS quota.
//! - **Writes** ([`WriteLimiter`]): `limits.writeQps` writes per second with bursts of
//!   `limits.writeBurst`, client-go's client-side limiter, shared by the guest's workers. A
//!   write that would have to wait past its reconcile's deadline fails at once with
//!   `unavailable`.
//! - **Log** ([`LogBudget`]): lines and bytes per second over every channel.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::LogBudget;
use super::limits::MemoryPool;
use crate::manifest::Manifest;
use krec_core::CallError;

/// The part of the host's cores that guests share between them when two or more want more
/// than that; the rest is left to the host itself (watches, the queue, the client, the embedded API
/// server under `krec dev`), so that a light guest's reconcile finds a thread free however many
/// heavy guests run.
pub const GUEST_CORES: f64 = 0.25;

/// CPU time a guest may bank while idle and then spend at once.
pub const CPU_BURST: Duration = Duration::from_millis(100);
/// Longest a guest's code is held back at one time; a deeper debt is repaid over several.
pub const MAX_CPU_PAUSE: Duration = Duration::from_millis(100);
/// Time constant of a guest's recent usage (an exponentially weighted average, in cores).
const USAGE_WINDOW: Duration = Duration::from_secs(1);
/// How often the fair level is recomputed.
const RECOUNT: Duration = Duration::from_millis(50);

/// The host's CPU, shared fairly between the guests that compete for it: max-min fairness
/// over their recent usage. While all guests together use less than their part of the host
/// (`GUEST_CORES` of its cores), or one alone is busy, each may use up to its own
/// `limits.cpu`; beyond that, the
/// guests using less than an equal share keep what they use, and the rest share what is left
/// equally (the water level). See the module's docs.
#[derive(Debug)]
pub struct CpuGovernor {
    /// The guests' part of the host's cores.
    pool: f64,
    /// The machine's CPU counters at the last recount and its idle cores since (`f64` bits,
    /// smoothed), when `/proc/stat` can be read.
    idle: Mutex<IdleCores>,
    started: Instant,
    accounts: Mutex<Vec<Weak<CpuAccount>>>,
    /// The fair level in cores (`f64` bits; infinite while guests fit in the pool).
    level: AtomicU64,
    /// When `level` was computed, in ms since `started` (0: never).
    computed_at: AtomicU64,
}

impl CpuGovernor {
    /// A governor of this machine's cores (its available parallelism), sharing what is idle
    /// on it too.
    pub fn new() -> Arc<Self> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Self::build(cores as f64, true)
    }

    /// A governor of `cores` cores whose guests share their fixed part only, whatever the
    /// machine is doing.
    pub fn with_cores(cores: f64) -> Arc<Self> {
        Self::build(cores, false)
    }

    fn build(cores: f64, measure_idle: bool) -> Arc<Self> {
        Arc::new(CpuGovernor {
            pool: (cores * GUEST_CORES).max(0.01),
            idle: Mutex::new(IdleCores {
                cores,
                measure: measure_idle,
                ..IdleCores::default()
            }),
            started: Instant::now(),
            accounts: Mutex::new(Vec::new()),
            level: AtomicU64::new(f64::INFINITY.to_bits()),
            computed_at: AtomicU64::new(0),
        })
    }

    /// A new account for a guest whose own limit is `limit` cores.
    pub fn account(self: &Arc<Self>, limit: f64) -> Arc<CpuAccount> {
        let now = Instant::now();
        let account = Arc::new(CpuAccount {
            governor: self.clone(),
            limit,
            bucket: Mutex::new(Bucket {
                tokens: CPU_BURST.as_secs_f64(),
                updated: now,
                usage: 0.0,
                usage_at: now,
            }),
            throttled_nanos: AtomicU64::new(0),
            charged_nanos: AtomicU64::new(0),
        });
        let mut accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
        accounts.retain(|a| a.strong_count() > 0);
        accounts.push(Arc::downgrade(&account));
        account
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The fair level in cores, recomputed at most every 50 ms from every guest's usage.
    fn level(&self) -> f64 {
        let now = self.now_ms();
        let computed = self.computed_at.load(Ordering::Relaxed);
        if computed == 0 || now.saturating_sub(computed) >= RECOUNT.as_millis() as u64 {
            self.computed_at.store(now.max(1), Ordering::Relaxed);
            let at = Instant::now();
            let usages: Vec<f64> = self
                .accounts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .filter_map(Weak::upgrade)
                .map(|a| a.usage(at))
                .collect();
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let pool = match idle.update() {
                Some(cores_idle) => {
                    expanded_pool(self.pool, idle.cores, usages.iter().sum(), cores_idle)
                }
                None => self.pool,
            };
            drop(idle);
            self.level
                .store(water_level(usages, pool).to_bits(), Ordering::Relaxed);
        }
        f64::from_bits(self.level.load(Ordering::Relaxed))
    }
}

/// Usage below which a guest does not count as competing (cores).
const IDLE_USAGE: f64 = 0.01;

/// What the guests may share now: their part of the host (`base`), or, while more than
/// [`HEADROOM`] of the machine idles, what they use now plus what is idle less that headroom —
/// work-conserving, as CFS shares are: a guest is held to its fair share only while the CPU is
/// actually wanted, not while cores idle.
fn expanded_pool(base: f64, cores: f64, guests_usage: f64, idle_cores: f64) -> f64 {
    let headroom = cores * HEADROOM;
    if idle_cores <= headroom {
        return base;
    }
    base.max((guests_usage + idle_cores - headroom).min(cores - headroom))
}

/// The part of the machine's cores the guests leave idle when they grow into idle cores: kept
/// for the host's own work (the cache, the queue, the client) and for latency.
const HEADROOM: f64 = 0.25;

/// The machine's idle cores, read from `/proc/stat` at each recount (Linux; elsewhere none,
/// and the guests share their fixed part).
#[derive(Debug, Default)]
struct IdleCores {
    /// The machine's cores.
    cores: f64,
    /// Whether to read the machine's counters at all.
    measure: bool,
    /// Idle and total jiffies at the last reading.
    last: Option<(u64, u64)>,
    /// Idle cores, smoothed over recounts.
    smoothed: f64,
}

impl IdleCores {
    /// Read the counters; the idle cores since the last reading, smoothed (`None` when they
    /// are not measured or cannot be read).
    fn update(&mut self) -> Option<f64> {
        let (idle, total) = cpu_jiffies().filter(|_| self.measure)?;
        if let Some((last_idle, last_total)) = self.last
            && total > last_total
        {
            let fraction = idle.saturating_sub(last_idle) as f64 / (total - last_total) as f64;
            // Half of each reading: the 50 ms windows hold a few jiffies each.
            self.smoothed = 0.5 * self.smoothed + 0.5 * fraction * self.cores;
        }
        self.last = Some((idle, total));
        Some(self.smoothed)
    }
}

/// The machine's idle (idle + iowait) and total jiffies over all its CPUs, from `/proc/stat`.
fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
    Some((idle, fields.iter().sum()))
}

/// Max-min fair level for `usages` sharing `pool`: the guests using less keep what they use,
/// the others get the level; infinite when everything fits, or when one guest alone is busy
/// (it then has only its own limit).
fn water_level(mut usages: Vec<f64>, pool: f64) -> f64 {
    if usages.iter().filter(|u| **u > IDLE_USAGE).count() <= 1 {
        return f64::INFINITY;
    }
    usages.sort_by(f64::total_cmp);
    let mut left = pool;
    let count = usages.len();
    for (i, usage) in usages.iter().enumerate() {
        let even = left / (count - i) as f64;
        if *usage > even {
            return even;
        }
        left -= usage;
    }
    f64::INFINITY
}

#[derive(Debug)]
struct Bucket {
    /// CPU seconds the guest may still use; negative is debt.
    tokens: f64,
    updated: Instant,
    /// Recent usage in cores (exponentially weighted over [`USAGE_WINDOW`]) and when.
    usage: f64,
    usage_at: Instant,
}

impl Bucket {
    /// Decay the recent usage to `now`, adding `used`.
    fn record(&mut self, now: Instant, used: Duration) {
        let dt = now.saturating_duration_since(self.usage_at).as_secs_f64();
        let tau = USAGE_WINDOW.as_secs_f64();
        self.usage = self.usage * (-dt / tau).exp() + used.as_secs_f64() / tau;
        self.usage_at = now;
    }
}

/// One guest's CPU account with its [`CpuGovernor`].
#[derive(Debug)]
pub struct CpuAccount {
    governor: Arc<CpuGovernor>,
    limit: f64,
    bucket: Mutex<Bucket>,
    /// Time held back, not yet added to the metrics.
    throttled_nanos: AtomicU64,
    /// CPU time charged so far.
    charged_nanos: AtomicU64,
}

impl CpuAccount {
    /// The cores the guest may use now: its limit, or the fair level while the guests want
    /// more than their part of the host.
    pub fn share(&self) -> f64 {
        self.limit.min(self.governor.level())
    }

    /// The guest's recent usage in cores, as of `now`.
    fn usage(&self, now: Instant) -> f64 {
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        bucket.record(now, Duration::ZERO);
        bucket.usage
    }

    /// Refill the bucket to `now` at `share` cores.
    fn refill(bucket: &mut Bucket, now: Instant, share: f64) {
        let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * share).min(CPU_BURST.as_secs_f64());
        bucket.updated = now;
    }

    /// Charge `used` CPU time; how long the guest must now be held back, if at all (the caller
    /// holds it back and says so with [`held_back`](Self::held_back)).
    pub fn charge(&self, used: Duration) -> Option<Duration> {
        self.charged_nanos.fetch_add(
            u64::try_from(used.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let share = self.share();
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        bucket.record(now, used);
        Self::refill(&mut bucket, now, share);
        bucket.tokens -= used.as_secs_f64();
        Self::pause(&bucket, share)
    }

    /// How long the guest must wait before it runs again, if it is in debt.
    pub fn debt(&self) -> Option<Duration> {
        let share = self.share();
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        Self::refill(&mut bucket, Instant::now(), share);
        Self::pause(&bucket, share)
    }

    fn pause(bucket: &Bucket, share: f64) -> Option<Duration> {
        if bucket.tokens >= 0.0 {
            return None;
        }
        let seconds = -bucket.tokens / share;
        Some(
            Duration::try_from_secs_f64(seconds)
                .unwrap_or(MAX_CPU_PAUSE)
                .min(MAX_CPU_PAUSE),
        )
    }

    /// Count `pause` as time the guest was held back.
    pub fn held_back(&self, pause: Duration) {
        self.throttled_nanos.fetch_add(
            u64::try_from(pause.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// CPU time charged to the guest so far.
    pub fn charged(&self) -> Duration {
        Duration::from_nanos(self.charged_nanos.load(Ordering::Relaxed))
    }

    /// Time held back since the last call, for `krec_guest_cpu_throttled_seconds_total`.
    pub fn take_throttled(&self) -> Duration {
        Duration::from_nanos(self.throttled_nanos.swap(0, Ordering::Relaxed))
    }
}

/// A guest's client-side write rate limit (client-go's token bucket). See the
/// module's docs.
#[derive(Debug)]
pub struct WriteLimiter {
    qps: f64,
    burst: f64,
    /// Tokens and when they were counted (tokio's clock, so paused-time tests see it move).
    state: Mutex<(f64, tokio::time::Instant)>,
    waited_nanos: AtomicU64,
}

impl WriteLimiter {
    /// `qps` writes per second, bursts of `burst`.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        WriteLimiter {
            qps: qps.max(f64::MIN_POSITIVE),
            burst,
            state: Mutex::new((burst, tokio::time::Instant::now())),
            waited_nanos: AtomicU64::new(0),
        }
    }

    /// Take a token, waiting for it if need be; fails without waiting if the token would come
    /// after `deadline`.
    ///
    /// # Errors
    ///
    /// `unavailable`, saying the guest is over its write rate.
    pub async fn acquire(&self, deadline: Instant) -> Result<(), CallError> {
        let wait = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let (tokens, updated) = &mut *state;
            let now = tokio::time::Instant::now();
            let deadline = tokio::time::Instant::from_std(deadline);
            *tokens = (*tokens + now.saturating_duration_since(*updated).as_secs_f64() * self.qps)
                .min(self.burst);
            *updated = now;
            let wait = if *tokens >= 1.0 {
                Duration::ZERO
            } else {
                Duration::try_from_secs_f64((1.0 - *tokens) / self.qps).unwrap_or(Duration::MAX)
            };
            if now.checked_add(wait).is_none_or(|ready| ready > deadline) {
                return Err(CallError::Unavailable(format!(
                    "client-side rate limit: this guest may write {} times per second (bursts of {}; \
                     limits.writeQps and writeBurst), and the next write would wait past the \
                     reconcile's deadline",
                    self.qps, self.burst
                )));
            }
            // The token is taken now; the caller waits for its time.
            *tokens -= 1.0;
            wait
        };
        if !wait.is_zero() {
            self.waited_nanos.fetch_add(
                u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }

    /// Time writes waited since the last call, for `krec_guest_write_throttled_seconds_total`.
    pub fn take_waited(&self) -> Duration {
        Duration::from_nanos(self.waited_nanos.swap(0, Ordering::Relaxed))
    }
}

/// Everything one guest may take of what all guests share. Every worker and instance of the
/// guest charges the same budgets.
#[derive(Debug)]
pub struct GuestBudgets {
    /// Its log lines and bytes per second.
    pub log: LogBudget,
    /// Its CPU.
    pub cpu: Arc<CpuAccount>,
    /// Its writes to the API server.
    pub writes: WriteLimiter,
    /// The linear memory of all its instances (`limits.totalMemory`), then of all guests'
    /// (the host's `--guest-memory`): the pools an instance's memory is drawn from.
    pub memory: Vec<Arc<MemoryPool>>,
    /// What it has used (CPU split between its code and host work, calls, bytes).
    pub ledger: super::Ledger,
}

impl GuestBudgets {
    /// The budgets `manifest`'s limits give, its CPU governed by `governor`, its memory drawn
    /// from `host_memory` too.
    pub fn new(
        manifest: &Manifest,
        governor: &Arc<CpuGovernor>,
        host_memory: &Arc<MemoryPool>,
    ) -> Self {
        let limits = &manifest.spec.limits;
        let total = usize::try_from(manifest.spec.total_memory()).unwrap_or(usize::MAX);
        GuestBudgets {
            log: LogBudget::new(&manifest.name),
            cpu: governor.account(limits.cpu),
            writes: WriteLimiter::new(limits.write_qps, limits.write_burst),
            memory: vec![
                MemoryPool::new("limits.totalMemory (all the guest's instances)", total),
                host_memory.clone(),
            ],
            ledger: super::Ledger::default(),
        }
    }

    /// What the guest has used so far.
    pub fn totals(&self) -> super::Totals {
        self.ledger
            .figures(&self.cpu, self.memory.first().map(Arc::as_ref))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_water_level_should_leave_light_guests_what_they_use() {
        // Everything fits: no level; one busy guest alone: no level.
        assert_eq!(water_level(vec![0.1, 0.2], 1.0), f64::INFINITY);
        assert_eq!(water_level(vec![0.0, 3.0], 1.0), f64::INFINITY);
        // Two light guests keep theirs; three heavy ones share the rest equally.
        let level = water_level(vec![0.05, 0.15, 1.0, 1.0, 1.0], 1.0);
        assert!((level - 0.8 / 3.0).abs() < 1e-9, "{level}");
        assert_eq!(water_level(vec![], 1.0), f64::INFINITY);
    }

    #[test]
    fn the_pool_should_grow_into_idle_cores_and_keep_its_headroom() {
        // Half a core for guests on two, half a core kept free; 1.2 cores idle while they
        // use 0.4: they may use 1.1.
        assert!((expanded_pool(0.5, 2.0, 0.4, 1.2) - 1.1).abs() < 1e-9);
        // Never more than the machine less the headroom.
        assert_eq!(expanded_pool(0.5, 2.0, 1.0, 1.9), 1.5);
        // A busy machine (less idle than the headroom): their part.
        assert_eq!(expanded_pool(0.5, 2.0, 1.5, 0.4), 0.5);
        let mut idle = IdleCores {
            cores: 2.0,
            measure: true,
            ..IdleCores::default()
        };
        idle.update();
        if let Some(now) = idle.update() {
            assert!((0.0..=2.0).contains(&now), "{now}");
        }
    }

    #[test]
    fn a_lone_guest_should_get_its_limit_and_heavy_guests_a_fair_share() {
        let governor = CpuGovernor::with_cores(2.0);
        let a = governor.account(1.0);
        assert_eq!(a.share(), 1.0, "a guest alone gets its own limit");
        let heavy: Vec<_> = (0..4).map(|_| governor.account(1.0)).collect();
        heavy[0].charge(Duration::from_millis(900));
        // Recomputed at most every 50 ms: force it.
        governor.computed_at.store(0, Ordering::Relaxed);
        assert_eq!(a.share(), 1.0, "one busy guest alone keeps its own limit");
        for h in &heavy {
            h.charge(Duration::from_millis(900));
        }
        governor.computed_at.store(0, Ordering::Relaxed);
        // A quarter of 2 cores; the idle guest keeps nothing it does not use, four heavy ones
        // share.
        let level = a.share();
        assert!((level - 0.125).abs() < 0.01, "{level}");
    }

    #[test]
    fn a_guest_in_debt_should_be_held_back_until_it_repays() {
        let governor = CpuGovernor::with_cores(2.0);
        let account = governor.account(0.5);
        // Within the banked burst: no pause.
        assert_eq!(account.charge(Duration::from_millis(50)), None);
        // 200 ms over a 0.5-core share: 400 ms of debt, paid at most 100 ms at a time.
        let pause = account.charge(Duration::from_millis(250)).expect("in debt");
        assert_eq!(pause, MAX_CPU_PAUSE);
        assert!(account.debt().is_some());
        account.held_back(pause);
        assert_eq!(account.take_throttled(), MAX_CPU_PAUSE);
    }

    #[tokio::test(start_paused = true)]
    async fn writes_should_keep_to_the_rate_and_fail_past_the_deadline() {
        let limiter = WriteLimiter::new(10.0, 2);
        let far = Instant::now() + Duration::from_secs(3600);
        // Deadlines are std instants; the limiter counts on tokio's (paused) clock.
        let started = tokio::time::Instant::now();
        for _ in 0..12 {
            limiter.acquire(far).await.expect("within the deadline");
        }
        // Two at once, then ten at 10/s.
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(950) && took <= Duration::from_millis(1100),
            "{took:?}"
        );
        assert!(limiter.take_waited() >= Duration::from_millis(900));
        // The next token is 100 ms away: a deadline before it fails at once.
        let err = limiter
            .acquire((tokio::time::Instant::now() + Duration::from_millis(10)).into_std())
            .await
            .expect_err("past the deadline");
        assert!(matches!(err, CallError::Unavailable(m) if m.contains("writeQps")));
    }
}
