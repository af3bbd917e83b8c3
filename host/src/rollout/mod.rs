//! Safe rollouts: a candidate version tried beside the live one, record and replay.
//!
//! A guest's `spec.rollout` names a candidate module. A [`Rollout`] runs it:
//!
//! - **shadow** (the default): after each live reconcile, the candidate reconciles the same
//!   request on one worker of its own, its reads answered with what the live version read (the
//!   live reconcile's [`Tape`], the cache for reads the live version did not make) and its
//!   writes kept: a write the live version made too gets the live answer, any other goes to the
//!   API server as a dry run (see [`replay`]). Events are kept, never recorded. The two
//!   reconciles are [compared](compare) — writes as requests, normalised; Events; outcome —
//!   and counted (`krec_shadow_reconciles_total{outcome}`), the first divergences kept with
//!   their diff. The shadow uses at most `shadowCpu` percent of one core: it sleeps in
//!   proportion to the time it ran, and a request arriving while its queue is full is skipped
//!   (counted `skipped`), so the live version never waits for it.
//! - **canary**: the candidate reconciles `share` percent of the keys for real (by a stable
//!   hash of `namespace/name`), the live version the rest.
//!
//! Its policy decides: a trap beyond the live version's, an error rate above the live
//! version's (after `minReconciles`), or a divergence in a `critical` field rolls the candidate
//! back; `promote` promotes it after enough reconciles within the divergence allowed. A
//! promotion swaps the candidate in as the guest's running version (the queue survives: 0 keys
//! lost); a rollback stops trying it. Either is decided once and reported through
//! [`Rollout::decided`], which the controller acts on; `krec diff` reads [`Rollout::report`].
//!
//! [`Tap`] takes down what a live reconcile reads and does; [`recording`] writes tapes as a
//! recording and `krec replay` plays them back on a module, with [`Replay`].

pub mod compare;
mod guest;
pub mod recording;
pub mod replay;
pub mod tape;
pub mod worker;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

pub use guest::GuestRollouts;
pub use replay::{DryRun, Played, Replay};
pub use tape::{Outcome, Reconcile, Tap, Tape};

use crate::cluster::ClusterAccess;
use crate::guest::{GuestModule, GuestWorker, SetClock};
use crate::manifest::{RolloutMode, RolloutSpec};
use crate::process::metrics::{Metrics, OutcomeLabels};

/// Divergences kept for `krec diff` (the first ones; later ones are counted).
pub const KEPT_DIVERGENCES: usize = 20;

/// Live reconciles waiting for the shadow; past this, requests are skipped.
pub const SHADOW_QUEUE: usize = 64;

/// A stable hash of `namespace/name` in 0..100: the canary's share of the keys.
pub fn key_percentile(namespace: Option<&str>, name: &str) -> u8 {
    // FNV-1a, 64 bits: the same on every replica and every run.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let key = krec_core::KeyRef { namespace, name }.to_string();
    for byte in key.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    u8::try_from(hash % 100).unwrap_or(0)
}

/// What the policy (or a person) decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Run the candidate as the guest's version.
    Promote(String),
    /// Stop trying the candidate.
    RollBack(String),
}

/// A rollout's counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Live reconciles seen while the rollout ran.
    pub live: u64,
    /// Of those, errors.
    pub live_errors: u64,
    /// Of those, traps.
    pub live_traps: u64,
    /// Candidate reconciles (compared, for a shadow).
    pub candidate: u64,
    /// Shadow: the same as the live version's.
    pub same: u64,
    /// Shadow: divergent.
    pub diverged: u64,
    /// The candidate's errors.
    pub errors: u64,
    /// The candidate's traps.
    pub traps: u64,
    /// Shadow: requests skipped (over its CPU share, or too large a tape).
    pub skipped: u64,
    /// Shadow: of the compared pairs, the live version's errors.
    pub paired_live_errors: u64,
    /// Shadow: compared pairs where the candidate trapped and the live version did not.
    pub traps_beyond_live: u64,
}

/// One divergence kept for `krec diff`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// The request.
    pub key: String,
    /// The differences.
    pub lines: Vec<String>,
    /// Of those, the fields written differently.
    pub changes: Vec<compare::Change>,
}

struct State {
    counts: Counts,
    divergences: VecDeque<Kept>,
}

