//! The reload: what the manifests and guest objects want, compared with what runs — guests
//! started, swapped and removed, each as its load ends, the slow ones left to finish in the
//! background. The host's start is the first.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::fingerprint::Fingerprint;
use super::pull::START_PULL_WAIT;
use super::report::{ReloadReport, Skipped, StartError};
use super::running::{LoadDigests, candidate_digest};
use super::{Inner, Manager, ManagerOptions};
use crate::cluster::cache::Cache;
use crate::cluster::client::ApiClient;
use crate::guest::{CpuGovernor, Engines, MemoryPool};
use crate::guests::from_cluster::ObjectSource;
use crate::manifest::{Manifest, ManifestError};

/// How long a reload the watch loop makes (on a changed file or object) waits for the modules
/// it pulls and the versions it loads before it goes on without the slow ones: each guest
/// starts or swaps as its own load ends, and a pull or load still running then carries on in
/// the background and is taken up by the reload its end starts — so a tenant's slow registry
/// or blocking `init` never holds another's guest. [`Manager::reload`] waits for all.
pub const LOOP_WAIT: Duration = Duration::from_secs(1);

/// How long [`Manager::reload`] and [`Manager::apply`] wait for their pulls and loads: past
/// any guest's `init` time limit, so they answer what became of every guest.
pub const FULL_WAIT: Duration = Duration::from_secs(600);

impl Manager {
    /// Load `manifests`, start their informers, wait for the caches to sync and start the
    /// workers. Guests that cannot start are logged and listed in [`skipped`](Self::skipped).
    ///
    /// # Errors
    ///
    /// Only when the Wasm engine cannot be created; guest problems never fail the manager.
    pub async fn start(api: Arc<ApiClient>, manifests: Vec<Manifest>) -> anyhow::Result<Self> {
        Self::start_with(api, manifests, ManagerOptions::default()).await
    }

    /// Like [`start`](Self::start), with `options`.
    ///
    /// # Errors
    ///
    /// When the Wasm engine cannot be created, or with
    /// [`from_cluster`](ManagerOptions::from_cluster) when the guest objects cannot be watched
    /// (the CRDs are not installed).
    pub async fn start_with(
        api: Arc<ApiClient>,
        manifests: Vec<Manifest>,
        options: ManagerOptions,
    ) -> anyhow::Result<Self> {
        let engines = Engines::compiled_by(options.compiler)?;
        let (gate, open) = match options.gate {
            Some(gate) => (gate, None),
            None => {
                let (open, gate) = tokio::sync::watch::channel(true);
                (gate, Some(open))
            }
        };
        let module_cache = options.module_cache;
        let cache = Cache::new(api);
        let (objects, wanted) = match &options.from_cluster {
            Some(from) => {
                let source = ObjectSource::start(&cache, from).await?;
                let files = manifests.into_iter().map(Ok).collect();
                let wanted = crate::guests::from_cluster::merge(files, source.scan());
                (Some(source), wanted)
            }
            None => (None, manifests.into_iter().map(Ok).collect()),
        };
        // The files as they are before the modules are read (the manifests were read by the
        // caller).
        let loaded_files = std::sync::Mutex::new(Fingerprint::of_manifests(
            wanted.iter().filter_map(|m| m.as_ref().ok()),
        ));
        let applied = RwLock::new(
            objects
                .as_ref()
                .map(ObjectSource::generations)
                .unwrap_or_default(),
        );
        let manager = Manager {
            inner: Arc::new(Inner {
                metrics: options.metrics.unwrap_or_default(),
                poll_files: options.poll_files,
                instance_idle: options
                    .instance_idle
                    .unwrap_or(crate::controller::IDLE_INSTANCE),
                gate,
                _open: open,
                tenures: options.tenures,
                engines,
                module_cache,
                runners: options.runners,
                governor: CpuGovernor::new(),
                host_memory: MemoryPool::new(
                    "--guest-memory (all guests' instances)",
                    usize::try_from(
                        options
                            .guest_memory
                            .unwrap_or_else(crate::process::memory::default_guest_memory),
                    )
                    .unwrap_or(usize::MAX),
                ),
                cache,
                guests: tokio::sync::Mutex::new(BTreeMap::new()),
                controllers: RwLock::new(BTreeMap::new()),
                changes: tokio::sync::watch::channel(0).0,
                skipped: RwLock::new(Vec::new()),
                permission_refused: RwLock::new(Vec::new()),
                loading: std::sync::Mutex::new(HashMap::new()),
                pulling: std::sync::Mutex::new(HashMap::new()),
                loads_done: tokio::sync::watch::channel(0).0,
                tenant_loads: std::sync::Mutex::new(HashMap::new()),
                objects,
                applied,
                loaded_files,
                registries: options
                    .registries
                    .unwrap_or_else(|| Arc::new(crate::guests::oci::Registries::private())),
            }),
        };
        // A registry too slow for this holds only its own guests: the watch loop starts them.
        let wanted = manager.pull_modules(wanted, START_PULL_WAIT).await;
        // The start is the first reload: every guest new, each started as its load ends.
        let progress = crate::process::progress::Progress::new("starting guests", wanted.len());
        manager
            .apply_within(wanted, FULL_WAIT, Some(&progress))
            .await;
        progress.finish();
        Ok(manager)
    }

