// The shared body of the `stamper-a` and `stamper-b` test guests: two versions of one reconciler
// for the hot-swap tests. Each stamps a ConfigMap with its version and the `data.value` it saw.

use krec_guest::k8s_openapi::api::core::v1::ConfigMap;
use krec_guest::prelude::*;
use krec_guest::serde_json::json;

/// Annotation naming the version that last reconciled the ConfigMap.
pub const STAMPED_BY: &str = "krec.dev/stamped-by";
/// Annotation holding the `data.value` that version saw.
pub const STAMPED_VALUE: &str = "krec.dev/stamped-value";

#[derive(Default)]
struct Stamper;

impl Reconciler for Stamper {
    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
        let Some(cm) = ctx.get_opt::<ConfigMap>(req.namespace(), &req.name)? else {
            return Ok(Action::done());
        };
        let value = cm
            .data
            .as_ref()
            .and_then(|d| d.get("value"))
            .cloned()
            .unwrap_or_default();
        let annotations = cm.annotations();
        if annotations.get(STAMPED_BY).map(String::as_str) == Some(VERSION)
            && annotations.get(STAMPED_VALUE) == Some(&value)
        {
            return Ok(Action::done());
        }
        let patch = json!({"metadata": {"annotations": {STAMPED_BY: VERSION, STAMPED_VALUE: value}}});
        ctx.patch::<ConfigMap>(req.namespace(), &req.name, &Patch::Merge(patch))?;
        Ok(Action::done())
    }
}

export!(Stamper);