/// A candidate being tried. See the [module docs](self).
pub struct Rollout {
    guest: String,
    candidate: Arc<GuestModule>,
    spec: RolloutSpec,
    state: Mutex<State>,
    decided: watch::Sender<Option<Decision>>,
    shadow: Option<mpsc::Sender<Reconcile>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    metrics: Arc<Metrics>,
    seq: AtomicU64,
    /// Where a shadow's reads go, and its writes: kept to try the candidate [`again`](Self::again).
    live: Arc<dyn ClusterAccess>,
    dry_run: Option<DryRun>,
}

impl std::fmt::Debug for Rollout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rollout")
            .field("guest", &self.guest)
            .finish_non_exhaustive()
    }
}

impl Rollout {
    /// Start trying `candidate` as `spec` says. A shadow's reads the live version did not make
    /// go to `live`; its other writes to `dry_run` (without one, they are answered as written).
    pub fn start(
        guest: &str,
        candidate: Arc<GuestModule>,
        spec: RolloutSpec,
        live: Arc<dyn ClusterAccess>,
        dry_run: Option<DryRun>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let (decided, _) = watch::channel(None);
        let (shadow, receiver) = match spec.mode {
            RolloutMode::Shadow => {
                let (tx, rx) = mpsc::channel(SHADOW_QUEUE);
                (Some(tx), Some(rx))
            }
            RolloutMode::Canary => (None, None),
        };
        let rollout = Arc::new(Rollout {
            guest: guest.to_owned(),
            candidate,
            spec,
            state: Mutex::new(State {
                counts: Counts::default(),
                divergences: VecDeque::new(),
            }),
            decided,
            shadow,
            task: Mutex::new(None),
            metrics,
            seq: AtomicU64::new(0),
            live: live.clone(),
            dry_run: dry_run.clone(),
        });
        if let Some(receiver) = receiver {
            let replay = Arc::new(Replay::new(Some(live), dry_run));
            let task = tokio::spawn(shadow_loop(Arc::downgrade(&rollout), receiver, replay));
            *rollout.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        }
        for outcome in ["same", "diverged", "error", "trap", "skipped"] {
            let _ = rollout
                .metrics
                .shadow_reconciles
                .get_or_create(&OutcomeLabels {
                    guest: guest.to_owned(),
                    outcome,
                });
        }
        tracing::info!(
            guest = %guest,
            "trying candidate {} ({}) in {} mode",
            rollout.candidate.manifest().spec.module.display(),
            rollout.candidate.digest(),
            rollout.mode_name()
        );
        rollout
    }

    /// The same candidate tried afresh, as the same spec says: counts at zero, undecided.
    pub fn again(&self) -> Arc<Self> {
        Rollout::start(
            &self.guest,
            self.candidate.clone(),
            self.spec.clone(),
            self.live.clone(),
            self.dry_run.clone(),
            self.metrics.clone(),
        )
    }

