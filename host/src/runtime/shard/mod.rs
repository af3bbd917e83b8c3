//! Guests sharded across host replicas by `coordination.k8s.io/v1` Leases (`krec run --shard`):
//! N replicas share M guests, each guest running in exactly one replica at a time.
//!
//! - **Membership.** Each replica keeps a Lease of its own, `<group>-replica-<identity>`,
//!   labelled `krec.dev/shard-group: <group>`, renewed every retry period. A replica counts
//!   another alive while its Lease changes within the lease duration, measured on its own clock
//!   from when it saw the change (so clock offsets between hosts do not matter). A replica that
//!   stops cleanly deletes its Lease, and the others rebalance at their next tick.
//! - **Assignment.** Every replica computes the same assignment from the same view: guests in
//!   name order, each to the replica ranking highest for it (rendezvous hashing) among those
//!   not yet at their share (⌊M/N⌋, or one more for the first M mod N replicas to reach it), so
//!   the counts differ by at most one. Views differ only briefly (one retry period); the
//!   guest Leases below keep that from ever meaning two owners.
//! - **Ownership.** Each guest has a Lease, `<group>-<guest>`, taken as client-go's leader
//!   election takes one ([`LeaderElector`]): only when free or unrenewed for the lease
//!   duration. A replica runs a guest ([`Tenures::grant`]) only while it holds the guest's Lease;
//!   the taker first queues every key of the guest (a full resync from its warm cache: opening
//!   a controller's gate does it), so nothing the previous owner had queued is lost. While the
//!   gate is closed the guest's events are dropped, not queued.
//! - **Handover.** A replica giving a guest up stops taking its keys, keeps renewing while the
//!   reconciles already running finish, then releases the Lease (empty holder); the taker's
//!   next tick takes it.
//! - **Fencing.** Each renewal extends the guest's write [`Fence`](crate::cluster::fence::Fence)
//!   to the renewal's send time plus the renew deadline, shorter than the lease duration: a
//!   replica that cannot renew (API server unreachable, partition, a stalled process) stops
//!   sending the guest's writes before any other replica may take the Lease.
//!
//! Every replica loads every guest and keeps the caches of all of their kinds warm: any guest
//! may be taken over at any moment. Writes carry the replica's identity in their `User-Agent`
//! (`krec/<version> (<identity>)`), so the API server's audit log shows which replica wrote
//! for which guest (the field manager, `krec-<guest>`).

mod assign;

pub use assign::{Member, assign, assign_runnable};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use tokio::time::Instant;

use crate::guests::Manager;
use crate::guests::tenure::Tenures;
use crate::process::metrics::{GuestLabel, Metrics};
use crate::runtime::leader::{LeaderConfig, LeaderElector, lease_seconds};

/// The label naming a Lease's shard group (on membership and guest Leases).
pub const GROUP_LABEL: &str = "krec.dev/shard-group";

/// The annotation on a membership Lease listing the guests its replica runs (comma-separated,
/// in order): replicas with different guest sets (a rolling upgrade adding one) give each
/// guest only to a replica that runs it.
pub const GUESTS_ANNOTATION: &str = "krec.dev/shard-guests";

/// A membership Lease unrenewed for this many lease durations belongs to a replica that died
/// without leaving: it is deleted.
const FORGET_AFTER_LEASES: u32 = 10;

/// How often the watchdog looks for guests whose fences have closed.
const WATCHDOG_PERIOD: Duration = Duration::from_millis(50);

/// The label telling membership Leases (`replica`) from guest Leases (`guest`).
pub const ROLE_LABEL: &str = "krec.dev/shard-role";

/// How replicas of one shard group find each other and time their Leases.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// The group's name: the prefix of its Lease names and the value of [`GROUP_LABEL`].
    pub group: String,
    /// Where the Leases live.
    pub namespace: String,
    /// This replica's identity (unique per process).
    pub identity: String,
    /// How long a Lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// How long a holder keeps a guest's writes going without a renewal (fencing); shorter
    /// than the lease duration.
    pub renew_deadline: Duration,
    /// How often Leases are renewed and the assignment recomputed.
    pub retry_period: Duration,
}

