//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection` does it,
//! so that of several replicas of a host exactly one runs reconciles.
//!
//! Every `retry_period` each candidate reads the Lease. The holder renews it (`renewTime`);
//! another candidate takes it over only once the holder has not renewed it for
//! `lease_duration`, as measured on the candidate's own clock from when it last saw the Lease
//! change (so clock skew between hosts does not matter). A holder that cannot renew for
//! `renew_deadline` steps down. Writes carry the Lease's `resourceVersion`, so two candidates
//! never both win: the loser gets a conflict. On shutdown the holder releases the Lease (empty
//! holder, 1 s duration) so a standby takes over at once.
//!
//! The state is published on a [`tokio::sync::watch`] channel: `None` until the first attempt
//! has an answer, then whether this host leads. Only the leader runs workers; a standby keeps
//! its caches warm.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;

/// Leader election settings; the defaults are controller-runtime's.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// The Lease's name.
    pub lease_name: String,
    /// The Lease's namespace.
    pub namespace: String,
    /// This candidate's identity (unique per process).
    pub identity: String,
    /// How long a Lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// How long the holder keeps trying to renew before it steps down.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire, and the holder renews.
    pub retry_period: Duration,
    /// Labels the Lease is created with.
    pub labels: std::collections::BTreeMap<String, String>,
}

impl LeaderConfig {
    /// controller-runtime's defaults (15 s, 10 s, 2 s) for `lease_name` in `namespace`, with an
    /// identity of the host name and a random suffix.
    pub fn new(lease_name: &str, namespace: &str) -> Self {
        LeaderConfig {
            lease_name: lease_name.to_owned(),
            namespace: namespace.to_owned(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            labels: std::collections::BTreeMap::new(),
        }
    }
}

/// A unique identity for this process: the host name and a random suffix, as client-go's
/// leader election uses (`<host>_<8 hex digits>`).
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "krec".into());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}_{}", &suffix[..8])
}

/// A candidate for the Lease. See the [module docs](self).
pub struct LeaderElector {
    leases: Api<Lease>,
    config: LeaderConfig,
    state: watch::Sender<Option<bool>>,
    /// The Lease as last seen (resourceVersion) and when it was first seen so.
    observed: Option<(String, Instant)>,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("identity", &self.config.identity)
            .finish_non_exhaustive()
    }
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// `d` as a Lease's `leaseDurationSeconds`: whole seconds, rounded up (at least 1), so that
/// others never wait less than this holder counts on — what fencing relies on.
pub fn lease_seconds(d: Duration) -> i32 {
    let whole = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(whole.max(1)).unwrap_or(i32::MAX)
}

impl LeaderElector {
    /// A candidate using `client`.
    pub fn new(client: kube::Client, config: LeaderConfig) -> Self {
        LeaderElector {
            leases: Api::namespaced(client, &config.namespace),
            state: watch::channel(None).0,
            config,
            observed: None,
        }
    }

    /// `None` until the first attempt is decided, then whether this candidate leads.
    pub fn subscribe(&self) -> watch::Receiver<Option<bool>> {
        self.state.subscribe()
    }