    /// Bring the running guests in line with the manifests in `dir`. See the
    /// [`guests`](crate::guests) module docs.
    ///
    /// # Errors
    ///
    /// When `dir` cannot be read; the running guests are untouched then.
    pub async fn reload(&self, dir: &Path) -> Result<ReloadReport, ManifestError> {
        self.reload_sources(Some(dir)).await
    }

    /// Bring the running guests in line with the manifests in `dir` (if any) and the cluster's
    /// guest objects (with [`from_cluster`](ManagerOptions::from_cluster)).
    ///
    /// # Errors
    ///
    /// When `dir` cannot be read; the running guests are untouched then.
    pub async fn reload_sources(&self, dir: Option<&Path>) -> Result<ReloadReport, ManifestError> {
        self.reload_within(dir, FULL_WAIT).await
    }

    /// [`reload_sources`](Self::reload_sources), waiting at most `wait` for the pulls and the
    /// loads (the rest go on in the background).
    pub(super) async fn reload_within(
        &self,
        dir: Option<&Path>,
        wait: Duration,
    ) -> Result<ReloadReport, ManifestError> {
        // The files as they are before this reads them: one written meanwhile is reloaded.
        let loaded_files = Fingerprint::of(dir, &self.module_paths(dir).await);
        let files = match dir {
            Some(dir) => Manifest::scan_dir(dir)?,
            None => Vec::new(),
        };
        // Generations first: an object changed in between is under-reported, and reloaded.
        let generations = self.generations();
        let scanned = match &self.inner.objects {
            Some(objects) => crate::guests::from_cluster::merge(files, objects.scan()),
            None => files,
        };
        let scanned = self.pull_modules(scanned, wait).await;
        let report = self.apply_within(scanned, wait, None).await;
        *self
            .inner
            .applied
            .write()
            .unwrap_or_else(|e| e.into_inner()) = generations;
        *self
            .inner
            .loaded_files
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = loaded_files;
        Ok(report)
    }

    /// [`reload`](Self::reload) from already scanned manifests.
    pub async fn apply(&self, scanned: Vec<Result<Manifest, ManifestError>>) -> ReloadReport {
        self.apply_within(scanned, FULL_WAIT, None).await
    }