impl ShardConfig {
    /// controller-runtime's leader election timings (15 s, 10 s, 2 s) for `group` in
    /// `namespace`, with a fresh identity.
    pub fn new(group: &str, namespace: &str) -> Self {
        let leader = LeaderConfig::new(group, namespace);
        ShardConfig {
            group: group.to_owned(),
            namespace: namespace.to_owned(),
            identity: leader.identity,
            lease_duration: leader.lease_duration,
            renew_deadline: leader.renew_deadline,
            retry_period: leader.retry_period,
        }
    }

    /// Whether the timings can fence: the renew deadline must be shorter than the lease
    /// duration, and the retry period shorter than the renew deadline.
    ///
    /// # Errors
    ///
    /// The [`TimingError`] naming the timings that do not fit.
    pub fn validate(&self) -> Result<(), TimingError> {
        if self.renew_deadline >= self.lease_duration {
            return Err(TimingError::DeadlineNotShorter {
                renew_deadline: self.renew_deadline,
                lease_duration: self.lease_duration,
            });
        }
        if self.retry_period >= self.renew_deadline {
            return Err(TimingError::RetryNotShorter {
                retry_period: self.retry_period,
                renew_deadline: self.renew_deadline,
            });
        }
        Ok(())
    }

    /// The Lease of `guest`: `<group>-<guest>`.
    pub fn guest_lease(&self, guest: &str) -> String {
        format!("{}-{guest}", self.group)
    }

    /// This replica's membership Lease: `<group>-replica-<identity>`, lower-cased, with what a
    /// Lease name cannot hold replaced by `-`.
    pub fn member_lease(&self) -> String {
        let identity: String = self
            .identity
            .to_ascii_lowercase()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        format!("{}-replica-{}", self.group, identity.trim_matches('-'))
    }
}

/// Lease timings that cannot fence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    /// A replica that lost a guest could still write when another takes it.
    #[error(
        "the renew deadline ({renew_deadline:?}) must be shorter than the lease duration \
         ({lease_duration:?}): otherwise a replica that lost a guest could still write when \
         another takes it"
    )]
    DeadlineNotShorter {
        /// The renew deadline.
        renew_deadline: Duration,
        /// The lease duration.
        lease_duration: Duration,
    },
    /// A holder would not renew before its deadline.
    #[error(
        "the retry period ({retry_period:?}) must be shorter than the renew deadline ({renew_deadline:?})"
    )]
    RetryNotShorter {
        /// The retry period.
        retry_period: Duration,
        /// The renew deadline.
        renew_deadline: Duration,
    },
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// Where this replica stands with one guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// Not held here.
    Idle,
    /// Held and running here.
    Held,
    /// Held, no new reconciles: waiting for the running ones before releasing.
    Draining,
}

/// One guest's Lease as this replica sees it.
struct GuestLease {
    elector: LeaderElector,
    standing: Standing,
}

/// The shard loop of one replica. See the [module docs](self).
pub struct Sharder {
    config: ShardConfig,
    leases: Api<Lease>,
    client: kube::Client,
    tenures: Arc<Tenures>,
    manager: Manager,
    metrics: Arc<Metrics>,
    /// Membership Leases as last seen: resourceVersion, and when first seen so.
    seen: HashMap<String, (String, Instant)>,
    guests: BTreeMap<String, GuestLease>,
    /// Guests this replica stopped running and forgot whose Lease may still need removing:
    /// kept until a round's view shows no replica runs them (then the Lease goes) or this
    /// replica runs them again. Two replicas that stop running a guest in the same moment
    /// each still see the other run it; neither may forget the Lease on that view.
    departed: BTreeSet<String>,
    /// Set once the first tick has decided this replica's guests.
    decided: tokio::sync::watch::Sender<bool>,
    /// Set when the replica begins to stop: it wants no guest any more, says so on its
    /// membership Lease, and hands each guest over once its running reconciles finish.
    leaving: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for Sharder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharder")
            .field("identity", &self.config.identity)
            .finish_non_exhaustive()
    }
}

