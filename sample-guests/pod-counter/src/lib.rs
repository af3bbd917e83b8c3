//! pod-counter: labels every ReplicaSet with the number of its pods (`pod-count`).
//!
//! The controller-runtime example of seed 000: `For(ReplicaSet)`, `Owns(Pod)`. Pods are selected
//! by the ReplicaSet's `spec.selector` (`matchLabels` and `matchExpressions`) in its namespace; the ReplicaSet is only
//! updated when the count changed, so the update's own watch event settles immediately.
//!
//! Only the Pods' metadata is needed (their labels, to count them), so the manifest watches
//! them with `metadataOnly` and the guest lists them as `PartialObjectMeta<Pod>`: the host
//! caches a few hundred bytes per Pod instead of the whole Pod.

use krec_guest::k8s_openapi::api::{apps::v1::ReplicaSet, core::v1::Pod};
use krec_guest::prelude::*;

/// The label this reconciler maintains.
pub const POD_COUNT_LABEL: &str = "pod-count";

#[derive(Default)]
struct PodCounter;

impl Reconciler for PodCounter {
    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
        let Some(mut rs) = ctx.get_opt::<ReplicaSet>(req.namespace(), &req.name)? else {
            debug!("ReplicaSet {req} is gone");
            return Ok(Action::done());
        };
        let selector = match rs.spec.as_ref().map(|spec| selector_string(&spec.selector)) {
            Some(Ok(Some(selector))) => selector,
            Some(Err(err)) => {
                warn!("ReplicaSet {req}: {err}; not counting");
                return Ok(Action::done());
            }
            // The API server rejects such ReplicaSets; an empty selector would match every pod.
            _ => {
                warn!("ReplicaSet {req} has an empty spec.selector; not counting");
                return Ok(Action::done());
            }
        };
        let params = ListParams::default()
            .namespace(req.namespace())
            .labels(&selector);
        let pods = ctx.list::<PartialObjectMeta<Pod>>(&params)?;
        let count = pods.len().to_string();

        let labels = rs.metadata.labels.get_or_insert_default();
        if labels.get(POD_COUNT_LABEL) == Some(&count) {
            return Ok(Action::done());
        }
        info!("ReplicaSet {req}: {POD_COUNT_LABEL}={count}");
        labels.insert(POD_COUNT_LABEL.to_owned(), count);
        ctx.update(&rs)?;
        Ok(Action::done())
    }
}

export!(PodCounter);
