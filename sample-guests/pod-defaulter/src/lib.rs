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

#[cfg(test)]
mod tests {
    use super::*;
    use krec_guest::k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use krec_guest::testing::FakeCluster;

    fn pod(requests: Option<(&str, &str)>) -> Pod {
        let mut container = Container {
            name: "web".into(),
            image: Some("registry.k8s.io/pause:3.10".into()),
            ..Default::default()
        };
        if let Some((cpu, memory)) = requests {
            container.resources = Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".into(), Quantity(cpu.into())),
                    ("memory".into(), Quantity(memory.into())),
                ])),
                ..Default::default()
            });
        }
        let mut pod = Pod {
            spec: Some(PodSpec {
                containers: vec![container],
                ..Default::default()
            }),
            ..Default::default()
        };
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("default".into());
        pod
    }

    fn requests(pod: &Pod) -> (String, String) {
        let requests = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers[0].resources.as_ref())
            .and_then(|r| r.requests.clone())
            .unwrap_or_default();
        (requests["cpu"].0.clone(), requests["memory"].0.clone())
    }

    #[test]
    fn a_pod_should_be_labelled_and_get_the_default_requests() {
        let defaulter: PodDefaulter = FakeCluster::configure("null").expect("no config");
        let mutated = FakeCluster::new().mutate(&defaulter, &AdmissionRequest::create(pod(None)));
        assert!(mutated.verdict.allowed);
        assert_eq!(
            mutated.verdict.warnings,
            ["pod-defaulter: default requests (cpu 100m, memory 64Mi) set on container(s) web"]
        );
        let object = mutated.object.expect("the pod");
        assert_eq!(object.labels()[LABEL], "true");
        assert_eq!(requests(&object), ("100m".into(), "64Mi".into()));
    }

    #[test]
    fn configured_requests_should_be_used_and_a_containers_own_kept() {
        let defaulter: PodDefaulter =
            FakeCluster::configure(r#"{"cpu": "250m", "memory": "128Mi"}"#).expect("config");
        let cluster = FakeCluster::new();
        let mutated = cluster.mutate(&defaulter, &AdmissionRequest::create(pod(None)));
        assert_eq!(
            requests(&mutated.object.expect("pod")),
            ("250m".into(), "128Mi".into())
        );
        let own = cluster.mutate(
            &defaulter,
            &AdmissionRequest::create(pod(Some(("1", "1Gi")))),
        );
        assert_eq!(
            requests(&own.object.expect("pod")),
            ("1".into(), "1Gi".into())
        );
        assert!(own.verdict.warnings.is_empty());
        // A setting it refuses, naming it.
        let refused = FakeCluster::configure::<PodDefaulter>(r#"{"cpu": ""}"#)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            refused.as_deref(),
            Some("invalid: spec.config: invalid: cpu: must not be empty")
        );
    }
}