impl Sharder {
    /// The shard loop of `manager`'s guests, granting them through `tenures` (the ones the
    /// manager was started with).
    pub fn new(
        client: kube::Client,
        config: ShardConfig,
        tenures: Arc<Tenures>,
        manager: Manager,
        metrics: Arc<Metrics>,
    ) -> Self {
        Sharder {
            leases: Api::namespaced(client.clone(), &config.namespace),
            client,
            config,
            tenures,
            manager,
            metrics,
            seen: HashMap::new(),
            guests: BTreeMap::new(),
            departed: BTreeSet::new(),
            decided: tokio::sync::watch::channel(false).0,
            leaving: tokio::sync::watch::channel(false).0,
        }
    }

    /// A sender that starts the handover of every guest: set it when the host begins to stop,
    /// before waiting for the running reconciles; [`run`](Self::run)'s `stop` then ends the
    /// loop and releases what is left.
    pub fn leaving(&self) -> tokio::sync::watch::Sender<bool> {
        self.leaving.clone()
    }

    /// `true` once the first round has decided which guests run here (readiness).
    pub fn decided(&self) -> tokio::sync::watch::Receiver<bool> {
        self.decided.subscribe()
    }

    /// Run rounds every retry period until `stop` resolves; then release every guest Lease
    /// held (the manager must have stopped its workers first) and delete the membership Lease.
    pub async fn run(mut self, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        tracing::info!(
            "sharding guests as {} in group {}/{}",
            self.config.identity,
            self.config.namespace,
            self.config.group
        );
        loop {
            // While a round waits on the API server, a watchdog stops the guests whose fences
            // close meanwhile: a guest stops at its deadline, not at the round's end.
            let (tenures, metrics) = (self.tenures.clone(), self.metrics.clone());
            let watchdog = async move {
                loop {
                    tokio::time::sleep(WATCHDOG_PERIOD).await;
                    for guest in tenures.close_expired() {
                        tracing::warn!(
                            "stopping guest {guest}: its Lease could not be renewed within the deadline"
                        );
                        metrics.count_lease_lost(&guest);
                        metrics
                            .shard_owned
                            .get_or_create(&GuestLabel { guest })
                            .set(0);
                    }
                }
            };
            let round = tokio::time::timeout(self.config.renew_deadline, self.round());
            tokio::select! {
                () = &mut stop => break,
                done = round => if done.is_err() {
                    tracing::warn!("a shard round took longer than the renew deadline");
                },
                () = watchdog => {}
            }
            // A round cut short (the API server answering slowly or not at all) still stops
            // the guests whose fences have closed.
            self.enforce_fences();
            self.decided.send_replace(true);
            let mut leaving = self.leaving.subscribe();
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep(self.config.retry_period) => {}
                // Hand over at once rather than at the next period.
                _ = leaving.wait_for(|l| *l), if !*leaving.borrow() => {}
            }
        }
        self.leave().await;
    }

    /// Stop every guest held here whose fence has closed (no renewal within the deadline).
    fn enforce_fences(&mut self) {
        for (name, lease) in &mut self.guests {
            if lease.standing != Standing::Idle && !self.tenures.fence(name).is_open() {
                if self.tenures.is_running(name) {
                    tracing::warn!(
                        "stopping guest {name}: its Lease could not be renewed within the deadline"
                    );
                    self.metrics.count_lease_lost(name);
                }
                self.tenures.revoke(name);
                lease.standing = Standing::Idle;
                self.metrics
                    .shard_owned
                    .get_or_create(&GuestLabel {
                        guest: name.clone(),
                    })
                    .set(0);
            }
        }
    }

    /// One round: renew membership, see who is alive, compute the assignment, act on it.
    ///
    /// The round acts on one snapshot of the guests this replica runs, the one its membership
    /// Lease announces: were the announcement older than what the round acts on, two replicas
    /// that stop running a guest at once could each see the other still run it.
    async fn round(&mut self) {
        let running = self.manager.controllers();
        if let Err(err) = self.renew_membership(&running).await {
            tracing::warn!("renewing the membership Lease: {err}");
        }
        for name in running.keys() {
            if !self.guests.contains_key(name) {
                let mut config =
                    LeaderConfig::new(&self.config.guest_lease(name), &self.config.namespace);
                config.identity = self.config.identity.clone();
                config.lease_duration = self.config.lease_duration;
                config.renew_deadline = self.config.renew_deadline;
                config.retry_period = self.config.retry_period;
                config.labels = self.labels("guest");
                // At zero from the start: an alert on its increase sees the first loss.
                let _ = self.metrics.leases_lost.get_or_create(&GuestLabel {
                    guest: name.clone(),
                });
                self.guests.insert(
                    name.clone(),
                    GuestLease {
                        elector: LeaderElector::new(self.client.clone(), config),
                        standing: Standing::Idle,
                    },
                );
            }
        }
        let leaving = *self.leaving.borrow();
        // Guests no replica runs any more (their manifests deleted everywhere), as this round's
        // view tells; `None` without a view, or when a replica does not say what it runs.
        let mut unrun: Option<BTreeSet<String>> = None;
        // Without a view of the group, keep what is held (renewing it) and take nothing.
        let mine: Vec<String> = match self.view(&running).await {
            Ok(_) if leaving => Vec::new(),
            Ok(members) => {
                if members.iter().all(|(_, runs)| runs.is_some()) {
                    unrun = Some(
                        self.guests
                            .keys()
                            .chain(&self.departed)
                            .filter(|name| {
                                !running.contains_key(*name)
                                    && members.iter().all(|(_, runs)| {
                                        runs.as_ref().is_some_and(|r| !r.contains(*name))
                                    })
                            })
                            .cloned()
                            .collect(),
                    );
                }
                self.metrics
                    .shard_replicas
                    .set(i64::try_from(members.len()).unwrap_or(i64::MAX));
                let mut all: BTreeSet<&str> = running.keys().map(String::as_str).collect();
                for (_, runs) in &members {
                    all.extend(runs.iter().flatten().map(String::as_str));
                }
                let all: Vec<&str> = all.into_iter().collect();
                let view: Vec<Member<'_>> = members
                    .iter()
                    .map(|(identity, runs)| (identity.as_str(), runs.as_ref()))
                    .collect();
                assign_runnable(&all, &view)
                    .remove(self.config.identity.as_str())
                    .unwrap_or_default()
                    .into_iter()
                    .map(str::to_owned)
                    .collect()
            }
            Err(err) => {
                tracing::warn!("listing the shard group's Leases: {err}");
                self.guests
                    .iter()
                    .filter(|(_, g)| g.standing == Standing::Held)
                    .map(|(name, _)| name.clone())
                    .collect()
            }
        };
        let steps = self.guests.iter_mut().map(|(name, lease)| {
            let wanted = mine.contains(name);
            let controller = running.get(name).cloned();
            let tenures = self.tenures.clone();
            let metrics = self.metrics.clone();
            let deadline = self.config.renew_deadline;
            async move {
                step(
                    name, lease, wanted, controller, &tenures, deadline, &metrics,
                )
                .await;
                metrics
                    .shard_owned
                    .get_or_create(&GuestLabel {
                        guest: name.clone(),
                    })
                    .set(i64::from(lease.standing == Standing::Held));
            }
        });
        futures::future::join_all(steps).await;
        // Guests gone from the manager and no longer held are forgotten with their series;
        // those no replica runs any more lose their Lease too.
        let forgotten: Vec<String> = self
            .guests
            .iter()
            .filter(|(name, lease)| {
                !running.contains_key(*name) && lease.standing == Standing::Idle
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in forgotten {
            self.guests.remove(&name);
            self.metrics.shard_owned.remove(&GuestLabel {
                guest: name.clone(),
            });
            self.metrics.leases_lost.remove(&GuestLabel {
                guest: name.clone(),
            });
            self.departed.insert(name);
        }
        // The last replica to stop running a guest removes its Lease; every replica that
        // stopped running it tries until the view agrees (the removal is conditional).
        self.departed.retain(|name| !running.contains_key(name));
        let unrun: Vec<String> = self
            .departed
            .iter()
            .filter(|name| unrun.as_ref().is_some_and(|unrun| unrun.contains(*name)))
            .cloned()
            .collect();
        for name in unrun {
            if self.delete_guest_lease(&name).await {
                self.departed.remove(&name);
            }
        }
    }

    /// Delete the Lease of `guest`, which no replica runs any more, unless another replica
    /// holds it (a replica that runs the guest again since this round's view). True when
    /// nothing is left to do: the Lease is gone or another replica holds it.
    async fn delete_guest_lease(&self, guest: &str) -> bool {
        let name = self.config.guest_lease(guest);
        let lease = match self.leases.get_opt(&name).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return true,
            Err(err) => {
                tracing::debug!("reading the Lease {name} of deleted guest {guest}: {err}");
                return false;
            }
        };
        let holder = lease
            .spec
            .as_ref()
            .and_then(|spec| spec.holder_identity.as_deref())
            .unwrap_or_default();
        if !holder.is_empty() && holder != self.config.identity {
            return true;
        }
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                resource_version: lease.metadata.resource_version.clone(),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match self.leases.delete(&name, &params).await {
            Ok(_) => {
                tracing::info!("removed the Lease {name} of deleted guest {guest}");
                true
            }
            Err(kube::Error::Api(status)) if status.code == 404 => true,
            Err(err) => {
                tracing::debug!("removing the Lease {name} of deleted guest {guest}: {err}");
                false
            }
        }
    }

    /// Create or renew this replica's membership Lease, announcing the guests of `running`.
    async fn renew_membership(
        &self,
        running: &BTreeMap<String, Arc<crate::controller::Controller>>,
    ) -> Result<(), kube::Error> {
        let name = self.config.member_lease();
        let spec = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(lease_seconds(self.config.lease_duration)),
            renew_time: Some(now()),
            ..Default::default()
        };
        // A leaving replica runs no guest as far as the others are concerned.
        let guests: Vec<String> = if *self.leaving.borrow() {
            Vec::new()
        } else {
            running.keys().cloned().collect()
        };
        let annotations: BTreeMap<String, String> =
            [(GUESTS_ANNOTATION.to_owned(), guests.join(","))].into();
        match self.leases.get_opt(&name).await? {
            Some(mut lease) => {
                lease
                    .metadata
                    .annotations
                    .get_or_insert_default()
                    .extend(annotations);
                let acquired = lease.spec.as_ref().and_then(|s| s.acquire_time.clone());
                lease.spec = Some(LeaseSpec {
                    acquire_time: acquired,
                    ..spec
                });
                self.leases
                    .replace(&name, &PostParams::default(), &lease)
                    .await?;
            }
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name),
                        namespace: Some(self.config.namespace.clone()),
                        labels: Some(self.labels("replica")),
                        annotations: Some(annotations),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        acquire_time: Some(now()),
                        ..spec
                    }),
                };
                self.leases.create(&PostParams::default(), &lease).await?;
            }
        }
        Ok(())
    }

    /// The labels of this group's Leases of `role`.
    fn labels(&self, role: &str) -> BTreeMap<String, String> {
        [
            (GROUP_LABEL.to_owned(), self.config.group.clone()),
            (ROLE_LABEL.to_owned(), role.to_owned()),
        ]
        .into()
    }

    /// One list of the group's Leases: the guest Leases' versions are noted (so that a Lease
    /// left unrenewed by a dead replica is known expired as soon as possible), and the
    /// replicas alive, this one included, are returned in order with the guests each runs
    /// (`None` when its Lease does not say; this one runs `running`).
    async fn view(
        &mut self,
        running: &BTreeMap<String, Arc<crate::controller::Controller>>,
    ) -> Result<Vec<(String, Option<BTreeSet<String>>)>, kube::Error> {
        let selector = format!("{GROUP_LABEL}={}", self.config.group);
        let leases = self
            .leases
            .list(&ListParams::default().labels(&selector))
            .await?;
        let mine: BTreeSet<String> = running.keys().cloned().collect();
        let mut alive = vec![(self.config.identity.clone(), Some(mine))];
        let mut present = Vec::new();
        let guest_prefix = format!("{}-", self.config.group);
        for lease in leases {
            let Some(name) = lease.metadata.name.clone() else {
                continue;
            };
            let version = lease.metadata.resource_version.clone().unwrap_or_default();
            let role = lease
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(ROLE_LABEL))
                .map(String::as_str);
            if role == Some("guest") {
                let guest = name.strip_prefix(&guest_prefix).unwrap_or(&name);
                if let Some(held) = self.guests.get_mut(guest) {
                    held.elector.observe(&version);
                }
                continue;
            }
            present.push(name.clone());
            let runs: Option<BTreeSet<String>> = lease
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(GUESTS_ANNOTATION))
                .map(|list| {
                    list.split(',')
                        .filter(|g| !g.is_empty())
                        .map(str::to_owned)
                        .collect()
                });
            let spec = lease.spec.unwrap_or_default();
            let Some(holder) = spec.holder_identity.filter(|h| !h.is_empty()) else {
                continue;
            };
            let seen_at = match self.seen.get(&name) {
                Some((seen, at)) if *seen == version => *at,
                _ => {
                    let at = Instant::now();
                    self.seen.insert(name.clone(), (version.clone(), at));
                    at
                }
            };
            let duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(self.config.lease_duration, Duration::from_secs);
            if holder != self.config.identity && seen_at.elapsed() < duration {
                alive.push((holder, runs));
            } else if holder != self.config.identity
                && seen_at.elapsed() >= duration * FORGET_AFTER_LEASES
            {
                // A replica that died without leaving: its Lease goes, unless renewed meanwhile.
                let params = DeleteParams {
                    preconditions: Some(kube::api::Preconditions {
                        resource_version: Some(version),
                        uid: None,
                    }),
                    ..DeleteParams::default()
                };
                match self.leases.delete(&name, &params).await {
                    Ok(_) => {
                        tracing::info!("removed the membership Lease {name} of a gone replica")
                    }
                    Err(err) => tracing::debug!("removing the membership Lease {name}: {err}"),
                }
            }
        }
        self.seen.retain(|name, _| present.contains(name));
        alive.sort();
        alive.dedup_by(|a, b| a.0 == b.0);
        Ok(alive)
    }

    /// Stop: release every guest Lease held, delete the membership Lease.
    async fn leave(mut self) {
        let (tenures, metrics) = (&self.tenures, &self.metrics);
        let releases = self.guests.iter_mut().map(|(name, lease)| async move {
            // Every guest Lease, not only those held as far as this replica knows: a take
            // whose answer was cut short by a round's timeout holds one unknowingly (release
            // checks the holder).
            tenures.revoke(name);
            let _ = lease.elector.release().await;
            lease.standing = Standing::Idle;
            metrics
                .shard_owned
                .get_or_create(&GuestLabel {
                    guest: name.clone(),
                })
                .set(0);
        });
        futures::future::join_all(releases).await;
        let name = self.config.member_lease();
        match self.leases.delete(&name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!("left the shard group {}", self.config.group),
            Err(err) => tracing::warn!("deleting the membership Lease {name}: {err}"),
        }
    }
}