    /// Note the Lease's `resourceVersion` as seen now (from a list, say): the lease duration
    /// runs from the first time each version is seen. Returns when this version was first seen.
    pub fn observe(&mut self, version: &str) -> Instant {
        match &self.observed {
            Some((seen, at)) if seen == version => *at,
            _ => {
                let at = Instant::now();
                self.observed = Some((version.to_owned(), at));
                at
            }
        }
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// Try to acquire or renew the Lease once. `Ok(true)` when this candidate holds it now.
    ///
    /// # Errors
    ///
    /// When the API server cannot be reached or refuses for another reason than a conflict.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let me = self.config.identity.clone();
        let duration = lease_seconds(self.config.lease_duration);
        let existing = match self.leases.get_opt(&self.config.lease_name).await? {
            Some(lease) => lease,
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.lease_name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        labels: (!self.config.labels.is_empty())
                            .then(|| self.config.labels.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(me),
                        lease_duration_seconds: Some(duration),
                        acquire_time: Some(now()),
                        renew_time: Some(now()),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                return match self.leases.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(err) => Err(err),
                };
            }
        };
        let version = existing
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        let seen_at = self.observe(&version);
        let spec = existing.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let held_for = spec
            .lease_duration_seconds
            .map_or(self.config.lease_duration, |s| {
                Duration::from_secs(u64::try_from(s).unwrap_or(0))
            });
        let mine = holder == me;
        let expired = holder.is_empty() || seen_at.elapsed() >= held_for;
        if !mine && !expired {
            return Ok(false);
        }
        let mut lease = existing;
        let mut next = spec;
        if !mine {
            next.holder_identity = Some(me);
            next.acquire_time = Some(now());
            next.lease_transitions = Some(next.lease_transitions.unwrap_or(0) + 1);
        }
        next.lease_duration_seconds = Some(duration);
        next.renew_time = Some(now());
        lease.spec = Some(next);
        match self
            .leases
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(err) => Err(err),
        }
    }

    fn publish(&self, leading: bool) {
        let before = *self.state.borrow();
        if before != Some(leading) {
            if leading {
                tracing::info!(
                    "became the leader on Lease {}/{} as {}",
                    self.config.namespace,
                    self.config.lease_name,
                    self.config.identity
                );
            } else if before == Some(true) {
                tracing::warn!(
                    "lost the Lease {}/{}: workers stop",
                    self.config.namespace,
                    self.config.lease_name
                );
            } else {
                tracing::info!(
                    "standing by: Lease {}/{} is held by another host",
                    self.config.namespace,
                    self.config.lease_name
                );
            }
            self.state.send_replace(Some(leading));
        }
    }

    /// Campaign and renew until `stop` resolves; then release the Lease if held.
    pub async fn run(mut self, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        let mut last_renewal: Option<Instant> = None;
        loop {
            let mut leading = *self.state.borrow() == Some(true);
            // A leader that has not renewed within the renew deadline steps down before anyone
            // else can take the Lease (renew deadline < lease duration).
            let budget = match (leading, last_renewal) {
                (true, Some(at)) => self.config.renew_deadline.saturating_sub(at.elapsed()),
                _ => self.config.renew_deadline,
            };
            if leading && budget.is_zero() {
                self.publish(false);
                leading = false;
            }
            let budget = if leading {
                budget
            } else {
                self.config.renew_deadline
            };
            let outcome = tokio::select! {
                () = &mut stop => break,
                outcome = tokio::time::timeout(budget, self.try_acquire_or_renew()) => outcome,
            };
            match outcome {
                Ok(Ok(true)) => {
                    last_renewal = Some(Instant::now());
                    self.publish(true);
                }
                Ok(Ok(false)) => self.publish(false),
                Ok(Err(err)) => {
                    tracing::warn!(
                        "leader election on {}/{}: {err}",
                        self.config.namespace,
                        self.config.lease_name
                    );
                    let deadline_passed =
                        last_renewal.is_none_or(|t| t.elapsed() >= self.config.renew_deadline);
                    if !leading || deadline_passed {
                        self.publish(false);
                    }
                }
                Err(_) => self.publish(false),
            }
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
        let _ = self.release().await;
    }

    /// Give the Lease up if this candidate holds it: empty holder, 1 s duration. Returns
    /// whether the Lease is not this candidate's any more (released now, or held by another, or
    /// gone); `false` when the API server could not be asked or refused.
    pub async fn release(&mut self) -> bool {
        self.state.send_replace(Some(false));
        let mut lease = match self.leases.get_opt(&self.config.lease_name).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return true,
            Err(err) => {
                tracing::warn!("releasing the Lease {}: {err}", self.config.lease_name);
                return false;
            }
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return true;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        lease.spec = Some(spec);
        match self
            .leases
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                tracing::info!(
                    "released the Lease {}/{}",
                    self.config.namespace,
                    self.config.lease_name
                );
                true
            }
            Err(err) => {
                tracing::warn!("releasing the Lease {}: {err}", self.config.lease_name);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A client of an API server in this process (no socket: the clock may be paused).
    fn cluster() -> (kube::Client, watch::Sender<bool>) {
        let (_, app, stop) = krec_apiserver::in_process(Arc::default()).expect("api server");
        (kube::Client::new(app, "default"), stop)
    }

    fn candidate(client: &kube::Client, identity: &str) -> LeaderElector {
        let mut config = LeaderConfig::new("lease", "default");
        config.identity = identity.to_owned();
        LeaderElector::new(client.clone(), config)
    }

    async fn lease(client: &kube::Client) -> LeaseSpec {
        let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
        leases
            .get("lease")
            .await
            .expect("lease")
            .spec
            .expect("spec")
    }

    #[tokio::test(start_paused = true)]
    async fn a_candidate_should_take_the_lease_only_once_its_holder_stops_renewing() {
        let (client, _stop) = cluster();
        let (mut a, mut b) = (candidate(&client, "a"), candidate(&client, "b"));
        assert!(a.try_acquire_or_renew().await.expect("a"), "free: taken");
        assert!(!b.try_acquire_or_renew().await.expect("b"), "held");
        tokio::time::advance(Duration::from_secs(14)).await;
        assert!(
            !b.try_acquire_or_renew().await.expect("b"),
            "14 s unrenewed, on b's clock: still a's"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(b.try_acquire_or_renew().await.expect("b"), "15 s: b's");
        let spec = lease(&client).await;
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(1));
        assert!(
            !a.try_acquire_or_renew().await.expect("a"),
            "a sees b's fresh renewal"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewing_holder_should_keep_the_lease() {
        let (client, _stop) = cluster();
        let (mut a, mut b) = (candidate(&client, "a"), candidate(&client, "b"));
        assert!(a.try_acquire_or_renew().await.expect("a"));
        for _ in 0..20 {
            tokio::time::advance(Duration::from_secs(2)).await;
            assert!(a.try_acquire_or_renew().await.expect("a renews"));
            assert!(!b.try_acquire_or_renew().await.expect("b waits"));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_lease_should_be_taken_at_once() {
        let (client, _stop) = cluster();
        let (mut a, mut b) = (candidate(&client, "a"), candidate(&client, "b"));
        assert!(a.try_acquire_or_renew().await.expect("a"));
        assert!(a.release().await, "released");
        assert!(b.try_acquire_or_renew().await.expect("b"), "free at once");
        assert!(a.release().await, "not a's any more: nothing to do");
        assert_eq!(lease(&client).await.holder_identity.as_deref(), Some("b"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_lease_duration_should_be_written_rounded_up() {
        let (client, _stop) = cluster();
        let mut config = LeaderConfig::new("lease", "default");
        config.lease_duration = Duration::from_millis(2500);
        let mut a = LeaderElector::new(client.clone(), config);
        assert!(a.try_acquire_or_renew().await.expect("a"));
        assert_eq!(lease(&client).await.lease_duration_seconds, Some(3));
        assert_eq!(lease_seconds(Duration::from_millis(10)), 1);
        assert_eq!(lease_seconds(Duration::from_secs(15)), 15);
    }

    #[tokio::test(start_paused = true)]
    async fn run_should_lead_until_stopped_then_release() {
        let (client, _stop) = cluster();
        let a = candidate(&client, "a");
        let mut state = a.subscribe();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(a.run(async move {
            let _ = stopped.await;
        }));
        state.wait_for(|s| *s == Some(true)).await.expect("leads");
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(*state.borrow(), Some(true), "renewed all along");
        let _ = stop.send(());
        running.await.expect("run");
        assert_eq!(lease(&client).await.holder_identity, None, "released");
    }
}
