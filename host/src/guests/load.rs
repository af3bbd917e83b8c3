//! Loading a version of a guest: its permissions checked, its module compiled (or found in the
//! module cache) and instantiated, its rollout candidate beside it, and the watches it needs
//! started and synced — several at once, each tenant within its bound.

use std::sync::Arc;

use super::Manager;
use super::report::StartError;
use super::running::{Background, LoadDigests, Loading, Prepared, ToLoad, Version};
use crate::cluster::cache::{Informer, InformerUse, SYNC_TIMEOUT};
use crate::cluster::live::{LiveCluster, Reads};
use crate::cluster::{ClusterAccess, Fenced, Logged};
use crate::guest::{GuestModule, GuestWorker};
use crate::manifest::Manifest;
use krec_core::Gvk;

/// The namespace scopes a guest's informers use: its `namespaces`, or all.
pub(super) fn scopes(manifest: &Manifest) -> Vec<Option<String>> {
    if manifest.spec.namespaces.is_empty() {
        vec![None]
    } else {
        manifest.spec.namespaces.iter().cloned().map(Some).collect()
    }
}

/// What the informer of `gvk` holds for `manifest`'s guest: metadata when every mention of the
/// kind in its manifest asks for metadata only.
pub(super) fn content_of(manifest: &Manifest, gvk: &Gvk) -> crate::cluster::cache::Content {
    if manifest.metadata_only_kinds().contains(gvk) {
        crate::cluster::cache::Content::Metadata
    } else {
        crate::cluster::cache::Content::Objects
    }
}

/// Whether `uses` holds a use of `informer`.
pub(super) fn holds(uses: &[InformerUse], informer: &Arc<Informer>) -> bool {
    uses.iter().any(|u| Arc::ptr_eq(u.informer(), informer))
}

/// The informers behind `uses`, as the controller holds them.
pub(super) fn shared(uses: &[InformerUse]) -> Vec<Arc<Informer>> {
    uses.iter().map(|u| u.informer().clone()).collect()
}

/// Versions of the host operator's guests (the manifest files' and the `ClusterReconciler`s')
/// loaded at once, at start and on a reload: each compiles on a blocking thread and may take
/// up to its `limits.timeout` in `init`, so one slow guest delays no other; the bound keeps the
/// memory of compiling many large components at once in check.
pub const LOADS_AT_ONCE: usize = 4;

/// Versions one tenant (a namespace's `Reconciler`s) loads at once, at start and on a reload:
/// a tenant whose guests block in `init` holds its own loads only — every other tenant's and
/// the host operator's load in parallel.
pub const TENANT_LOADS_AT_ONCE: usize = 2;

/// Where a load's time went: each step's time, in order.
pub(super) struct Laps {
    began: std::time::Instant,
    last: std::time::Instant,
    laps: Vec<(&'static str, std::time::Duration)>,
}

impl Laps {
    /// Start timing now.
    pub(super) fn start() -> Self {
        let now = std::time::Instant::now();
        Laps {
            began: now,
            last: now,
            laps: Vec::new(),
        }
    }

    /// The step `what` ended now.
    pub(super) fn lap(&mut self, what: &'static str) {
        let now = std::time::Instant::now();
        self.laps.push((what, now - self.last));
        self.last = now;
    }

    /// Since the start.
    pub(super) fn total(&self) -> std::time::Duration {
        self.began.elapsed()
    }
}

impl std::fmt::Display for Laps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (what, took)) in self.laps.iter().enumerate() {
            let comma = if i == 0 { "" } else { ", " };
            write!(f, "{comma}{what} {took:.1?}")?;
        }
        Ok(())
    }
}

impl Manager {
    /// Load and instantiate `manifest`'s module and start (and sync) the watches it needs.
    pub(super) async fn load_version(
        &self,
        manifest: Manifest,
        reads: Arc<Reads>,
        digests: Arc<LoadDigests>,
        laps: &mut Laps,
    ) -> Result<Version, StartError> {
        // Refused before anything is compiled or watched: what the host may not do, the guest
        // never could.
        if let Some((field, problem)) =
            crate::cluster::permissions::first_missing(self.inner.cache.api(), &manifest).await
        {
            self.inner
                .permission_refused
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .push(Arc::new(manifest.clone()));
            return Err(StartError::PermissionRefused {
                path: manifest.path.clone(),
                field,
                problem,
            });
        }
        laps.lap("permissions");
        let manifest = Arc::new(manifest);
        let prepared = self
            .prepare(manifest.clone(), reads.clone(), &digests, laps)
            .await?;
        // On an error, `wire` has dropped its uses: what it started for this version only is
        // stopped again.
        let (informers, for_informers) = self.wire(&manifest).await?;
        laps.lap("watches");
        Ok(Version {
            manifest,
            prepared,
            informers,
            for_informers,
            reads,
        })
    }

