//! Running versions: a loaded version started as a new guest, swapped in for a running one
//! (its subscriptions moved, its candidate tried), or a guest removed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::load::{holds, shared};
use super::report::{ReloadReport, Skipped, StartError};
use super::running::{Guest, Prepared, Version};
use super::{Manager, SHUTDOWN_TIMEOUT};
use crate::cluster::cache::{EventSink, InformerUse};
use crate::controller::Controller;
use crate::manifest::Manifest;

/// Whether `manifest`'s guest reconciles: it names a kind, a watch or a ticker (otherwise it
/// only answers webhooks or converts).
pub fn reconciles(manifest: &Manifest) -> bool {
    let spec = &manifest.spec;
    spec.for_kind.is_some() || !spec.watches.is_empty() || !spec.tickers.is_empty()
}

/// What a guest that does not reconcile serves: `serving webhooks (validate, mutate), converting
/// foos.example.com`.
pub(super) fn serves(manifest: &Manifest) -> String {
    let mut served = Vec::new();
    let exports: BTreeSet<&str> = manifest
        .spec
        .webhooks
        .iter()
        .map(|w| w.kind.export())
        .collect();
    if !exports.is_empty() {
        served.push(format!(
            "serving webhooks ({})",
            exports.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if let Some(conversion) = &manifest.spec.conversion {
        served.push(format!("converting {}", conversion.crd));
    }
    if served.is_empty() {
        "nothing to do".to_owned()
    } else {
        served.join(", ")
    }
}

pub(super) fn describe_all(informers: &[InformerUse]) -> String {
    if informers.is_empty() {
        return "nothing (generic sources only)".into();
    }
    informers
        .iter()
        .map(|i| i.describe())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Manager {
    /// Try `prepared`'s candidate, if it has one, beside `controller`'s running version.
    pub(super) fn try_candidate(
        &self,
        controller: &Arc<Controller>,
        manifest: &Manifest,
        prepared: &Prepared,
    ) {
        let (Some(candidate), Some(spec)) = (&prepared.candidate, &manifest.spec.rollout) else {
            if manifest.spec.rollout.is_none() {
                controller.forget_rollout();
            }
            return;
        };
        let candidate = match candidate {
            Ok(candidate) => candidate,
            Err(problem) => {
                tracing::warn!(
                    "guest {}: its candidate {} is not tried: {problem}; the live version runs",
                    manifest.name,
                    spec.candidate.display()
                );
                controller.candidate_refused(spec, &problem.to_string());
                return;
            }
        };
        let dry_run = self.dry_run(&manifest.name);
        let rollout = crate::rollout::Rollout::start(
            &manifest.name,
            candidate.clone(),
            spec.clone(),
            prepared.cluster.clone(),
            Some(dry_run),
            self.inner.metrics.clone(),
        );
        controller.try_candidate(rollout);
    }

    /// Run `version` as a new guest.
    pub(super) fn start_guest(&self, guests: &mut BTreeMap<String, Guest>, version: Version) {
        let Version {
            manifest,
            prepared,
            informers,
            for_informers,
            reads,
        } = version;
        let name = manifest.name.clone();
        let digest = prepared.module.digest().to_owned();
        let candidate_digest = match &prepared.candidate {
            Some(Ok(candidate)) => candidate.digest().to_owned(),
            _ => String::new(),
        };
        tracing::info!(
            "loaded guest {name} ({digest}, {:?})",
            prepared.module.origin()
        );
        let gate = match &self.inner.tenures {
            Some(tenures) => tenures.gate(&name),
            None => self.inner.gate.clone(),
        };
        let controller = Controller::new(
            prepared.module.clone(),
            prepared.cluster.clone(),
            self.inner.metrics.clone(),
            gate,
        );
        controller.set_instance_idle(self.inner.instance_idle);
        self.try_candidate(&controller, &manifest, &prepared);
        let sink: Arc<dyn EventSink> = controller.clone();
        for informer in &informers {
            informer.subscribe(sink.clone());
        }
        controller.start(shared(&informers), for_informers);
        if reconciles(&manifest) {
            tracing::info!(
                "guest {name} started: {} worker(s), watching {}",
                manifest.spec.max_concurrent_reconciles.get(),
                describe_all(&informers)
            );
        } else {
            tracing::info!("guest {name} started: {}", serves(&manifest));
        }
        guests.insert(
            name,
            Guest {
                controller,
                manifest,
                digest,
                candidate_digest,
                informers,
                reads,
            },
        );
    }

    /// Run `version` in place of `guest`'s running one.
    pub(super) fn swap_guest(&self, guest: &mut Guest, version: Version) {
        let Version {
            manifest,
            prepared,
            informers,
            for_informers,
            ..
        } = version;
        let name = manifest.name.clone();
        let controller = guest.controller.clone();
        let sink: Arc<dyn EventSink> = controller.clone();
        let digest = prepared.module.digest().to_owned();
        let candidate_digest = match &prepared.candidate {
            Some(Ok(candidate)) => candidate.digest().to_owned(),
            _ => String::new(),
        };
        // The new handlers first, so that objects of newly watched kinds map through them.
        let version = controller.swap(
            prepared.module.clone(),
            prepared.cluster.clone(),
            shared(&informers),
            for_informers,
        );
        self.try_candidate(&controller, &manifest, &prepared);
        // Like a restarted controller, the new version sees every object: new subscriptions
        // replay theirs, kept ones are replayed here (the queue folds duplicates).
        for informer in &informers {
            if holds(&guest.informers, informer.informer()) {
                informer.replay(controller.as_ref());
            } else {
                informer.subscribe(sink.clone());
            }
        }
        for old in &guest.informers {
            if !holds(&informers, old.informer()) {
                old.unsubscribe(&sink);
            }
        }
        tracing::info!(
            "guest {name} swapped to version {} ({digest}), watching {}",
            version.number,
            describe_all(&informers)
        );
        guest.manifest = manifest;
        guest.digest = digest;
        guest.candidate_digest = candidate_digest;
        // The old uses go: watches only the old version needed stop.
        guest.informers = informers;
    }

    pub(super) async fn remove_guest(&self, guest: Guest) {
        let name = guest.controller.name().to_owned();
        guest.controller.shutdown(SHUTDOWN_TIMEOUT).await;
        guest.controller.forget_metrics();
        self.inner.metrics.forget_guest(&name);
        let sink: Arc<dyn EventSink> = guest.controller.clone();
        for informer in &guest.informers {
            informer.unsubscribe(&sink);
        }
        // Its uses go with it: the watches no other guest needs stop.
        guest.reads.clear();
        drop(guest);
        tracing::info!("guest {name} stopped: its manifest is gone");
    }

    /// Start or swap `name` to the loaded `version`, or report why it was refused.
    pub(super) fn finish_load(
        &self,
        guests: &mut BTreeMap<String, Guest>,
        name: String,
        version: Result<Version, StartError>,
        report: &mut ReloadReport,
    ) {
        let Some(guest) = guests.get_mut(&name) else {
            match version {
                Ok(version) => {
                    self.start_guest(guests, version);
                    report.started.push(name);
                }
                Err(reason) => {
                    tracing::error!("guest {name} not started: {reason}");
                    report.rejected.push(Skipped {
                        guest: name,
                        reason: reason.to_string(),
                        code: reason.code(),
                    });
                }
            }
            return;
        };
        match version {
            Ok(version) => {
                self.swap_guest(guest, version);
                report.swapped.push(name);
            }
            Err(reason) => {
                tracing::error!(
                    "guest {name}: new version rejected, version {} ({}) keeps running: {reason}",
                    guest.controller.version().number,
                    guest.digest
                );
                report.rejected.push(Skipped {
                    guest: name,
                    reason: reason.to_string(),
                    code: reason.code(),
                });
            }
        }
    }
}
