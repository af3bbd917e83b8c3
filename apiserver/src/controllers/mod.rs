//! The built-in controllers and the simulated nodes: what kube-controller-manager, kube-scheduler
//! and the kubelets do in a real cluster, so a Deployment gets its ReplicaSet, the ReplicaSet its
//! Pods, and the Pods a node, an IP and a `Running` phase — without containers.
//!
//! Everything runs in one task of the server process ([`spawn`]), reading the store directly and
//! following its change feed: each change names the work it causes (a Pod change wakes its
//! owner's controller, the scheduler when it is unbound, its node's kubelet when it is bound),
//! queued once however many changes name it, and processed until the cluster is quiet. Work that
//! fails (a conflict with another writer) is retried with backoff; work that waits on time (a
//! Pod starting, a Job's Pod finishing, `minReadySeconds`) is queued for then. A feed that falls
//! behind makes the loop re-read everything, as an informer relists.
//!
//! Behaviour follows kube-controller-manager's controllers (`pkg/controller/{deployment,
//! replicaset,job,daemon,statefulset}`) and KWOK's pod stages; where this simplifies, the
//! module of the controller says so.

mod daemonset;
mod deployment;
mod endpoints;
mod job;
mod nodes;
mod replicaset;
mod serviceaccounts;
mod statefulset;

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::admission::{self, Admission, UserInfo};
use crate::resources::ResourceType;
use crate::store::{Change, ChangeType, DeleteOptions, Store, WriteOptions};
use krec_core::error::ApiError;
use krec_core::json::Pointer as _;
use krec_core::selector::LabelSelector;

pub use nodes::{SIMULATE_ANNOTATION, Simulate};

/// One of the built-in controllers `--controllers` chooses among.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Controller {
    /// Deployments: ReplicaSets per pod template, rolling updates, status and conditions.
    Deployment,
    /// ReplicaSets: Pods to the replica count.
    ReplicaSet,
    /// StatefulSets: ordered Pods `name-0…`.
    StatefulSet,
    /// DaemonSets: one Pod per node.
    DaemonSet,
    /// Jobs: Pods run to completion, `backoffLimit`.
    Job,
    /// The scheduler: binds Pods to simulated nodes.
    Scheduler,
    /// The simulated kubelets: Pod phases, container statuses, IPs.
    Kubelet,
    /// Endpoints and EndpointSlices of Services with a selector.
    Endpoints,
    /// Each namespace's `default` ServiceAccount and `kube-root-ca.crt` ConfigMap.
    ServiceAccount,
}

impl Controller {
    /// Every controller, in the order `--controllers=all` lists them.
    pub const ALL: [Controller; 9] = [
        Controller::Deployment,
        Controller::ReplicaSet,
        Controller::StatefulSet,
        Controller::DaemonSet,
        Controller::Job,
        Controller::Scheduler,
        Controller::Kubelet,
        Controller::Endpoints,
        Controller::ServiceAccount,
    ];

    /// The name `--controllers` uses.
    pub fn name(self) -> &'static str {
        match self {
            Controller::Deployment => "deployment",
            Controller::ReplicaSet => "replicaset",
            Controller::StatefulSet => "statefulset",
            Controller::DaemonSet => "daemonset",
            Controller::Job => "job",
            Controller::Scheduler => "scheduler",
            Controller::Kubelet => "kubelet",
            Controller::Endpoints => "endpoints",
            Controller::ServiceAccount => "serviceaccount",
        }
    }
}

impl fmt::Display for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which controllers run: `all`, `none`, or a comma-separated list of
/// [names](Controller::name). Namespace deletion and owner-reference garbage collection are the
/// store's own and always on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection(BTreeSet<Controller>);

impl Selection {
    /// Every controller.
    pub fn all() -> Self {
        Selection(Controller::ALL.into_iter().collect())
    }

    /// No controller (the library's default: tests of a user's own controllers want the
    /// cluster to stay still).
    pub fn none() -> Self {
        Selection(BTreeSet::new())
    }

    /// Whether `controller` runs.
    pub fn runs(&self, controller: Controller) -> bool {
        self.0.contains(&controller)
    }

    /// Whether nothing runs.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Default for Selection {
    fn default() -> Self {
        Self::none()
    }
}

impl FromStr for Selection {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "all" => return Ok(Self::all()),
            "none" | "" => return Ok(Self::none()),
            _ => {}
        }
        let mut chosen = BTreeSet::new();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let controller = Controller::ALL
                .into_iter()
                .find(|c| c.name() == name)
                .ok_or_else(|| {
                    format!(
                        "unknown controller {name:?}: expected all, none or a list of {}",
                        Controller::ALL.map(Controller::name).join(", ")
                    )
                })?;
            chosen.insert(controller);
        }
        Ok(Selection(chosen))
    }
}