    /// Load and instantiate `manifest`'s module on a blocking thread (compiling is CPU-bound).
    pub(super) async fn prepare(
        &self,
        manifest: Arc<Manifest>,
        reads: Arc<Reads>,
        digests: &Arc<LoadDigests>,
        laps: &mut Laps,
    ) -> Result<Prepared, StartError> {
        let read = digests.clone();
        let module = self
            .load_module(manifest.clone(), move |digest| {
                let _ = read.module.set(digest.to_owned());
            })
            .await?;
        laps.lap("module");
        let mut cluster: Arc<dyn ClusterAccess> = Arc::new(
            LiveCluster::new(self.inner.cache.clone(), &manifest)
                .with_reads(reads)
                .with_metrics(self.inner.metrics.clone()),
        );
        if let Some(tenures) = &self.inner.tenures {
            cluster = Arc::new(Fenced::new(cluster, tenures.fence(&manifest.name)));
        }
        // Nothing to log with krec::client's lines off (the filter is fixed at the start):
        // every call is spared the layer.
        if Logged::wanted() {
            cluster = Arc::new(Logged::new(cluster, &manifest.name));
        }
        // Instantiate once: a module whose start function traps is refused here.
        GuestWorker::new(module.clone(), cluster.clone())
            .warm_up()
            .await?;
        laps.lap("instance");
        let candidate = match &manifest.spec.rollout {
            Some(rollout) => {
                let read = digests.clone();
                let candidate = self
                    .load_candidate(&manifest, rollout, &cluster, move |digest| {
                        let _ = read.candidate.set(digest.to_owned());
                    })
                    .await;
                laps.lap("candidate");
                Some(candidate)
            }
            None => None,
        };
        Ok(Prepared {
            module,
            cluster,
            candidate,
        })
    }

    /// `rollout`'s candidate for `manifest`'s guest, loaded and instantiated; a shadow's `init`
    /// runs on dry runs as its reconciles do (a canary's writes are real).
    pub(super) async fn load_candidate(
        &self,
        manifest: &Arc<Manifest>,
        rollout: &crate::manifest::RolloutSpec,
        cluster: &Arc<dyn ClusterAccess>,
        read: impl FnOnce(&str) + Send + 'static,
    ) -> Result<Arc<GuestModule>, StartError> {
        let mut candidate = (**manifest).clone();
        candidate.spec.module = rollout.candidate.clone();
        if rollout.config.is_some() {
            candidate.spec.config = rollout.config.clone();
        }
        candidate.spec.rollout = None;
        candidate.candidate = true;
        candidate.pulled = manifest.candidate_pulled.clone();
        candidate.candidate_pulled = None;
        let module = self.load_module(Arc::new(candidate), read).await?;
        let access: Arc<dyn ClusterAccess> = match rollout.mode {
            crate::manifest::RolloutMode::Shadow => Arc::new(crate::rollout::Replay::new(
                Some(cluster.clone()),
                Some(self.dry_run(&manifest.name)),
            )),
            crate::manifest::RolloutMode::Canary => cluster.clone(),
        };
        GuestWorker::new(module.clone(), access).warm_up().await?;
        Ok(module)
    }

    /// Where `guest`'s shadow writes go: dry runs, as its field manager.
    pub(super) fn dry_run(&self, guest: &str) -> crate::rollout::DryRun {
        crate::rollout::DryRun {
            api: self.inner.cache.api().dry_run(),
            field_manager: crate::cluster::live::field_manager(guest),
        }
    }

    /// Compile (on a blocking thread: it is CPU-bound) or find `manifest`'s module, governed by
    /// the host's CPU and memory budgets.
    /// `read` is told the digest of the module file as soon as it is read.
    pub(super) async fn load_module(
        &self,
        manifest: Arc<Manifest>,
        read: impl FnOnce(&str) + Send + 'static,
    ) -> Result<Arc<GuestModule>, StartError> {
        let inner = self.inner.clone();
        let loading = manifest.clone();
        let module = if let Some(runner) = inner.runners.get(&manifest.name) {
            // A native reconciler is built without configuration and has no `map` to call.
            if manifest.spec.config.is_some()
                || manifest.spec.watches.iter().any(|w| w.map_by_guest)
            {
                return Err(StartError::RunnerUnsupported {
                    path: manifest.path.clone(),
                    guest: manifest.name.clone(),
                });
            }
            GuestModule::with_runner(manifest.clone(), runner.clone())
        } else {
            tokio::task::spawn_blocking(move || {
                let (engine, linker) = inner.engines.for_isolation(loading.spec.isolation);
                GuestModule::load_cached_telling(engine, linker, loading, &inner.module_cache, read)
            })
            .await
            .map_err(|e| StartError::LoadPanicked(e.to_string()))??
        };
        Ok(Arc::new(module.governed_by(
            &self.inner.governor,
            &self.inner.host_memory,
        )))
    }