    /// [`apply`](Self::apply), waiting at most `wait` for the versions it starts loading (those
    /// loading already are taken up if done, never waited for), telling `progress` of each
    /// load that ends.
    pub(super) async fn apply_within(
        &self,
        scanned: Vec<Result<Manifest, ManifestError>>,
        wait: Duration,
        progress: Option<&crate::process::progress::Progress>,
    ) -> ReloadReport {
        let mut report = ReloadReport::default();
        let mut guests = self.inner.guests.lock().await;
        // Filled again by this reload's loads.
        self.inner
            .permission_refused
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let mut wanted: BTreeMap<String, Manifest> = BTreeMap::new();
        let mut broken_files: BTreeSet<PathBuf> = BTreeSet::new();
        for result in scanned {
            match result {
                Ok(manifest) => {
                    wanted.insert(manifest.name.clone(), manifest);
                }
                Err(err) => {
                    let runs = guests.values().any(|g| g.manifest.path == err.path());
                    let outcome = if runs {
                        "the guest it defines keeps its running version"
                    } else {
                        "not started"
                    };
                    if let ManifestError::Pulling { .. } = err {
                        // Not refused: the pull's end reloads.
                        tracing::info!("{err}; {outcome}");
                    } else {
                        tracing::error!("{err}; {outcome}");
                        report.rejected.push(Skipped::refused(&err));
                    }
                    broken_files.insert(err.path().to_owned());
                }
            }
        }
        // Gone: neither a valid manifest nor a broken file that may still define it.
        let gone: Vec<String> = guests
            .iter()
            .filter(|(name, g)| {
                !wanted.contains_key(*name) && !broken_files.contains(&g.manifest.path)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            if let Some(guest) = guests.remove(&name) {
                self.remove_guest(guest).await;
                report.removed.push(name);
            }
        }
        self.publish(&guests);
        // New guests and changed versions load together; each then starts or swaps in, in
        // name order.
        let mut loads = Vec::new();
        for (name, manifest) in wanted {
            match guests.get(&name) {
                None => {
                    // Its files are read (and their digests taken) by its load.
                    loads.push((manifest, None, Arc::default()));
                }
                Some(guest) => {
                    // The file its load reads (a pulled module's, for a registry reference).
                    let bytes = crate::guest::read_module(manifest.module_file());
                    // A build replaces a module by deleting it and writing the new one: while
                    // it is missing (or empty), the running version stays and nothing is
                    // refused — the new file's own event reloads it.
                    let missing = match &bytes {
                        Err(err) => err.kind() == std::io::ErrorKind::NotFound,
                        Ok(bytes) => bytes.is_empty(),
                    };
                    if missing && *guest.manifest == manifest {
                        tracing::info!(
                            "guest {name}: its module {} is missing or empty (being rebuilt?); \
                             version {} keeps running until it is written",
                            manifest.spec.module.display(),
                            guest.controller.version().number
                        );
                        continue;
                    }
                    let digest = bytes
                        .map(|b| crate::guest::dev_source::identity(&b))
                        .unwrap_or_default();
                    // A candidate rebuilt in place is a new candidate.
                    let candidate_digest = candidate_digest(&manifest);
                    if *guest.manifest != manifest
                        || guest.digest != digest
                        || guest.candidate_digest != candidate_digest
                    {
                        let reads = Some(guest.reads.clone());
                        let digests = LoadDigests::known(digest, candidate_digest);
                        loads.push((manifest, reads, digests));
                    }
                }
            }
        }
        let mut waiting = self.start_loads(loads);
        let deadline = tokio::time::Instant::now() + wait;
        let mut done = 0;
        // Each guest starts or swaps as its load ends; past the wait, the rest carry on alone.
        // Only the loads this reload started are waited for (all of them by a reload that
        // waits for everything); one already loading is taken up if it is done.
        loop {
            let waited: Vec<usize> = (0..waiting.len())
                .filter(|&i| waiting[i].2 || wait >= FULL_WAIT || waiting[i].1.task.is_finished())
                .collect();
            if waited.is_empty() {
                break;
            }
            self.publish(&guests);
            let ended = futures::future::select_all(
                waiting
                    .iter_mut()
                    .enumerate()
                    .filter(|(i, _)| waited.contains(i))
                    .map(|(_, (_, loading, _))| &mut loading.task),
            );
            let (joined, at, _) = tokio::select! {
                () = tokio::time::sleep_until(deadline) => break,
                ended = ended => ended,
            };
            let (name, _, _) = waiting.remove(waited[at]);
            if let Some(progress) = progress {
                progress.working(done, &format!("{name}: loaded"));
                done += 1;
            }
            let version =
                joined.unwrap_or_else(|err| Err(StartError::LoadPanicked(err.to_string())));
            self.finish_load(&mut guests, name, version, &mut report);
        }
        if !waiting.is_empty() {
            let mut loading = self.inner.loading.lock().unwrap_or_else(|e| e.into_inner());
            for (name, pending, _) in waiting {
                tracing::info!(
                    "guest {name}: its version is still loading after {wait:?}; it is taken up when it is done"
                );
                report.loading.push(name.clone());
                pending
                    .background
                    .detach(pending.task.is_finished(), &self.inner.loads_done);
                loading.insert(name, pending);
            }
        }
        self.publish(&guests);
        *self
            .inner
            .skipped
            .write()
            .unwrap_or_else(|e| e.into_inner()) = report.rejected.clone();
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::script::Script;
    use krec_core::{Gvk, ListOptions};

    use crate::guest::Runner;

    /// The manifest of guest `name` reconciling `for_kind` (a core kind), reading ConfigMaps.
    fn manifest(name: &str, for_kind: &str) -> Manifest {
        let text = format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: {name}}}\nspec:\n  module: {name}.wasm\n  for: {{apiVersion: v1, kind: {for_kind}}}\n  permissions:\n    - {{apiVersion: v1, kind: ConfigMap, verbs: [get, list, watch]}}\n    - {{apiVersion: v1, kind: {for_kind}, verbs: [get, list, watch]}}\n"
        );
        Manifest::parse(Path::new(&format!("{name}.yaml")), &text).expect("manifest")
    }

    /// A manager over an API server in this process, its guests `names` scripted.
    async fn manager(names: &[&str], manifests: Vec<Manifest>) -> Manager {
        let (_, app, stop) = krec_apiserver::in_process(Arc::default()).expect("api server");
        // The server lives as long as the test.
        std::mem::forget(stop);
        let script: Arc<dyn Runner> = Script::new(Vec::new());
        let options = ManagerOptions {
            runners: names
                .iter()
                .map(|n| ((*n).to_owned(), script.clone()))
                .collect(),
            ..Default::default()
        };
        let api = ApiClient::new(kube::Client::new(app, "default"));
        Manager::start_with(api, manifests, options)
            .await
            .expect("manager")
    }

    /// Each informer as `Kind users… (subscribers)`.
    fn informers(manager: &Manager) -> Vec<String> {
        manager
            .cache()
            .inspect()
            .into_iter()
            .map(|i| format!("{} {} ({})", i.gvk.kind, i.users.join(","), i.subscribers))
            .collect()
    }

    fn scanned(manifests: Vec<Manifest>) -> Vec<Result<Manifest, ManifestError>> {
        manifests.into_iter().map(Ok).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_guest_should_hold_its_watches_until_it_goes_and_share_them_meanwhile() {
        let manager = manager(
            &["a", "b"],
            vec![manifest("a", "ConfigMap"), manifest("b", "ConfigMap")],
        )
        .await;
        assert_eq!(informers(&manager), ["ConfigMap a,b (2)"]);

        let report = manager
            .apply(scanned(vec![manifest("b", "ConfigMap")]))
            .await;
        assert_eq!(report.removed, ["a"]);
        assert_eq!(informers(&manager), ["ConfigMap b (1)"], "b still needs it");

        let report = manager.apply(Vec::new()).await;
        assert_eq!(report.removed, ["b"]);
        assert!(informers(&manager).is_empty(), "no guest: no watch");
        manager.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_swap_should_move_the_subscriptions_and_keep_what_the_guest_reads() {
        let manager = manager(&["a"], vec![manifest("a", "Secret")]).await;
        let controller = manager.controller("a").expect("guest a");
        // A read of ConfigMaps, as the guest's `list` makes it: the cache starts their watch.
        use crate::cluster::ClusterCalls;
        let cluster = controller.version().cluster.clone();
        cluster
            .list(
                &Gvk::new("", "v1", "ConfigMap"),
                &ListOptions {
                    namespace: Some("default".into()),
                    ..Default::default()
                },
            )
            .await
            .expect("list");
        assert_eq!(informers(&manager), ["ConfigMap a (0)", "Secret a (1)"]);

        // The new version reconciles ConfigMaps: it subscribes to the same informer, and the
        // Secret watch, which only the old version needed, stops.
        let report = manager
            .apply(scanned(vec![manifest("a", "ConfigMap")]))
            .await;
        assert_eq!(report.swapped, ["a"], "{report:?}");
        assert_eq!(
            controller.version().number,
            1,
            "the same module: the same version of it"
        );
        assert_eq!(informers(&manager), ["ConfigMap a (1)"]);

        // Back to Secrets: the ConfigMap watch stays, for the guest's reads.
        let report = manager.apply(scanned(vec![manifest("a", "Secret")])).await;
        assert_eq!(report.swapped, ["a"], "{report:?}");
        assert_eq!(informers(&manager), ["ConfigMap a (0)", "Secret a (1)"]);

        manager.apply(Vec::new()).await;
        assert!(informers(&manager).is_empty(), "{:?}", informers(&manager));
        drop(cluster);
        manager.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_version_should_leave_the_running_one_and_no_watch_behind() {
        let manager = manager(&["a"], vec![manifest("a", "ConfigMap")]).await;
        let mut refused = manifest("a", "ConfigMap");
        // A second watched kind that the server does not serve.
        refused.spec.owns.push(crate::manifest::KindRef {
            api_version: "example.com/v1".into(),
            kind: "Missing".into(),
            metadata_only: false,
        });
        let report = manager.apply(scanned(vec![refused])).await;
        assert_eq!(report.rejected.len(), 1, "{report:?}");
        assert!(report.rejected[0].reason.contains("Missing"), "{report:?}");
        let controller = manager.controller("a").expect("still running");
        assert_eq!(controller.version().number, 1);
        assert_eq!(informers(&manager), ["ConfigMap a (1)"]);
        manager.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_guest_that_cannot_start_should_leave_no_watch_and_not_stop_the_others() {
        let mut broken = manifest("b", "Secret");
        broken.spec.owns.push(crate::manifest::KindRef {
            api_version: "example.com/v1".into(),
            kind: "Missing".into(),
            metadata_only: false,
        });
        let manager = manager(&["a", "b"], vec![manifest("a", "ConfigMap")]).await;
        let report = manager
            .apply(scanned(vec![manifest("a", "ConfigMap"), broken]))
            .await;
        assert_eq!(report.rejected.len(), 1, "{report:?}");
        assert_eq!(report.rejected[0].guest, "b");
        assert!(manager.controller("b").is_none());
        assert_eq!(
            informers(&manager),
            ["ConfigMap a (1)"],
            "b's Secret watch is gone"
        );
        manager.shutdown(Duration::from_secs(1)).await;
    }
}