/// What runs and how the simulated cluster behaves.
#[derive(Clone, Debug)]
pub struct Config {
    /// The controllers that run.
    pub controllers: Selection,
    /// Simulated nodes `krec-node-0…` created at start (0: none).
    pub nodes: usize,
    /// How long a bound Pod stays `Pending` before its containers run.
    pub pod_start: Duration,
    /// How long a Job's Pod runs before it succeeds (unless its annotation says otherwise).
    pub job_duration: Duration,
    /// The cluster CA (PEM) published in every namespace's `kube-root-ca.crt` (the server sets
    /// it; `None`: not published).
    pub root_ca: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            controllers: Selection::none(),
            nodes: 3,
            pod_start: Duration::from_millis(500),
            job_duration: Duration::from_secs(2),
            root_ca: None,
        }
    }
}

/// Start the controllers `config` selects, following `store` until `stopped` turns true.
pub fn spawn(
    admission: Arc<Admission>,
    config: Config,
    stopped: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    if config.controllers.is_empty() {
        return None;
    }
    let engine = match Engine::new(admission, config) {
        Ok(engine) => engine,
        Err(err) => {
            tracing::error!("the built-in controllers cannot start: {err}");
            return None;
        }
    };
    Some(tokio::spawn(engine.run(stopped)))
}

/// What a controller is asked to look at.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Work {
    Deployment(String, String),
    ReplicaSet(String, String),
    StatefulSet(String, String),
    DaemonSet(String, String),
    Job(String, String),
    /// Every unbound Pod (the scheduler binds them in one pass over the nodes' usage).
    Schedule,
    /// One bound Pod's containers.
    Kubelet(String, String),
    /// A Service's Endpoints and EndpointSlice.
    Service(String, String),
    /// A namespace's default ServiceAccount and root CA ConfigMap.
    Namespace(String),
}

/// The resource types the controllers read and write.
struct Types {
    pods: ResourceType,
    nodes: ResourceType,
    replica_sets: ResourceType,
    deployments: ResourceType,
    stateful_sets: ResourceType,
    daemon_sets: ResourceType,
    jobs: ResourceType,
    events: ResourceType,
    services: ResourceType,
    endpoints: ResourceType,
    endpoint_slices: ResourceType,
    namespaces: ResourceType,
    service_accounts: ResourceType,
    config_maps: ResourceType,
}

impl Types {
    fn of(store: &Store) -> Result<Self, String> {
        let registry = store.registry();
        let get = |group: &str, version: &str, plural: &str| {
            registry
                .by_plural(group, version, plural)
                .ok_or_else(|| format!("{plural} are not registered"))
        };
        Ok(Types {
            pods: get("", "v1", "pods")?,
            nodes: get("", "v1", "nodes")?,
            replica_sets: get("apps", "v1", "replicasets")?,
            deployments: get("apps", "v1", "deployments")?,
            stateful_sets: get("apps", "v1", "statefulsets")?,
            daemon_sets: get("apps", "v1", "daemonsets")?,
            jobs: get("batch", "v1", "jobs")?,
            events: get("", "v1", "events")?,
            services: get("", "v1", "services")?,
            endpoints: get("", "v1", "endpoints")?,
            endpoint_slices: get("discovery.k8s.io", "v1", "endpointslices")?,
            namespaces: get("", "v1", "namespaces")?,
            service_accounts: get("", "v1", "serviceaccounts")?,
            config_maps: get("", "v1", "configmaps")?,
        })
    }
}

/// What one piece of work asks for next.
enum Next {
    /// Nothing until something changes.
    Done,
    /// Look again after this long (a Pod starting, `minReadySeconds` passing).
    After(Duration),
}

/// An Event's identity for counting repeats: the object's UID, the reason and the message.
type EventIdentity = (String, String, String);

/// How a workload's work item is made from its namespace and name.
type MakeWork = fn(String, String) -> Work;

/// The controllers' loop and state.
struct Engine {
    store: Arc<Store>,
    /// Writes go through admission webhooks, as a controller's writes through kube-apiserver.
    admission: Arc<Admission>,
    config: Config,
    types: Types,
    queue: BTreeSet<Work>,
    timers: BinaryHeap<Reverse<(Instant, Work)>>,
    /// Consecutive failures per piece of work, for its backoff.
    failures: HashMap<Work, u32>,
    kubelet: nodes::Kubelets,
    /// Events recorded, by (object UID, reason, message): a repeat bumps the Event's `count`,
    /// as client-go's event correlator does, instead of adding another.
    events: std::cell::RefCell<HashMap<EventIdentity, (String, String)>>,
}