    fn mode_name(&self) -> &'static str {
        match self.spec.mode {
            RolloutMode::Shadow => "shadow",
            RolloutMode::Canary => "canary",
        }
    }

    /// The candidate module.
    pub fn candidate(&self) -> &Arc<GuestModule> {
        &self.candidate
    }

    /// Whether the live reconcile about to run is to be taped for the shadow: shadow mode,
    /// undecided, and room in the shadow's queue — else it is skipped (and counted) before
    /// anything is taped, so a busy shadow costs the live version nothing.
    pub fn wants_tape(&self) -> bool {
        let Some(shadow) = &self.shadow else {
            return false;
        };
        if self.decided.borrow().is_some() {
            return false;
        }
        if shadow.capacity() == 0 {
            self.skipped();
            return false;
        }
        true
    }

    /// Count a request the shadow did not take.
    pub fn skipped(&self) {
        self.lock().counts.skipped += 1;
        self.count("skipped");
    }

    /// Whether the candidate reconciles `namespace/name` for real (canary mode, its share).
    pub fn takes(&self, namespace: Option<&str>, name: &str) -> bool {
        self.spec.mode == RolloutMode::Canary
            && self.decided.borrow().is_none()
            && key_percentile(namespace, name) < self.spec.share
    }

    /// Wakes when a decision is made (and holds it).
    pub fn decided(&self) -> watch::Receiver<Option<Decision>> {
        self.decided.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, outcome: &'static str) {
        self.metrics
            .shadow_reconciles
            .get_or_create(&OutcomeLabels {
                guest: self.guest.clone(),
                outcome,
            })
            .inc();
    }

    /// The next reconcile number.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Count a live reconcile's outcome.
    pub fn live_ended(&self, outcome: &Outcome) {
        let mut state = self.lock();
        state.counts.live += 1;
        state.counts.live_errors += u64::from(outcome.is_error());
        state.counts.live_traps += u64::from(outcome.is_trap());
    }

    /// Hand a taped live reconcile to the shadow; skipped (and counted) when its queue is full.
    pub fn offer(&self, live: Reconcile) {
        let Some(shadow) = &self.shadow else {
            return;
        };
        if shadow.try_send(live).is_err() {
            self.skipped();
        }
    }

    /// Count a canary reconcile of the candidate, then weigh the policy.
    pub fn canary_ended(&self, outcome: &Outcome) {
        {
            let mut state = self.lock();
            state.counts.candidate += 1;
            state.counts.errors += u64::from(outcome.is_error());
            state.counts.traps += u64::from(outcome.is_trap());
        }
        self.weigh(&[]);
    }

    /// Count a compared shadow reconcile (`live`'s outcome beside the candidate's `outcome`),
    /// keep its divergence, then weigh the policy.
    fn compared(
        &self,
        key: String,
        live: &Outcome,
        outcome: &Outcome,
        divergence: &compare::Divergence,
    ) {
        let label = if outcome.is_trap() {
            "trap"
        } else if outcome.is_error() && !divergence.is_empty() {
            "error"
        } else if divergence.is_empty() {
            "same"
        } else {
            "diverged"
        };
        self.count(label);
        {
            let mut state = self.lock();
            let counts = &mut state.counts;
            counts.candidate += 1;
            counts.errors += u64::from(outcome.is_error());
            counts.traps += u64::from(outcome.is_trap());
            counts.paired_live_errors += u64::from(live.is_error());
            counts.traps_beyond_live += u64::from(outcome.is_trap() && !live.is_trap());
            if divergence.is_empty() {
                counts.same += 1;
            } else {
                counts.diverged += 1;
                if state.divergences.len() < KEPT_DIVERGENCES {
                    tracing::info!(guest = %self.guest, key = %key, "the candidate diverged: {}", divergence.lines.join("; "));
                    state.divergences.push_back(Kept {
                        key,
                        lines: divergence.lines.clone(),
                        changes: divergence.changes.clone(),
                    });
                }
            }
        }
        self.weigh(&divergence.fields);
    }

    /// Decide (once) what the counts so far and the fields that just diverged call for.
    fn weigh(&self, diverged_fields: &[compare::FieldDiff]) {
        if self.decided.borrow().is_some() {
            return;
        }
        let counts = self.lock().counts.clone();
        // A diverged field under a critical one, or above it (a whole `spec` differing).
        let under = |a: &str, b: &str| {
            a == b || a.starts_with(&format!("{b}.")) || a.starts_with(&format!("{b}["))
        };
        let critical = diverged_fields.iter().find(|diff| {
            let field = diff.path.as_str();
            self.spec
                .critical
                .iter()
                .any(|c| under(field, c) || (!field.is_empty() && under(c, field)))
        });
        let rate = |n: u64, of: u64| if of == 0 { 0.0 } else { n as f64 / of as f64 };
        // A shadow is judged pair by pair (the same requests); a canary's keys are not the live
        // version's, so their rates are compared.
        let (trapped_beyond, errors, live_errors) = match self.spec.mode {
            RolloutMode::Shadow => (
                counts.traps_beyond_live > 0,
                rate(counts.errors, counts.candidate),
                rate(counts.paired_live_errors, counts.candidate),
            ),
            RolloutMode::Canary => (
                rate(counts.traps, counts.candidate) > rate(counts.live_traps, counts.live),
                rate(counts.errors, counts.candidate),
                rate(counts.live_errors, counts.live),
            ),
        };
        let weighed = counts.candidate >= u64::from(self.spec.min_reconciles);
        let decision = if trapped_beyond {
            Some(Decision::RollBack(format!(
                "the candidate trapped {} time(s) in {} reconciles, beyond the live version ({} in {})",
                counts.traps, counts.candidate, counts.live_traps, counts.live
            )))
        } else if let Some(diff) = critical {
            Some(Decision::RollBack(format!(
                "the candidate diverged in {}, a critical field: the live version left it {}, the candidate {}",
                diff.path, diff.live, diff.candidate
            )))
        } else if weighed && errors > live_errors {
            Some(Decision::RollBack(format!(
                "the candidate's error rate ({:.1} % of {}) is above the live version's ({:.1} %)",
                100.0 * errors,
                counts.candidate,
                100.0 * live_errors
            )))
        } else {
            self.spec.promote.as_ref().and_then(|promote| {
                let divergence = 100.0 * rate(counts.diverged, counts.candidate);
                let enough = counts.candidate
                    >= u64::from(promote.after_reconciles.max(self.spec.min_reconciles));
                (enough && divergence <= promote.max_divergence_percent && errors <= live_errors)
                    .then(|| {
                        Decision::Promote(format!(
                            "{} reconciles, {divergence:.1} % divergent (at most {} % allowed), no trap or error beyond the live version's",
                            counts.candidate, promote.max_divergence_percent
                        ))
                    })
            })
        };
        if let Some(decision) = decision {
            self.decide(decision);
        }
    }

    /// Decide now (a person's promote or abort, or the policy's); the first decision stands.
    pub fn decide(&self, decision: Decision) -> bool {
        let mut first = false;
        self.decided.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(decision.clone());
                first = true;
            }
            first
        });
        if first {
            match &decision {
                Decision::Promote(why) => {
                    tracing::info!(guest = %self.guest, "promoting the candidate: {why}");
                }
                Decision::RollBack(why) => {
                    tracing::warn!(guest = %self.guest, "rolling the candidate back: {why}");
                }
            }
        }
        first
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        self.lock().counts.clone()
    }

    /// What `krec diff`, the admin endpoint and the Reconciler's `status.rollout` show.
    pub fn report(&self) -> Value {
        let state = self.lock();
        let c = &state.counts;
        let (phase, reason) = match &*self.decided.borrow() {
            None => (
                match self.spec.mode {
                    RolloutMode::Shadow => "Shadowing",
                    RolloutMode::Canary => "Canary",
                },
                String::new(),
            ),
            Some(Decision::Promote(why)) => ("Promoted", why.clone()),
            Some(Decision::RollBack(why)) => ("RolledBack", why.clone()),
        };
        json!({
            "guest": self.guest,
            "candidate": self.candidate.manifest().spec.module.display().to_string(),
            "digest": self.candidate.digest(),
            "mode": self.mode_name(),
            "phase": phase,
            "reason": reason,
            "live": {"reconciles": c.live, "errors": c.live_errors, "traps": c.live_traps},
            "candidateCounts": {
                "reconciles": c.candidate, "same": c.same, "diverged": c.diverged,
                "errors": c.errors, "traps": c.traps, "skipped": c.skipped,
            },
            "divergences": state.divergences.iter()
                .map(|d| json!({
                    "key": d.key,
                    "diff": d.lines,
                    "changes": d.changes.iter().map(|c| json!({
                        "write": c.write,
                        "path": c.field.path,
                        "live": c.field.live,
                        "candidate": c.field.candidate,
                    })).collect::<Vec<_>>(),
                }))
                .collect::<Vec<_>>(),
        })
    }

    /// Stop the shadow.
    pub fn stop(&self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}

