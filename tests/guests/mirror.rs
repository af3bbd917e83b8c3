// The shared body of the `mirror-a` and `mirror-b` test guests: a reconciler that copies a
// ConfigMap into the namespaces its annotation names, as a new user writes one (whole-object
// `create` and `update`, `delete` of copies no longer wanted). Version `b` also labels its
// copies; the rollout tests shadow `a` with `b`.

use krec_guest::k8s_openapi::api::core::v1::ConfigMap;
use krec_guest::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use krec_guest::prelude::*;

/// Annotation on a source ConfigMap: the namespaces to copy it into, comma-separated.
pub const MIRROR_TO: &str = "mirror.krec.dev/to";
/// Label on every copy: the source's `namespace.name`.
pub const MIRROR_OF: &str = "mirror.krec.dev/of";
/// Label version `b` puts on its copies.
pub const MIRRORED_BY: &str = "mirror.krec.dev/by";

#[derive(Default)]
struct Mirror;

impl Mirror {
    /// The labels a copy of `source` should carry.
    fn labels(source: &str) -> std::collections::BTreeMap<String, String> {
        let mut labels = std::collections::BTreeMap::from([(MIRROR_OF.to_owned(), source.to_owned())]);
        if let Some(version) = LABELLED_BY {
            labels.insert(MIRRORED_BY.to_owned(), version.to_owned());
        }
        labels
    }
}

impl Reconciler for Mirror {
    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
        let namespace = req.namespace().unwrap_or_default();
        let of = format!("{namespace}.{}", req.name);
        let source = ctx.get_opt::<ConfigMap>(req.namespace(), &req.name)?;
        if source.as_ref().is_some_and(|s| s.labels().contains_key(MIRROR_OF)) {
            return Ok(Action::done()); // a copy
        }
        let targets: Vec<String> = source
            .as_ref()
            .and_then(|s| s.annotations().get(MIRROR_TO).cloned())
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        if let Some(source) = &source {
            for target in &targets {
                let wanted_labels = Self::labels(&of);
                match ctx.get_opt::<ConfigMap>(target.as_str(), &req.name)? {
                    None => {
                        let copy = ConfigMap {
                            metadata: ObjectMeta {
                                name: Some(req.name.clone()),
                                namespace: Some(target.clone()),
                                labels: Some(wanted_labels),
                                ..Default::default()
                            },
                            data: source.data.clone(),
                            ..Default::default()
                        };
                        ctx.create(&copy)?;
                    }
                    Some(mut copy) => {
                        let labels = copy.metadata.labels.get_or_insert_with(Default::default);
                        let labelled = wanted_labels.iter().all(|(k, v)| labels.get(k) == Some(v));
                        if copy.data != source.data || !labelled {
                            labels.extend(wanted_labels);
                            copy.data = source.data.clone();
                            ctx.update(&copy)?;
                        }
                    }
                }
            }
        }
        let copies = ctx.list::<ConfigMap>(&ListParams::default().labels(&format!("{MIRROR_OF}={of}")))?;
        for copy in copies {
            let at = copy.metadata.namespace.clone().unwrap_or_default();
            if !targets.contains(&at) {
                ctx.delete::<ConfigMap>(at.as_str(), &req.name)?;
            }
        }
        Ok(Action::done())
    }
}

export!(Mirror);
