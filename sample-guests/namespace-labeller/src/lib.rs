//! namespace-labeller: for each Namespace, count its Deployments into an annotation, and warn
//! with an Event while a frozen Namespace has any.
//!
//! Shows the parts of a guest beyond `reconcile`:
//! - a **map function**: a Deployment's events reconcile its Namespace, one request per event,
//!   instead of recounting every Namespace (`map`, for the manifest's `mapByGuest` watch);
//! - **configuration**: the annotation and the label that freezes a Namespace come from the
//!   manifest's `spec.config`, checked against its `configSchema` and given to
//!   [`FromConfig::from_config`] once per instance.

use krec_guest::k8s_openapi::api::apps::v1::Deployment;
use krec_guest::k8s_openapi::api::core::v1::Namespace;
use krec_guest::prelude::*;
use krec_guest::serde_json::json;
use krec_guest::{DynamicObject, GroupVersionKind};

/// The guest's settings (`spec.config`).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    /// The annotation that gets the count.
    annotation: String,
    /// The label (with value `"true"`) that freezes a Namespace.
    frozen_label: String,
}

struct NamespaceLabeller {
    settings: Settings,
}

impl FromConfig for NamespaceLabeller {
    type Config = Settings;

    fn from_config(settings: Settings) -> Result<Self> {
        if !settings.annotation.contains('/') {
            return Err(Error::Invalid(format!(
                "annotation: {:?} needs a prefix you own (example.com/…)",
                settings.annotation
            )));
        }
        Ok(NamespaceLabeller { settings })
    }
}

impl Reconciler for NamespaceLabeller {
    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
        let Some(namespace) = ctx.get_opt::<Namespace>(None, &req.name)? else {
            return Ok(Action::done());
        };
        let deployments =
            ctx.list::<Deployment>(&ListParams::default().namespace(req.name.as_str()))?;
        let count = deployments.len().to_string();
        let frozen = namespace
            .labels()
            .get(&self.settings.frozen_label)
            .map(String::as_str)
            == Some("true");
        if frozen && !deployments.is_empty() {
            ctx.record_event(
                &namespace,
                EventType::Warning,
                "DeploymentsInFrozenNamespace",
                &format!("{} Deployment(s) in a frozen namespace", deployments.len()),
            )?;
        }
        if namespace.annotations().get(&self.settings.annotation) != Some(&count) {
            info!("{} has {count} Deployment(s)", req.name);
            let patch =
                json!({ "metadata": { "annotations": { &self.settings.annotation: count } } });
            ctx.patch::<Namespace>(None, &req.name, &Patch::Merge(patch))?;
        }
        Ok(Action::done())
    }

    /// A Deployment's events reconcile its Namespace (cluster-scoped: no namespace).
    fn map(&self, _kind: &GroupVersionKind, object: &DynamicObject) -> Vec<Request> {
        object
            .namespace()
            .map(|ns| Request::cluster(&ns))
            .into_iter()
            .collect()
    }
}

export!(NamespaceLabeller);

#[cfg(test)]
mod tests {
    use super::*;
    use krec_guest::native;

    #[test]
    fn map_should_name_the_deployments_namespace() {
        let labeller: NamespaceLabeller = native::configure(
            r#"{"annotation": "example.com/deployments", "frozenLabel": "example.com/frozen"}"#,
        )
        .expect("config");
        let deployment: DynamicObject = krec_guest::serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team-a"}
        }))
        .expect("object");
        let kind = GroupVersionKind::gvk("apps", "v1", "Deployment");
        assert_eq!(
            labeller.map(&kind, &deployment),
            vec![Request::cluster("team-a")]
        );
    }

    #[test]
    fn a_bad_config_should_name_the_field() {
        let err =
            native::configure::<NamespaceLabeller>(r#"{"annotation": 3, "frozenLabel": "x"}"#)
                .err()
                .expect("refused");
        assert!(err.to_string().contains("spec.config.annotation"), "{err}");
        let err = native::configure::<NamespaceLabeller>(
            r#"{"annotation": "plain", "frozenLabel": "x"}"#,
        )
        .err()
        .expect("refused");
        assert!(err.to_string().contains("needs a prefix"), "{err}");
    }
}
