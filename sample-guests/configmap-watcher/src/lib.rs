//! configmap-watcher: keeps a summary of how many ConfigMaps each namespace has.
//!
//! Seed 001's `Watches(ConfigMap)` mapped to one fixed request: whichever ConfigMap changes, the
//! host enqueues the same request, so bursts of changes collapse into one reconcile. The
//! summary lives in the ConfigMap `configmap-summary` in the request's namespace, one data key
//! per namespace; the summary itself is not counted.

use std::collections::BTreeMap;

use krec_guest::k8s_openapi::api::core::v1::ConfigMap;
use krec_guest::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use krec_guest::prelude::*;

/// Name of the summary ConfigMap.
pub const SUMMARY_NAME: &str = "configmap-summary";

#[derive(Default)]
struct ConfigMapWatcher;

impl Reconciler for ConfigMapWatcher {
    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
        let summary_ns = req.namespace().unwrap_or("default");
        let all = ctx.list::<ConfigMap>(&ListParams::default())?;

        let mut counts: BTreeMap<String, String> = BTreeMap::new();
        let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
        for cm in &all {
            let ns = cm.metadata.namespace.as_deref().unwrap_or_default();
            let name = cm.metadata.name.as_deref().unwrap_or_default();
            if ns == summary_ns && name == SUMMARY_NAME {
                continue;
            }
            debug!("saw ConfigMap {ns}/{name}");
            *tally.entry(ns).or_default() += 1;
        }
        counts.extend(
            tally
                .into_iter()
                .map(|(ns, n)| (ns.to_owned(), n.to_string())),
        );
        info!("{} ConfigMaps in {} namespaces", all.len(), counts.len());

        let summary = ConfigMap {
            metadata: ObjectMeta {
                name: Some(SUMMARY_NAME.into()),
                namespace: Some(summary_ns.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let (_, result) = ctx.create_or_update(summary, |summary| {
            summary.data = Some(counts);
            Ok(())
        })?;
        if result != OperationResult::Unchanged {
            info!("{result:?} {summary_ns}/{SUMMARY_NAME}");
        }
        Ok(Action::done())
    }
}

export!(ConfigMapWatcher);
