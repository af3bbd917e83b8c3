//! pod-defaulter: a mutating admission webhook. Every Pod it admits gets the label
//! `krec.dev/defaulted: "true"`, and each container without resource requests gets the default
//! requests — `cpu: 100m` and `memory: 64Mi` unless the manifest's `spec.config` says otherwise
//! (`config: {cpu: 250m, memory: 128Mi}`) — whether kubectl or a controller creates the Pod.

use std::collections::BTreeMap;

use krec_guest::k8s_openapi::api::core::v1::Pod;
use krec_guest::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use krec_guest::prelude::*;
use serde::Deserialize;

/// The label every admitted Pod carries.
pub const LABEL: &str = "krec.dev/defaulted";

/// `spec.config`: the requests set on containers that have none.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// CPU request (default `100m`).
    #[serde(default = "default_cpu")]
    pub cpu: String,
    /// Memory request (default `64Mi`).
    #[serde(default = "default_memory")]
    pub memory: String,
}

fn default_cpu() -> String {
    "100m".into()
}

fn default_memory() -> String {
    "64Mi".into()
}

/// The webhook, with its settings.
pub struct PodDefaulter {
    cpu: String,
    memory: String,
}

impl FromConfig for PodDefaulter {
    type Config = Option<Settings>;

    fn from_config(settings: Option<Settings>) -> Result<Self> {
        let settings = settings.unwrap_or(Settings {
            cpu: default_cpu(),
            memory: default_memory(),
        });
        for (field, value) in [("cpu", &settings.cpu), ("memory", &settings.memory)] {
            if value.is_empty() {
                return Err(Error::Invalid(format!("{field}: must not be empty")));
            }
        }
        Ok(PodDefaulter {
            cpu: settings.cpu,
            memory: settings.memory,
        })
    }
}

impl Mutator for PodDefaulter {
    type Object = Pod;

    fn mutate(&self, _req: &AdmissionRequest<Pod>, pod: &mut Pod, _ctx: &Context) -> Verdict {
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
                    ("cpu".into(), Quantity(self.cpu.clone())),
                    ("memory".into(), Quantity(self.memory.clone())),
                ]));
                defaulted.push(container.name.clone());
            }
        }
        let verdict = Verdict::allow();
        if defaulted.is_empty() {
            verdict
        } else {
            verdict.with_warning(format!(
                "pod-defaulter: default requests (cpu {}, memory {}) set on container(s) {}",
                self.cpu,
                self.memory,
                defaulted.join(", ")
            ))
        }
    }
}

export!(mutator: PodDefaulter);