/// The field manager the controllers write as (kube-controller-manager's, kube-scheduler's and
/// the kubelet's own names, as `managedFields` shows them in a real cluster).
fn options(manager: &str) -> WriteOptions {
    WriteOptions {
        manager: manager.into(),
        ..WriteOptions::default()
    }
}

const CONTROLLER_MANAGER: &str = "kube-controller-manager";

impl Engine {
    fn new(admission: Arc<Admission>, config: Config) -> Result<Self, String> {
        let store = admission.store().clone();
        let types = Types::of(&store)?;
        let kubelet = nodes::Kubelets::default();
        let engine = Engine {
            store,
            admission,
            config,
            types,
            queue: BTreeSet::new(),
            timers: BinaryHeap::new(),
            failures: HashMap::new(),
            kubelet,
            events: Default::default(),
        };
        // With kubelets to remove them, running Pods terminate gracefully, as in kube.
        engine
            .store
            .set_graceful_pod_deletion(engine.runs(Controller::Kubelet));
        if engine.runs(Controller::Scheduler) || engine.runs(Controller::Kubelet) {
            nodes::ensure_nodes(&engine.store, &engine.types.nodes, engine.config.nodes)
                .map_err(|err| format!("creating the simulated nodes: {err}"))?;
        }
        Ok(engine)
    }

    fn runs(&self, controller: Controller) -> bool {
        self.config.controllers.runs(controller)
    }

