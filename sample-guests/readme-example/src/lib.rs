//! The README's guest example: marks every ConfigMap it sees as greeted.

use krec_guest::k8s_openapi::api::core::v1::ConfigMap;
use krec_guest::prelude::*;
use krec_guest::serde_json::json;

#[derive(Default)]
struct Greeter;

impl Reconciler for Greeter {
    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
        let Some(cm) = ctx.get_opt::<ConfigMap>(req.namespace(), &req.name)? else {
            return Ok(Action::done()); // deleted meanwhile: nothing to do
        };
        if cm.annotations().contains_key("example.com/greeted") {
            return Ok(Action::done());
        }
        info!("greeting {req}");
        let patch = json!({ "metadata": { "annotations": { "example.com/greeted": "hello" } } });
        ctx.patch::<ConfigMap>(req.namespace(), &req.name, &Patch::Merge(patch))?;
        Ok(Action::done())
    }
}

export!(Greeter);