/// One guest's move in a round: take it, renew it, hand it over or leave it.
async fn step(
    name: &str,
    lease: &mut GuestLease,
    wanted: bool,
    controller: Option<Arc<crate::controller::Controller>>,
    tenures: &Tenures,
    renew_deadline: Duration,
    metrics: &Metrics,
) {
    if lease.standing == Standing::Idle && !wanted {
        return;
    }
    if lease.standing == Standing::Held && !wanted {
        tracing::info!("handing guest {name} over: no new reconciles, finishing the running ones");
        tenures.pause(name);
        lease.standing = Standing::Draining;
    }
    let drained = controller.as_ref().is_none_or(|c| c.stats().active() == 0);
    if lease.standing == Standing::Draining && !wanted && drained {
        tenures.revoke(name);
        if lease.elector.release().await {
            lease.standing = Standing::Idle;
            tracing::info!("handed guest {name} over");
            return;
        }
        // Not released: keep renewing (fenced off, gate closed) and try again next round,
        // rather than leave the taker to wait out the lease duration.
    }
    // Take, renew, or keep renewing while draining.
    let sent = Instant::now();
    let outcome = tokio::time::timeout(renew_deadline, lease.elector.try_acquire_or_renew()).await;
    match outcome {
        Ok(Ok(true)) => {
            let until = sent + renew_deadline;
            match lease.standing {
                Standing::Idle => {
                    // Opening the gate queues every key of the guest (Controller::new).
                    tenures.grant(name, until);
                    lease.standing = Standing::Held;
                    tracing::info!("took guest {name}: resyncing its keys");
                }
                Standing::Draining if wanted => {
                    tenures.grant(name, until);
                    lease.standing = Standing::Held;
                    tracing::info!("keeping guest {name}");
                }
                // Granted again, not only extended: the watchdog may have closed the gate while
                // this renewal was late, and the Lease is still this replica's.
                Standing::Held => tenures.grant(name, until),
                Standing::Draining => tenures.extend(name, until),
            }
        }
        Ok(Ok(false)) => {
            if lease.standing != Standing::Idle {
                tracing::warn!("lost guest {name}: its Lease is held by another replica");
                metrics.count_lease_lost(name);
                tenures.revoke(name);
                lease.standing = Standing::Idle;
            }
        }
        // The guest stays while its fence is open; the watchdog and the round's end stop it
        // once the fence has closed (`enforce_fences`).
        Ok(Err(err)) => tracing::warn!("renewing guest {name}'s Lease: {err}"),
        Err(_) => tracing::warn!("renewing guest {name}'s Lease timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::Runner;
    use crate::guest::script::Script;
    use crate::guests::ManagerOptions;
    use crate::manifest::Manifest;

    const GUESTS: [&str; 4] = ["g0", "g1", "g2", "g3"];

    /// A replica: a manager running the four scripted guests and its shard loop, in this
    /// process, against `client`'s API server.
    struct Replica {
        tenures: Arc<Tenures>,
        manager: Manager,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Replica {
        async fn start(client: &kube::Client, identity: &str) -> Replica {
            let tenures = Tenures::new();
            let script: Arc<dyn Runner> = Script::new(Vec::new());
            let manifests = manifests(&GUESTS);
            let options = ManagerOptions {
                tenures: Some(tenures.clone()),
                runners: GUESTS
                    .iter()
                    .map(|g| ((*g).to_owned(), script.clone()))
                    .collect(),
                ..Default::default()
            };
            let manager = Manager::start_with(
                crate::cluster::client::ApiClient::new(client.clone()),
                manifests,
                options,
            )
            .await
            .expect("manager");
            let mut config = ShardConfig::new("krec", "default");
            config.identity = identity.to_owned();
            let sharder = Sharder::new(
                client.clone(),
                config,
                tenures.clone(),
                manager.clone(),
                Arc::new(Metrics::new()),
            );
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(sharder.run(async move {
                let _ = stopped.await;
            }));
            Replica {
                tenures,
                manager,
                stop: Some(stop),
                task,
            }
        }

        fn running(&self) -> Vec<&'static str> {
            GUESTS
                .into_iter()
                .filter(|g| self.tenures.is_running(g))
                .collect()
        }

        /// Stop as a SIGKILL would: no handover, no release.
        fn crash(self) {
            self.task.abort();
        }

        /// Stop cleanly: hand over, release, leave.
        async fn leave(mut self) {
            if let Some(stop) = self.stop.take() {
                let _ = stop.send(());
            }
            let _ = self.task.await;
            self.manager.shutdown(Duration::from_secs(1)).await;
        }
    }

    /// The manifests of `guests`, scripted reconcilers of ConfigMaps.
    fn manifests(guests: &[&str]) -> Vec<Manifest> {
        guests
            .iter()
            .map(|g| {
                let text = format!(
                    "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: {g}}}\nspec:\n  module: {g}.wasm\n  for: {{apiVersion: v1, kind: ConfigMap}}\n  namespaces: [default]\n  permissions:\n    - {{apiVersion: v1, kind: ConfigMap, verbs: [get, list, watch]}}\n"
                );
                Manifest::parse(std::path::Path::new("m.yaml"), &text).expect("manifest")
            })
            .collect()
    }

    fn cluster() -> (kube::Client, tokio::sync::watch::Sender<bool>) {
        let (_, app, stop) = krec_apiserver::in_process(Arc::default()).expect("api server");
        (kube::Client::new(app, "default"), stop)
    }

    /// Each guest runs in exactly one of `replicas`; their counts.
    fn spread(replicas: &[&Replica]) -> Vec<usize> {
        for guest in GUESTS {
            let owners = replicas
                .iter()
                .filter(|r| r.tenures.is_running(guest))
                .count();
            assert!(owners <= 1, "{guest} runs in {owners} replicas");
        }
        replicas.iter().map(|r| r.running().len()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn two_replicas_should_share_the_guests_and_a_survivor_take_a_crashed_ones() {
        let (client, _stop) = cluster();
        let a = Replica::start(&client, "a").await;
        let b = Replica::start(&client, "b").await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(spread(&[&a, &b]), [2, 2]);
        let b_had = b.running();
        b.crash();
        // b's guest Leases stay held until a has seen them unrenewed for the lease duration
        // (15 s), then a takes them at its next round (2 s).
        tokio::time::sleep(Duration::from_secs(14)).await;
        assert_eq!(a.running().len(), 2, "not before the lease duration");
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(a.running(), GUESTS, "b's guests {b_had:?} moved to a");
        a.leave().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_leaving_replica_should_hand_its_guests_over_at_once() {
        let (client, _stop) = cluster();
        let a = Replica::start(&client, "a").await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(a.running(), GUESTS, "alone: all four");
        let b = Replica::start(&client, "b").await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(spread(&[&a, &b]), [2, 2], "rebalanced when b joined");
        a.leave().await;
        // Released, not expired: b takes them at its next rounds, well within a lease duration.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(b.running(), GUESTS);
        b.leave().await;
        let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
        for lease in leases.list(&ListParams::default()).await.expect("leases") {
            let spec = lease.spec.unwrap_or_default();
            assert!(
                spec.holder_identity.is_none(),
                "{:?} still held after both left",
                lease.metadata.name
            );
        }
    }

    /// A replica that stops running a guest while another still announces it keeps the
    /// guest's Lease in mind: once no replica alive runs it, the Lease goes. Here the other
    /// replica crashes still announcing it; its membership expires, and the Lease is removed.
    #[tokio::test(start_paused = true)]
    async fn a_deleted_guests_lease_should_go_once_no_replica_alive_runs_it() {
        let (client, _stop) = cluster();
        let a = Replica::start(&client, "a").await;
        let b = Replica::start(&client, "b").await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(spread(&[&a, &b]), [2, 2]);
        let (holder, other) = if a.tenures.is_running("g3") {
            (a, b)
        } else {
            (b, a)
        };
        let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
        let config = ShardConfig::new("krec", "default");
        let lease = config.guest_lease("g3");
        assert!(leases.get_opt(&lease).await.expect("read").is_some());
        other.crash();
        holder
            .manager
            .apply(manifests(&GUESTS[..3]).into_iter().map(Ok).collect())
            .await;
        // The crashed replica is alive for the lease duration (15 s), announcing g3.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let left = leases.get_opt(&lease).await.expect("read");
        assert!(
            left.is_some(),
            "{lease} removed while a replica alive runs g3"
        );
        assert_eq!(
            left.and_then(|l| l.spec).and_then(|s| s.holder_identity),
            None,
            "released"
        );
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(
            leases.get_opt(&lease).await.expect("read").is_none(),
            "{lease} left behind"
        );
        assert!(
            leases
                .get_opt(&config.guest_lease("g0"))
                .await
                .expect("read")
                .is_some(),
            "the others' stay"
        );
        holder.leave().await;
    }

    #[test]
    fn lease_names_should_be_valid_object_names() {
        let mut config = ShardConfig::new("krec", "default");
        config.identity = "Node_1.example_ab12cd34".into();
        assert_eq!(
            config.member_lease(),
            "krec-replica-node-1.example-ab12cd34"
        );
        assert_eq!(config.guest_lease("foo"), "krec-foo");
        assert!(config.validate().is_ok(), "the defaults fence");
        config.renew_deadline = config.lease_duration;
        let err = config.validate().expect_err("deadline = duration");
        assert!(err.to_string().contains("renew deadline"), "{err}");
    }
}
