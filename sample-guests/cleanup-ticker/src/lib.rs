//! cleanup-ticker: deletes ConfigMaps whose `krec.dev/expires-at` annotation is in the past.
//!
//! The topolvm cleanup of seed 000: not driven by object events but by a periodic generic source
//! (the manifest's `tickers`). Each tick lists ConfigMaps (in the request's namespace, or all
//! namespaces for a request without one) and deletes the expired ones, with a resourceVersion
//! precondition so a ConfigMap whose expiry was extended meanwhile is kept. An annotation that is
//! not RFC 3339 is reported and the ConfigMap kept: bad input never causes a deletion.

use jiff::Timestamp;
use krec_guest::k8s_openapi::api::core::v1::ConfigMap;
use krec_guest::prelude::*;
use krec_guest::{Error, Preconditions};

/// The annotation holding the expiry time, RFC 3339 (e.g. `2026-01-02T03:04:05Z`).
pub const EXPIRES_AT: &str = "krec.dev/expires-at";

#[derive(Default)]
struct CleanupTicker;

impl Reconciler for CleanupTicker {
    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
        let now = Timestamp::now();
        let mut deleted = 0;
        for cm in ctx.list::<ConfigMap>(&ListParams::default().namespace(req.namespace()))? {
            let Some(expires_at) = cm.annotations().get(EXPIRES_AT) else {
                continue;
            };
            if cm.metadata.deletion_timestamp.is_some() {
                continue; // already being deleted, held by a finalizer
            }
            let key = format!("{}/{}", cm.namespace().unwrap_or_default(), cm.name_any());
            let expiry = match expires_at.parse::<Timestamp>() {
                Ok(expiry) => expiry,
                Err(err) => {
                    warn!("{key}: {EXPIRES_AT}={expires_at:?} is not RFC 3339 ({err}); keeping it");
                    continue;
                }
            };
            if expiry > now {
                continue;
            }
            let preconditions = Preconditions {
                uid: cm.metadata.uid.clone(),
                resource_version: cm.metadata.resource_version.clone(),
            };
            match ctx.delete_with::<ConfigMap>(
                cm.namespace().as_deref(),
                &cm.name_any(),
                &preconditions,
            ) {
                Ok(()) => {
                    info!("deleted {key}: expired at {expiry}");
                    deleted += 1;
                }
                // Already gone, or changed since we listed it: the next tick looks again.
                Err(Error::NotFound(_)) => {}
                Err(Error::Conflict(msg)) => info!("{key} changed meanwhile, kept: {msg}"),
                Err(err) => return Err(err),
            }
        }
        debug!("tick done, {deleted} deleted");
        Ok(Action::done())
    }
}

export!(CleanupTicker);
