//! The [`Manager`]: loads the guests of a manifest set, wires each to the shared cache as a
//! [`Controller`], waits for the caches to sync, then starts the workers.
//!
//! One bad guest (a module that does not load, a kind the server does not serve) is reported
//! with its name and skipped; the others run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::cache::{Cache, EventSink, Informer, SYNC_TIMEOUT};
use crate::cluster::Gvk;
use crate::cluster::api::ApiClient;
use crate::cluster::live::LiveCluster;
use crate::controller::Controller;
use crate::guest::GuestModule;
use crate::manifest::Manifest;

/// How long [`Manager::shutdown`] waits for running reconciles by default.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// A guest that could not be started, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The guest (or the manifest file, if it has no valid name).
    pub guest: String,
    /// What is wrong, naming the file or kind.
    pub reason: String,
}

/// A controller subscribed to its informers, waiting for them to sync.
struct Wired {
    controller: Arc<Controller>,
    informers: Vec<Arc<Informer>>,
    for_informers: Vec<Arc<Informer>>,
}

/// Running guests over one shared cache.
pub struct Manager {
    cache: Arc<Cache>,
    controllers: BTreeMap<String, Arc<Controller>>,
    skipped: Vec<Skipped>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("guests", &self.controllers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The namespace scopes a guest's informers use: its `namespaces`, or all.
fn scopes(manifest: &Manifest) -> Vec<Option<String>> {
    if manifest.spec.namespaces.is_empty() {
        vec![None]
    } else {
        manifest.spec.namespaces.iter().cloned().map(Some).collect()
    }
}

impl Manager {
    /// Load `manifests`, start their informers, wait for the caches to sync and start the
    /// workers. Guests that cannot start are logged and listed in [`skipped`](Self::skipped).
    ///
    /// # Errors
    ///
    /// Only when the Wasm engine cannot be created; guest problems never fail the manager.
    pub async fn start(api: Arc<ApiClient>, manifests: Vec<Manifest>) -> anyhow::Result<Self> {
        let engine = crate::engine::new_engine()?;
        let linker = crate::guest::new_linker(&engine)?;
        let cache = Cache::new(api.clone());
        let mut skipped = Vec::new();
        let mut pending: Vec<Wired> = Vec::new();
        for manifest in manifests {
            let name = manifest.name.clone();
            let manifest = Arc::new(manifest);
            let mut skip = |reason: String| {
                tracing::error!("guest {name} not started: {reason}");
                skipped.push(Skipped {
                    guest: name.clone(),
                    reason,
                });
            };
            let module = match GuestModule::load(&engine, &linker, manifest.clone()) {
                Ok(module) => Arc::new(module),
                Err(err) => {
                    skip(err.to_string());
                    continue;
                }
            };
            tracing::info!("loaded guest {name} ({})", module.digest());
            let cluster = Arc::new(LiveCluster::new(cache.clone(), &manifest));
            let controller = Controller::new(module, cluster);
            let kinds = controller.handlers().watched_kinds();
            // Every kind must be served before anything is subscribed.
            let mut missing = None;
            for gvk in &kinds {
                if let Err(err) = api.resolve(gvk).await {
                    missing = Some(format!("cannot watch {gvk}: {err}"));
                    break;
                }
            }
            if let Some(reason) = missing {
                skip(reason);
                continue;
            }
            let for_kind: Option<Gvk> = manifest.spec.for_kind.as_ref().map(|k| k.gvk());
            let mut informers = Vec::new();
            let mut for_informers = Vec::new();
            let mut failed = None;
            'kinds: for gvk in &kinds {
                for scope in scopes(&manifest) {
                    match cache.informer(gvk, scope.as_deref()).await {
                        Ok(informer) => {
                            if !informers.iter().any(|i| Arc::ptr_eq(i, &informer)) {
                                if for_kind.as_ref() == Some(gvk) {
                                    for_informers.push(informer.clone());
                                }
                                informers.push(informer);
                            }
                        }
                        Err(err) => {
                            failed = Some(format!("cannot watch {gvk}: {err}"));
                            break 'kinds;
                        }
                    }
                }
            }
            if let Some(reason) = failed {
                skip(reason);
                continue;
            }
            let sink: Arc<dyn EventSink> = controller.clone();
            for informer in &informers {
                informer.subscribe(sink.clone());
            }
            pending.push(Wired {
                controller,
                informers,
                for_informers,
            });
        }
        let mut controllers = BTreeMap::new();
        for Wired {
            controller,
            informers,
            for_informers,
        } in pending
        {
            let mut synced = true;
            for informer in &informers {
                if !informer.is_synced() {
                    tracing::info!(
                        "{}: syncing the cache of {}",
                        controller.name(),
                        informer.describe()
                    );
                }
                if let Err(err) = informer.wait_synced(SYNC_TIMEOUT).await {
                    let sink: Arc<dyn EventSink> = controller.clone();
                    for informer in &informers {
                        informer.unsubscribe(&sink);
                    }
                    let reason = err.to_string();
                    tracing::error!("guest {} not started: {reason}", controller.name());
                    skipped.push(Skipped {
                        guest: controller.name().to_owned(),
                        reason,
                    });
                    synced = false;
                    break;
                }
            }
            if !synced {
                continue;
            }
            controller.start(for_informers);
            tracing::info!(
                "guest {} started: {} worker(s), watching {}",
                controller.name(),
                controller
                    .module()
                    .manifest()
                    .spec
                    .max_concurrent_reconciles
                    .max(1),
                describe_all(&informers)
            );
            controllers.insert(controller.name().to_owned(), controller);
        }
        Ok(Manager {
            cache,
            controllers,
            skipped,
        })
    }

    /// The running guest named `name`.
    pub fn controller(&self, name: &str) -> Option<&Arc<Controller>> {
        self.controllers.get(name)
    }

    /// Every running guest, by name.
    pub fn controllers(&self) -> &BTreeMap<String, Arc<Controller>> {
        &self.controllers
    }

    /// Guests that could not start.
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// The shared cache.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// Stop every guest (running reconciles get up to `timeout` to finish), then the watches.
    pub async fn shutdown(self, timeout: Duration) {
        let stops = self.controllers.values().map(|c| c.shutdown(timeout));
        futures::future::join_all(stops).await;
        self.cache.stop();
    }
}

fn describe_all(informers: &[Arc<Informer>]) -> String {
    if informers.is_empty() {
        return "nothing (generic sources only)".into();
    }
    informers
        .iter()
        .map(|i| i.describe())
        .collect::<Vec<_>>()
        .join(", ")
}