    /// Uses of the informers `manifest`'s guest watches, and those of its `for` kind, started
    /// if needed and waited for until synced. On an error the uses made are dropped, which
    /// stops the watches no other guest needs.
    pub(super) async fn wire(
        &self,
        manifest: &Manifest,
    ) -> Result<(Vec<InformerUse>, Vec<Arc<Informer>>), StartError> {
        let handlers = crate::controller::Handlers::from_manifest(manifest);
        let kinds = handlers.watched_kinds();
        let api = self.inner.cache.api();
        // Every kind must be served before anything is started.
        for gvk in &kinds {
            let resolved = api.resolve(gvk).await.map_err(|source| StartError::Watch {
                gvk: gvk.clone(),
                source,
            })?;
            // A tenant's kinds from CRDs, which its manifest could not be checked for.
            if let Some(namespace) = &manifest.tenant
                && !resolved.namespaced
            {
                return Err(StartError::Confined {
                    path: manifest.path.clone(),
                    message: format!(
                        "{gvk} is cluster-scoped: a Reconciler in {namespace:?} may only watch namespaced kinds"
                    ),
                });
            }
        }
        // A namespace cannot restrict a cluster-scoped kind: refuse the guest rather than let
        // it believe its permission is narrower than it is.
        for (i, permission) in manifest.spec.permissions.iter().enumerate() {
            if permission.namespaces.is_empty() {
                continue;
            }
            let gvk = Gvk::from_api_version(&permission.api_version, &permission.kind);
            if let Ok(resolved) = api.resolve(&gvk).await
                && !resolved.namespaced
            {
                return Err(StartError::ClusterScoped {
                    path: manifest.path.clone(),
                    index: i,
                    message: crate::manifest::cluster_scoped_namespaces(&gvk),
                });
            }
        }
        let for_kind: Option<Gvk> = manifest.spec.for_kind.as_ref().map(|k| k.gvk());
        let mut informers: Vec<InformerUse> = Vec::new();
        let mut for_informers = Vec::new();
        for gvk in &kinds {
            for scope in scopes(manifest) {
                let informer = self
                    .inner
                    .cache
                    .informer(
                        gvk,
                        scope.as_deref(),
                        content_of(manifest, gvk),
                        &manifest.name,
                    )
                    .await
                    .map_err(|source| StartError::Watch {
                        gvk: gvk.clone(),
                        source,
                    })?;
                if !holds(&informers, informer.informer()) {
                    if for_kind.as_ref() == Some(gvk) {
                        for_informers.push(informer.informer().clone());
                    }
                    informers.push(informer);
                }
            }
        }
        for informer in &informers {
            if !informer.is_synced() {
                tracing::info!(
                    "{}: syncing the cache of {}",
                    manifest.name,
                    informer.describe()
                );
            }
            informer
                .wait_synced(SYNC_TIMEOUT)
                .await
                .map_err(StartError::Sync)?;
        }
        Ok((informers, for_informers))
    }

    /// Start loading each of `loads` (the one already loading in the background for the same
    /// manifest and modules taken up instead), each within its tenant's bound; loads in the
    /// background no longer wanted are stopped. The loads by guest name.
    pub(super) fn start_loads(&self, loads: Vec<ToLoad>) -> Vec<(String, Loading, bool)> {
        let mut pending = self.inner.loading.lock().unwrap_or_else(|e| e.into_inner());
        let mut started = Vec::with_capacity(loads.len());
        for (manifest, reads, digests) in loads {
            let name = manifest.name.clone();
            if let Some(loading) = pending.remove(&name) {
                if loading.manifest == manifest && loading.digests.current(&manifest) {
                    started.push((name, loading, false));
                    continue;
                }
                loading.task.abort();
            }
            let permits = self
                .inner
                .tenant_loads
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(manifest.tenant.clone())
                .or_insert_with(|| {
                    // The files' and `ClusterReconciler`s' guests are the host operator's:
                    // as many at once as the host loads; a namespace's, its tenant's bound.
                    let bound = if manifest.tenant.is_some() {
                        TENANT_LOADS_AT_ONCE
                    } else {
                        LOADS_AT_ONCE
                    };
                    Arc::new(tokio::sync::Semaphore::new(bound))
                })
                .clone();
            let manager = self.clone();
            let to_load = manifest.clone();
            let background = Background::default();
            let ended = background.clone();
            let load_digests = digests.clone();
            let task = tokio::spawn(async move {
                let mut laps = Laps::start();
                let _permit = permits.acquire_owned().await;
                laps.lap("a load slot");
                let guest = to_load.name.clone();
                let version = manager
                    .load_version(to_load, reads.unwrap_or_default(), load_digests, &mut laps)
                    .await;
                // A slow load is told when it ends, with where its time went: what a reload's
                // "still loading" line waits for.
                let took = laps.total();
                if took >= super::reload::LOOP_WAIT {
                    let ended = if version.is_ok() { "loaded" } else { "refused" };
                    tracing::info!("guest {guest}: its version {ended} after {took:.1?} ({laps})");
                }
                ended.ended(&manager.inner.loads_done);
                version
            });
            started.push((
                name,
                Loading {
                    manifest,
                    digests,
                    task,
                    background,
                },
                true,
            ));
        }
        // What is still loading in the background and no longer wanted stops.
        for (_, loading) in pending.drain() {
            loading.task.abort();
        }
        started
    }
}