impl Drop for Rollout {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The shadow's worker: replay each live reconcile on the candidate, compare, count; sleep in
/// proportion to the time it ran to stay within its CPU share.
async fn shadow_loop(
    rollout: std::sync::Weak<Rollout>,
    mut live: mpsc::Receiver<Reconcile>,
    replay: Arc<Replay>,
) {
    let clock = SetClock::default();
    let (candidate, share) = match rollout.upgrade() {
        Some(r) => (r.candidate.clone(), r.spec.shadow_cpu),
        None => return,
    };
    let access: Arc<dyn ClusterAccess> = replay.clone();
    let mut worker = GuestWorker::new(candidate, access).with_clock(clock.clone());
    while let Some(recorded) = live.recv().await {
        let Some(rollout) = rollout.upgrade() else {
            return;
        };
        if rollout.decided.borrow().is_some() {
            return;
        }
        clock.set_ms(recorded.clock_ms);
        replay.load(&recorded);
        let started = Instant::now();
        let result = worker
            .reconcile(recorded.namespace.as_deref(), &recorded.name)
            .await;
        let ran = started.elapsed();
        let played = replay.take();
        let shadow = Reconcile {
            tape: played.tape,
            outcome: Outcome::of(&result),
            ..recorded.clone()
        };
        let divergence = compare::compare(&recorded, &shadow);
        rollout.compared(
            recorded.key(),
            &recorded.outcome,
            &shadow.outcome,
            &divergence,
        );
        drop(rollout);
        // At most `share` % of one core: rest (100/share − 1) times as long as it ran.
        let rest = ran.mul_f64(100.0 / f64::from(share) - 1.0);
        if !rest.is_zero() {
            tokio::time::sleep(rest.min(Duration::from_secs(10))).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::guest::Runner;
    use crate::guest::script::Script;
    use crate::manifest::Manifest;
    use crate::rollout::tape::ErrorText;

    /// A rollout of a scripted candidate with `rollout` as its spec (YAML flow mapping).
    fn rollout(spec: &str) -> Arc<Rollout> {
        let text = format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: t}}\nspec:\n  module: t.wasm\n  for: {{apiVersion: v1, kind: ConfigMap}}\n  rollout: {spec}\n"
        );
        let manifest = Manifest::parse(Path::new("t.yaml"), &text).expect("manifest");
        let spec = manifest.spec.rollout.clone().expect("a rollout");
        let runner: Arc<dyn Runner> = Script::new(Vec::new());
        let candidate = Arc::new(GuestModule::with_runner(Arc::new(manifest), runner));
        let live: Arc<dyn ClusterAccess> = Arc::new(crate::cluster::MemoryCluster::new());
        Rollout::start("t", candidate, spec, live, None, Arc::new(Metrics::new()))
    }