    async fn run(mut self, mut stopped: tokio::sync::watch::Receiver<bool>) {
        let mut feed = self.store.subscribe();
        self.resync();
        loop {
            self.drain();
            let next_timer = self.timers.peek().map(|Reverse((at, _))| *at);
            tokio::select! {
                _ = stopped.changed() => return,
                change = feed.recv() => match change {
                    Ok(change) => {
                        self.route(&change);
                        loop {
                            match feed.try_recv() {
                                Ok(change) => self.route(&change),
                                Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {
                                    self.resync();
                                }
                                Err(_) => break,
                            }
                        }
                    }
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!("controllers: the change feed lagged by {missed}; re-reading");
                        self.resync();
                    }
                    Err(RecvError::Closed) => return,
                },
                _ = sleep_until(next_timer), if next_timer.is_some() => {}
            }
            self.fire_timers();
        }
    }

    /// Process queued work until the queue is empty.
    fn drain(&mut self) {
        while let Some(work) = self.queue.pop_first() {
            // A bug meeting an odd object must not stop every controller: the panic is this
            // work's failure, retried with backoff like any other.
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.process(&work)))
                    .unwrap_or_else(|panic| {
                        let what = panic
                            .downcast_ref::<&str>()
                            .map(|s| (*s).to_owned())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        Err(ApiError::internal(format!("controller panicked: {what}")))
                    });
            match outcome {
                Ok(Next::Done) => {
                    self.failures.remove(&work);
                }
                Ok(Next::After(delay)) => {
                    self.failures.remove(&work);
                    self.timers.push(Reverse((
                        Instant::now() + delay.min(MAX_DELAY),
                        work.clone(),
                    )));
                }
                Err(err) => {
                    let failures = self.failures.entry(work.clone()).or_insert(0);
                    *failures += 1;
                    // 5 ms doubling to 10 s, as client-go's default controller rate limiter.
                    let delay = Duration::from_millis(5)
                        .saturating_mul(1 << (*failures - 1).min(11))
                        .min(Duration::from_secs(10));
                    if err.code == 409 {
                        tracing::debug!("controllers: {work:?}: {err}; retrying in {delay:?}");
                    } else {
                        tracing::warn!("controllers: {work:?}: {err}; retrying in {delay:?}");
                    }
                    self.timers.push(Reverse((Instant::now() + delay, work)));
                }
            }
        }
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((at, _))) = self.timers.peek() {
            if *at > now {
                break;
            }
            if let Some(Reverse((_, work))) = self.timers.pop() {
                self.queue.insert(work);
            }
        }
    }

    /// Queue every object's work, as after a relist.
    fn resync(&mut self) {
        let t = &self.types;
        let mut queue = Vec::new();
        for (rt, make) in [
            (
                &t.deployments,
                Work::Deployment as fn(String, String) -> Work,
            ),
            (&t.replica_sets, Work::ReplicaSet),
            (&t.stateful_sets, Work::StatefulSet),
            (&t.daemon_sets, Work::DaemonSet),
            (&t.jobs, Work::Job),
            (&t.pods, Work::Kubelet),
        ] {
            for object in self.store.objects(rt, None) {
                let (ns, name) = namespace_and_name(&object);
                queue.push(make(ns.into(), name.into()));
            }
        }
        queue.push(Work::Schedule);
        for service in self.store.objects(&t.services, None) {
            let (ns, name) = namespace_and_name(&service);
            queue.push(Work::Service(ns.into(), name.into()));
        }
        for namespace in self.store.objects(&t.namespaces, None) {
            queue.push(Work::Namespace(namespace_and_name(&namespace).1.into()));
        }
        for work in queue {
            self.enqueue(work);
        }
    }

    /// Queue `work` if its controller runs.
    fn enqueue(&mut self, work: Work) {
        let controller = match &work {
            Work::Deployment(..) => Controller::Deployment,
            Work::ReplicaSet(..) => Controller::ReplicaSet,
            Work::StatefulSet(..) => Controller::StatefulSet,
            Work::DaemonSet(..) => Controller::DaemonSet,
            Work::Job(..) => Controller::Job,
            Work::Schedule => Controller::Scheduler,
            Work::Kubelet(..) => Controller::Kubelet,
            Work::Service(..) => Controller::Endpoints,
            Work::Namespace(..) => Controller::ServiceAccount,
        };
        if self.runs(controller) {
            self.queue.insert(work);
        }
    }

    /// The work one change causes.
    fn route(&mut self, change: &Change) {
        let object = &change.object;
        let ns = change.key.namespace.clone();
        let name = change.key.name.clone();
        match change.key.resource.as_str() {
            "apps/deployments" => self.enqueue(Work::Deployment(ns, name)),
            "apps/replicasets" => {
                self.enqueue_owner(object, &ns);
                self.enqueue(Work::ReplicaSet(ns, name));
            }
            "apps/statefulsets" => self.enqueue(Work::StatefulSet(ns, name)),
            "apps/daemonsets" => self.enqueue(Work::DaemonSet(ns, name)),
            "batch/jobs" => self.enqueue(Work::Job(ns, name)),
            "/nodes" => {
                self.enqueue(Work::Schedule);
                for ds in self.store.objects(&self.types.daemon_sets, None) {
                    let (ns, name) = namespace_and_name(&ds);
                    self.enqueue(Work::DaemonSet(ns.into(), name.into()));
                }
            }
            "/services" | "/endpoints" => self.enqueue(Work::Service(ns, name)),
            "discovery.k8s.io/endpointslices" => {
                if let Some(service) = object
                    .at("/metadata/labels")
                    .and_then(|l| l.get("kubernetes.io/service-name"))
                    .and_then(Value::as_str)
                {
                    self.enqueue(Work::Service(ns, service.to_owned()));
                }
            }
            "/namespaces" => self.enqueue(Work::Namespace(name)),
            "/serviceaccounts" | "/configmaps"
                if change.change == ChangeType::Deleted
                    && (name == "default" || name == "kube-root-ca.crt") =>
            {
                self.enqueue(Work::Namespace(ns));
            }
            "/configmaps" if name == "kube-root-ca.crt" => self.enqueue(Work::Namespace(ns)),
            "/pods" => {
                self.enqueue_services(object, change.old.as_deref(), &ns);
                self.enqueue_owner(object, &ns);
                let unbound = node_name(object).is_empty();
                if change.change == ChangeType::Deleted || is_terminal(object) {
                    // Freed capacity may fit a Pod that did not fit before.
                    self.enqueue(Work::Schedule);
                    self.kubelet.forget(object);
                } else if unbound {
                    self.enqueue(Work::Schedule);
                } else {
                    self.enqueue(Work::Kubelet(ns, name));
                }
            }
            _ => {}
        }
    }

    /// Queue the work of the object's controlling owner; for an orphan, of every workload in
    /// its namespace whose selector matches it (one of them may adopt it).
    fn enqueue_owner(&mut self, object: &Value, ns: &str) {
        let Some(owner) = controller_of(object) else {
            if !is_deleting(object) {
                self.enqueue_adopters(object, ns);
            }
            return;
        };
        let name = owner.name.to_owned();
        let work = match (owner.api_version, owner.kind) {
            ("apps/v1", "Deployment") => Work::Deployment(ns.into(), name),
            ("apps/v1", "ReplicaSet") => Work::ReplicaSet(ns.into(), name),
            ("apps/v1", "StatefulSet") => Work::StatefulSet(ns.into(), name),
            ("apps/v1", "DaemonSet") => Work::DaemonSet(ns.into(), name),
            ("batch/v1", "Job") => Work::Job(ns.into(), name),
            _ => return,
        };
        self.enqueue(work);
    }

    /// Queue the Services in `ns` whose selector matches the Pod, before or after the change.
    fn enqueue_services(&mut self, pod: &Value, old: Option<&Value>, ns: &str) {
        if !self.runs(Controller::Endpoints) {
            return;
        }
        let found: Vec<Work> = self
            .store
            .objects(&self.types.services, Some(ns))
            .iter()
            .filter(|s| selects(s, pod) || old.is_some_and(|o| selects(s, o)))
            .map(|s| Work::Service(ns.to_owned(), namespace_and_name(s).1.to_owned()))
            .collect();
        for work in found {
            self.enqueue(work);
        }
    }

    fn enqueue_adopters(&mut self, object: &Value, ns: &str) {
        let t = &self.types;
        let adopters: Vec<(&ResourceType, MakeWork)> = match object["kind"].as_str() {
            Some("Pod") => vec![
                (
                    &t.replica_sets,
                    Work::ReplicaSet as fn(String, String) -> Work,
                ),
                (&t.stateful_sets, Work::StatefulSet),
                (&t.daemon_sets, Work::DaemonSet),
                (&t.jobs, Work::Job),
            ],
            Some("ReplicaSet") => vec![(&t.deployments, Work::Deployment)],
            _ => return,
        };
        let mut found = Vec::new();
        for (rt, make) in adopters {
            for candidate in self.store.objects(rt, Some(ns)) {
                let matches = candidate
                    .at("/spec/selector")
                    .and_then(LabelSelector::from_json)
                    .is_some_and(|s| !s.requirements.is_empty() && s.matches_object(object));
                if matches {
                    found.push(make(
                        ns.to_owned(),
                        namespace_and_name(&candidate).1.to_owned(),
                    ));
                }
            }
        }
        for work in found {
            self.enqueue(work);
        }
    }

    fn process(&mut self, work: &Work) -> Result<Next, ApiError> {
        match work {
            Work::Deployment(ns, name) => deployment::sync(self, ns, name),
            Work::ReplicaSet(ns, name) => replicaset::sync(self, ns, name),
            Work::StatefulSet(ns, name) => statefulset::sync(self, ns, name),
            Work::DaemonSet(ns, name) => daemonset::sync(self, ns, name),
            Work::Job(ns, name) => job::sync(self, ns, name),
            Work::Schedule => nodes::schedule(self),
            Work::Kubelet(ns, name) => nodes::kubelet(self, ns, name),
            Work::Service(ns, name) => endpoints::sync(self, ns, name),
            Work::Namespace(name) => serviceaccounts::sync(self, name),
        }
    }

    /// The object, or `None` when it is gone.
    fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.store.get(rt, Some(ns), name).ok()
    }

    /// The Pods in `ns` whose controlling owner has `uid`.
    fn pods_of(&self, ns: &str, uid: &str) -> Vec<Arc<Value>> {
        self.store
            .objects(&self.types.pods, Some(ns))
            .into_iter()
            .filter(|p| controller_of(p).is_some_and(|o| o.uid == uid))
            .collect()
    }

    fn create(&self, rt: &ResourceType, ns: &str, object: Value) -> Result<Arc<Value>, ApiError> {
        self.create_as(rt, ns, object, CONTROLLER_MANAGER)
    }

    /// Create through admission (straight to the store when no webhook is configured).
    fn create_as(
        &self,
        rt: &ResourceType,
        ns: &str,
        object: Value,
        manager: &str,
    ) -> Result<Arc<Value>, ApiError> {
        if !self.admission.configured() {
            return self.store.create(rt, Some(ns), object, options(manager));
        }
        let user = UserInfo::component(manager);
        admission::block_on(
            self.admission
                .create(rt, Some(ns), object, options(manager), &user),
        )?
        .map(|admitted| admitted.object)
    }

    /// Replace (`status`: through the status subresource) through admission.
    fn update_as(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        object: Value,
        status: bool,
        manager: &str,
    ) -> Result<Arc<Value>, ApiError> {
        if !self.admission.configured() {
            return self
                .store
                .update(rt, Some(ns), name, object, status, options(manager));
        }
        let user = UserInfo::component(manager);
        admission::block_on(self.admission.update(
            rt,
            Some(ns),
            name,
            object,
            status,
            options(manager),
            &user,
        ))?
        .map(|admitted| admitted.object)
    }

    /// Replace `object` (its resourceVersion guards against lost updates).
    fn update(&self, rt: &ResourceType, object: Value) -> Result<Arc<Value>, ApiError> {
        let (ns, name) = namespace_and_name(&object);
        let (ns, name) = (ns.to_owned(), name.to_owned());
        self.update_as(rt, &ns, &name, object, false, CONTROLLER_MANAGER)
    }

    /// Write `status` to `object` through the status subresource, unless it is already so.
    fn update_status(
        &self,
        rt: &ResourceType,
        object: &Value,
        status: Value,
        manager: &str,
    ) -> Result<(), ApiError> {
        if object.get("status") == Some(&status) {
            return Ok(());
        }
        let mut new = object.clone();
        new["status"] = status;
        let (ns, name) = namespace_and_name(object);
        self.update_as(rt, ns, name, new, true, manager)?;
        Ok(())
    }

    /// Record an Event about `object`, as the component's event recorder does (`kubectl
    /// describe` shows them). Failing to record is logged, never an error of the work.
    fn event(&self, object: &Value, warning: bool, reason: &str, message: &str, component: &str) {
        use std::sync::atomic::{AtomicU64, Ordering};
        static SEQUENCE: AtomicU64 = AtomicU64::new(0);
        let events = &self.types.events;
        let (ns, name) = namespace_and_name(object);
        let ns = if ns.is_empty() { "default" } else { ns };
        let identity = (
            uid(object).to_owned(),
            reason.to_owned(),
            message.to_owned(),
        );
        let seen = self.events.borrow().get(&identity).cloned();
        if let Some((event_ns, event_name)) = seen
            && let Ok(existing) = self.store.get(events, Some(&event_ns), &event_name)
        {
            let mut repeated = (*existing).clone();
            let count = int_at(&existing, "/count").unwrap_or(1) + 1;
            repeated["count"] = json!(count);
            repeated["lastTimestamp"] = json!(now());
            if let Err(err) =
                self.update_as(events, &event_ns, &event_name, repeated, false, component)
            {
                tracing::debug!("counting event {reason} for {ns}/{name}: {err}");
            }
            return;
        }
        let stamp = jiff::Timestamp::now().as_nanosecond() as u64
            + SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let now = now();
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": format!("{name}.{stamp:x}"), "namespace": ns},
            "involvedObject": {
                "apiVersion": object["apiVersion"],
                "kind": object["kind"],
                "namespace": object.at("/metadata/namespace"),
                "name": name,
                "uid": uid(object),
                "resourceVersion": object.at("/metadata/resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "source": {"component": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": if warning { "Warning" } else { "Normal" },
            "eventTime": null,
            "reportingComponent": component,
            "reportingInstance": "",
        });
        match self.create_as(events, ns, event, component) {
            Ok(created) => {
                let mut recorded = self.events.borrow_mut();
                if recorded.len() >= 10_000 {
                    recorded.clear();
                }
                let (event_ns, event_name) = namespace_and_name(&created);
                recorded.insert(identity, (event_ns.to_owned(), event_name.to_owned()));
            }
            Err(err) => tracing::debug!("recording event {reason} for {ns}/{name}: {err}"),
        }
    }

    /// Delete an object; already gone is fine.
    fn delete(&self, rt: &ResourceType, object: &Value) -> Result<(), ApiError> {
        let (ns, name) = namespace_and_name(object);
        let options = DeleteOptions {
            uid: object
                .at("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_owned),
            ..DeleteOptions::default()
        };
        let deleted = if self.admission.configured() {
            let user = UserInfo::component(CONTROLLER_MANAGER);
            admission::block_on(self.admission.delete(rt, Some(ns), name, &options, &user))
                .and_then(|result| result.map(|admitted| admitted.object))
        } else {
            self.store.delete(rt, Some(ns), name, &options)
        };
        match deleted {
            Ok(_) => Ok(()),
            Err(err) if matches!(err.code, 404 | 409) => Ok(()),
            Err(err) => Err(err),
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Adopt the orphans of kind `rt` in `ns` that `owner`'s selector matches (they get its
/// controller owner reference), and release those it controls whose labels no longer match —
/// kube's `ControllerRefManager`, which every workload controller runs before counting.
fn adopt_and_release(
    engine: &Engine,
    rt: &ResourceType,
    ns: &str,
    owner: &Value,
) -> Result<(), ApiError> {
    let Some(selector) = owner
        .at("/spec/selector")
        .and_then(LabelSelector::from_json)
        .filter(|s| !s.requirements.is_empty())
    else {
        return Ok(());
    };
    let owner_uid = uid(owner);
    for object in engine.store.objects(rt, Some(ns)) {
        // Decided on the shared object; copied only when it changes (most syncs change none
        // of the namespace's objects, and this runs over all of them).
        let adopt = match controller_of(&object) {
            None if selector.matches_object(&object)
                && !is_deleting(&object)
                && !is_terminal(&object) =>
            {
                true
            }
            Some(controller)
                if controller.uid == owner_uid && !selector.matches_object(&object) =>
            {
                false
            }
            _ => continue,
        };
        let references = object
            .at("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let references: Vec<Value> = if adopt {
            let mut references = references.to_vec();
            references.push(owner_reference(owner));
            references
        } else {
            references
                .iter()
                .filter(|r| r["uid"] != owner_uid)
                .cloned()
                .collect()
        };
        let mut changed = (*object).clone();
        set_at(
            &mut changed,
            &["metadata", "ownerReferences"],
            json!(references),
        );
        engine.update(rt, changed)?;
    }
    Ok(())
}

/// An object's controlling owner reference.
struct Owner<'a> {
    api_version: &'a str,
    kind: &'a str,
    name: &'a str,
    uid: &'a str,
}

fn controller_of(object: &Value) -> Option<Owner<'_>> {
    object
        .at("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .map(|r| Owner {
            api_version: r["apiVersion"].as_str().unwrap_or_default(),
            kind: r["kind"].as_str().unwrap_or_default(),
            name: r["name"].as_str().unwrap_or_default(),
            uid: r["uid"].as_str().unwrap_or_default(),
        })
}

