//! The benchmark guest: one typed `get` of the requested Pod, parsed into `k8s-openapi`'s
//! `Pod`, and nothing else — the smallest real reconcile, to measure what the sandbox costs.

use krec_guest::k8s_openapi::api::core::v1::Pod;
use krec_guest::prelude::*;

#[derive(Default)]
struct Getter;

impl Reconciler for Getter {
    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
        let pod = ctx.get::<Pod>(req.namespace(), &req.name)?;
        // Use the parsed object, so the parse cannot be optimised away.
        if pod.spec.map_or(0, |s| s.containers.len()) == 0 {
            return Err(Error::Invalid(format!("pod {req} has no containers")));
        }
        Ok(Action::done())
    }
}

export!(Getter);