    fn error() -> Outcome {
        Outcome::Error(ErrorText {
            reason: "Conflict".into(),
            message: "x".into(),
        })
    }

    fn same() -> compare::Divergence {
        compare::Divergence::default()
    }

    fn diff(path: &str) -> compare::FieldDiff {
        compare::FieldDiff {
            path: path.into(),
            live: "3".into(),
            candidate: "4".into(),
        }
    }

    fn decision(r: &Rollout) -> Option<Decision> {
        r.decided().borrow().clone()
    }

    #[tokio::test]
    async fn a_shadow_should_be_judged_pair_by_pair() {
        // The live version traps on another key now and then: no allowance for the candidate.
        let r = rollout("{candidate: c.wasm}");
        r.live_ended(&Outcome::Trap("panic".into()));
        r.compared("a".into(), &Outcome::Done, &Outcome::Done, &same());
        assert_eq!(decision(&r), None);
        r.compared(
            "b".into(),
            &Outcome::Done,
            &Outcome::Trap("panic".into()),
            &same(),
        );
        assert!(matches!(decision(&r), Some(Decision::RollBack(why)) if why.contains("trapped")));
        // Trapping where the live version traps too is no worse.
        let r = rollout("{candidate: c.wasm}");
        let trap = Outcome::Trap("panic".into());
        r.compared("a".into(), &trap, &trap, &same());
        assert_eq!(decision(&r), None);
    }

    #[tokio::test]
    async fn a_critical_field_above_or_below_should_roll_back() {
        for field in ["spec.replicas", "spec", "spec.replicas.x"] {
            let r = rollout("{candidate: c.wasm, critical: [spec.replicas]}");
            let divergence = compare::Divergence {
                lines: vec!["write 1: …".into()],
                fields: vec![diff(field)],
                changes: Vec::new(),
            };
            r.compared("a".into(), &Outcome::Done, &Outcome::Done, &divergence);
            assert!(
                matches!(decision(&r), Some(Decision::RollBack(why)) if why.contains("critical")),
                "{field}"
            );
        }
        let r = rollout("{candidate: c.wasm, critical: [spec.replicas]}");
        let elsewhere = compare::Divergence {
            lines: vec!["write 1: …".into()],
            fields: vec![diff("spec.template")],
            changes: Vec::new(),
        };
        r.compared("a".into(), &Outcome::Done, &Outcome::Done, &elsewhere);
        assert_eq!(decision(&r), None);
    }

    #[tokio::test]
    async fn a_canary_failing_should_not_be_promoted() {
        let r = rollout("{candidate: c.wasm, mode: canary, promote: {afterReconciles: 5}}");
        for _ in 0..30 {
            r.live_ended(&Outcome::Done);
        }
        for _ in 0..19 {
            r.canary_ended(&error());
        }
        assert_eq!(decision(&r), None, "not before minReconciles");
        r.canary_ended(&error());
        assert!(
            matches!(decision(&r), Some(Decision::RollBack(why)) if why.contains("error rate"))
        );
        let r = rollout("{candidate: c.wasm, mode: canary, promote: {afterReconciles: 5}}");
        for _ in 0..20 {
            r.live_ended(&Outcome::Done);
            r.canary_ended(&Outcome::Done);
        }
        assert!(matches!(decision(&r), Some(Decision::Promote(_))));
    }
}