/// The controller owner reference a controller puts on what it creates.
fn owner_reference(owner: &Value) -> Value {
    json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner.at("/metadata/name"),
        "uid": owner.at("/metadata/uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn namespace_and_name(object: &Value) -> (&str, &str) {
    let text = |p: &str| object.at(p).and_then(Value::as_str).unwrap_or_default();
    (text("/metadata/namespace"), text("/metadata/name"))
}

fn uid(object: &Value) -> &str {
    object
        .at("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn node_name(pod: &Value) -> &str {
    pod.at("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn phase(pod: &Value) -> &str {
    pod.at("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn is_terminal(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

fn is_deleting(object: &Value) -> bool {
    object.at("/metadata/deletionTimestamp").is_some()
}

/// Neither finished nor being deleted (`controller.IsPodActive`).
fn is_active(pod: &Value) -> bool {
    !is_terminal(pod) && !is_deleting(pod)
}

/// The status of condition `kind` in `status.conditions`.
fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    condition_in(object.at("/status/conditions")?.as_array()?, kind)
}

/// Condition `kind` among `conditions`.
fn condition_in<'a>(conditions: &'a [Value], kind: &str) -> Option<&'a Value> {
    conditions.iter().find(|c| c["type"] == kind)
}

/// Whether `service` has a selector and it selects `pod` (a Service's selector is a plain map).
fn selects(service: &Value, pod: &Value) -> bool {
    service
        .at("/spec/selector")
        .and_then(Value::as_object)
        .is_some_and(|selector| {
            !selector.is_empty()
                && selector
                    .iter()
                    .all(|(k, v)| pod.at("/metadata/labels").and_then(|l| l.get(k)) == Some(v))
        })
}

fn is_ready(pod: &Value) -> bool {
    condition(pod, "Ready").is_some_and(|c| c["status"] == "True")
}

/// Ready for at least `min_ready` (`podutil.IsPodAvailable`); when not yet, how long until.
fn availability(pod: &Value, min_ready: i64, now: jiff::Timestamp) -> Result<(), Option<Duration>> {
    let Some(ready) = condition(pod, "Ready").filter(|c| c["status"] == "True") else {
        return Err(None);
    };
    if min_ready <= 0 {
        return Ok(());
    }
    let since = ready["lastTransitionTime"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let Some(since) = since else {
        return Err(None);
    };
    let elapsed = now.duration_since(since).as_secs();
    if elapsed >= min_ready {
        Ok(())
    } else {
        Err(Some(
            Duration::from_secs(min_ready.saturating_sub(elapsed) as u64).min(MAX_DELAY),
        ))
    }
}

fn int_at(object: &Value, pointer: &str) -> Option<i64> {
    object.at(pointer).and_then(Value::as_i64)
}

/// Set condition `kind` in `conditions` (kept in place; `lastTransitionTime` moves only when the
/// status does; `lastUpdateTime`, when `with_update_time`, whenever anything does).
fn set_condition(
    conditions: &mut Vec<Value>,
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
    with_update_time: bool,
) {
    let now = now();
    let existing = conditions.iter_mut().find(|c| c["type"] == kind);
    match existing {
        Some(c) if c["status"] == status && c["reason"] == reason && c["message"] == message => {}
        Some(c) => {
            if c["status"] != status {
                c["lastTransitionTime"] = json!(now);
            }
            c["status"] = json!(status);
            c["reason"] = json!(reason);
            c["message"] = json!(message);
            if with_update_time {
                c["lastUpdateTime"] = json!(now);
            }
        }
        None => {
            let mut c = json!({"type": kind, "status": status, "lastTransitionTime": now,
                "reason": reason, "message": message});
            if with_update_time {
                c["lastUpdateTime"] = json!(now);
            }
            conditions.push(c);
        }
    }
}

/// `value[path…] = new`, turning each step into an object first: objects written by users may
/// hold anything where a controller expects a map.
fn set_at(value: &mut Value, path: &[&str], new: Value) {
    let mut at = value;
    for key in path {
        if !at.is_object() {
            *at = json!({});
        }
        let Some(map) = at.as_object_mut() else {
            return;
        };
        at = map.entry(*key).or_insert(Value::Null);
    }
    *at = new;
}

/// `object.status` as a map to build on (a user-written status may be anything).
fn status_of(object: &Value) -> Value {
    object
        .get("status")
        .filter(|s| s.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}))
}

/// The longest a piece of work waits for time (a user's `minReadySeconds` or simulated
/// duration may be huge).
const MAX_DELAY: Duration = Duration::from_secs(24 * 3600);

/// The wall clock as the controllers read it: the time at their first reading plus the tokio
/// clock since, so paused-time tests move it (and `minReadySeconds`, progress deadlines and
/// Pod lives follow the same clock as the timers that wait for them).
fn wall_now() -> jiff::Timestamp {
    static BASE: OnceLock<(jiff::Timestamp, Instant)> = OnceLock::new();
    let (wall, instant) = *BASE.get_or_init(|| (jiff::Timestamp::now(), Instant::now()));
    let elapsed = Instant::now().saturating_duration_since(instant);
    jiff::SignedDuration::try_from(elapsed)
        .ok()
        .and_then(|d| wall.checked_add(d).ok())
        .unwrap_or(wall)
}

fn now() -> String {
    wall_now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A Pod from a workload's `template`: its labels and annotations, its spec, controlled by
/// `owner`. `name` is the Pod's name, or with `generate` its `generateName`.
fn pod_from_template(
    template: &Value,
    owner: &Value,
    name: &str,
    generate: bool,
    extra_labels: &[(&str, String)],
) -> Value {
    let mut labels = template
        .at("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (key, value) in extra_labels {
        labels.insert((*key).into(), json!(value));
    }
    let mut metadata = Map::new();
    metadata.insert(
        if generate { "generateName" } else { "name" }.into(),
        json!(name),
    );
    metadata.insert("labels".into(), Value::Object(labels));
    if let Some(annotations) = template.at("/metadata/annotations") {
        metadata.insert("annotations".into(), annotations.clone());
    }
    metadata.insert("ownerReferences".into(), json!([owner_reference(owner)]));
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

/// An `IntOrString` replica count against `total` (`intstr.GetScaledValueFromIntOrPercent`),
/// percentages rounded up or down.
fn scaled(value: Option<&Value>, total: i64, round_up: bool, default: i64) -> i64 {
    match value {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(default),
        Some(Value::String(s)) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
            Some(percent) if round_up => percent.saturating_mul(total).saturating_add(99) / 100,
            Some(percent) => percent.saturating_mul(total) / 100,
            None => default,
        },
        _ => default,
    }
}

/// `rand.SafeEncodeString` of a 32-bit FNV-1a hash of `value`'s JSON: the form of
/// `pod-template-hash` and `controller-revision-hash` values.
fn template_hash(value: &Value, collision_count: i64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut hash: u32 = 0x811c_9dc5;
    let text = serde_json::to_vec(value).unwrap_or_default();
    let salt = if collision_count > 0 {
        collision_count.to_le_bytes().to_vec()
    } else {
        Vec::new()
    };
    for byte in text.iter().chain(&salt) {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash.to_string()
        .bytes()
        .map(|b| ALPHABET[usize::from(b) % ALPHABET.len()] as char)
        .collect()
}

#[cfg(test)]
mod tests;
