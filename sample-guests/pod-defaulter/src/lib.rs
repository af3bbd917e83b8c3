//! pod-defaulter: a mutating admission webhook. Every Pod it admits gets the label
//! `krec.dev/defaulted: "true"`, and each container without resource requests gets
//! `cpu: 100m` and `memory: 64Mi` — whether kubectl or a controller creates the Pod.

use std::collections::BTreeMap;

use krec_guest::k8s_openapi::api::core::v1::Pod;
use krec_guest::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use krec_guest::prelude::*;

/// The label every admitted Pod carries.
pub const LABEL: &str = "krec.dev/defaulted";

struct PodDefaulter;

impl Mutator for PodDefaulter {
    type Object = Pod;

    fn mutate(_req: &AdmissionRequest<Pod>, pod: &mut Pod, _ctx: &Context) -> Verdict {
        pod.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(LABEL.into(), "true".into());
        let mut defaulted = Vec::new();
        for container in pod
            .spec
            .iter_mut()
            .flat_map(|spec| spec.containers.iter_mut())
        {
            let resources = container.resources.get_or_insert_with(Default::default);
            if resources.requests.as_ref().is_none_or(BTreeMap::is_empty) {
                resources.requests = Some(BTreeMap::from([
                    ("cpu".into(), Quantity("100m".into())),
                    ("memory".into(), Quantity("64Mi".into())),
                ]));
                defaulted.push(container.name.clone());
            }
        }
        let verdict = Verdict::allow();
        if defaulted.is_empty() {
            verdict
        } else {
            verdict.with_warning(format!(
                "pod-defaulter: default requests (cpu 100m, memory 64Mi) set on container(s) {}",
                defaulted.join(", ")
            ))
        }
    }
}

export!(mutator: PodDefaulter);
