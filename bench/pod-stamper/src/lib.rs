//! The benchmark reconciler, one source for every arm of `make bench`'s throughput and latency
//! figures: built as a `wasm32-wasip2` component it is the Wasm guest; compiled natively it runs
//! in krec's host in place of the guest ([`krec_guest::native`]); and [`stamp`] is the whole
//! decision kube-rs's `Controller` arm makes.
//!
//! The work is a typical controller's: get the requested Pod from the cache, compare what it
//! asks for (the label [`GENERATION`]) with what was last recorded (the annotation [`STAMP`]),
//! and update the Pod when they differ. Pods labelled [`READ_ONLY`] are read and decided on but
//! never written: the read-only variant, which isolates the cost of the host and the sandbox
//! from the API server's. The annotation is [`STAMP`] unless `spec.config.annotation` names
//! another (the density benchmark runs many stampers over the same Pods, each with its own).

use krec_guest::k8s_openapi::api::core::v1::Pod;
use krec_guest::prelude::*;

/// Label holding the generation the benchmark asks for.
pub const GENERATION: &str = "bench.krec.dev/generation";
/// Annotation recording the generation last reconciled.
pub const STAMP: &str = "bench.krec.dev/stamp";
/// Label marking Pods that are read, never written.
pub const READ_ONLY: &str = "bench.krec.dev/read-only";

/// What [`stamp`] decided for a Pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The stamp was set: write the Pod.
    Write,
    /// Already up to date.
    UpToDate,
    /// Read-only Pod: stamped in memory only (what a write would have carried).
    ReadOnly,
}

/// Stamp `pod` with the generation its label asks for; says whether it must be written.
///
/// Looks at the whole parsed object (containers and their environment), as a real reconciler
/// deciding on a Pod's spec would, so that no arm can skip the parse.
pub fn stamp(pod: &mut Pod) -> Decision {
    stamp_as(pod, STAMP)
}

/// [`stamp`] with the annotation `annotation`.
pub fn stamp_as(pod: &mut Pod, annotation: &str) -> Decision {
    let wanted = pod.labels().get(GENERATION).cloned().unwrap_or_default();
    let settings: usize = pod
        .spec
        .as_ref()
        .map(|spec| {
            spec.containers
                .iter()
                .map(|c| c.env.as_ref().map_or(0, Vec::len))
                .sum()
        })
        .unwrap_or(0);
    let value = format!("{wanted}/{settings}");
    let read_only = pod.labels().contains_key(READ_ONLY);
    let annotations = pod.annotations_mut();
    if annotations.get(annotation) == Some(&value) {
        return Decision::UpToDate;
    }
    annotations.insert(annotation.to_owned(), value);
    if read_only {
        Decision::ReadOnly
    } else {
        Decision::Write
    }
}

/// [`stamp_as`] on a [`Lazy`] Pod: the same decision, reading only the labels, the annotation
/// and the containers' environment lists from the text (their entries counted, not decoded);
/// the metadata is decoded (for the annotation to be set) only when the Pod is to be written.
pub fn stamp_lazy(pod: &mut Lazy<Pod>, annotation: &str) -> Decision {
    let wanted = pod.label(GENERATION).unwrap_or_default();
    let settings: usize = pod.at(&["spec", "containers"]).map_or(0, |containers| {
        containers
            .elements()
            .map(|c| c.get("env").map_or(0, |env| env.elements().count()))
            .sum()
    });
    let value = format!("{wanted}/{settings}");
    if pod.annotation(annotation).as_deref() == Some(value.as_str()) {
        return Decision::UpToDate;
    }
    if pod.label(READ_ONLY).is_some() {
        return Decision::ReadOnly;
    }
    pod.annotations_mut().insert(annotation.to_owned(), value);
    Decision::Write
}

/// The reconciler: get, [`stamp_as`] its annotation, write when needed.
pub struct PodStamper {
    annotation: String,
    patch: bool,
    lazy: bool,
}

/// `spec.config`: which annotation to stamp (absent: [`STAMP`]) and how to write it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The annotation recording the generation last reconciled.
    pub annotation: String,
    /// Write only the annotation, as a merge patch (no `resourceVersion`: never a conflict
    /// with other writers of the same Pod), instead of updating the whole Pod.
    #[serde(default)]
    pub patch: bool,
    /// Read the Pod as a [`Lazy`] view ([`stamp_lazy`]) instead of decoding it whole.
    #[serde(default)]
    pub lazy: bool,
}

impl FromConfig for PodStamper {
    type Config = Option<Settings>;

    fn from_config(settings: Option<Settings>) -> Result<Self> {
        Ok(match settings {
            Some(s) => PodStamper {
                annotation: s.annotation,
                patch: s.patch,
                lazy: s.lazy,
            },
            None => PodStamper {
                annotation: STAMP.to_owned(),
                patch: false,
                lazy: false,
            },
        })
    }
}

/// The merge patch that sets only `annotation` to the value [`stamp_as`] gave `pod`.
pub fn annotation_patch(pod: &Pod, annotation: &str) -> krec_guest::serde_json::Value {
    let value = pod.annotations().get(annotation).cloned();
    krec_guest::serde_json::json!({"metadata": {"annotations": {annotation: value}}})
}

impl Reconciler for PodStamper {
    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
        if self.lazy {
            return self.reconcile_lazy(&req, ctx);
        }
        let Some(mut pod) = ctx.get_opt::<Pod>(req.namespace(), &req.name)? else {
            return Ok(Action::done());
        };
        if stamp_as(&mut pod, &self.annotation) == Decision::Write {
            if self.patch {
                let patch = Patch::Merge(annotation_patch(&pod, &self.annotation));
                ctx.patch::<Pod>(req.namespace(), &req.name, &patch)?;
            } else {
                ctx.update(&pod)?;
            }
        }
        Ok(Action::done())
    }
}

impl PodStamper {
    /// [`Reconciler::reconcile`] on a [`Lazy`] Pod.
    fn reconcile_lazy(&self, req: &Request, ctx: &Context) -> Result<Action> {
        let Some(mut pod) = ctx.get_opt::<Lazy<Pod>>(req.namespace(), &req.name)? else {
            return Ok(Action::done());
        };
        if stamp_lazy(&mut pod, &self.annotation) == Decision::Write {
            if self.patch {
                let value = pod.annotation(&self.annotation).map(|v| v.into_owned());
                let patch = krec_guest::serde_json::json!({"metadata": {"annotations": {&self.annotation: value}}});
                ctx.patch::<Lazy<Pod>>(req.namespace(), &req.name, &Patch::Merge(patch))?;
            } else {
                ctx.update(&pod)?;
            }
        }
        Ok(Action::done())
    }
}

/// The benchmark's validating webhook: a Pod may not ask for an older generation than the one
/// stored — the object read, and the stored Pod read from the host's cache (the cross-object
/// check validators make, as `sample-guests/foo-validator` does with a `list`).
///
/// The review's objects arrive as [`Lazy`] Pods; with `spec.config.lazy` the validator reads
/// the one label it needs from each, otherwise it decodes both Pods whole, as a validator with
/// `type Object = Pod` does.
pub struct GenerationValidator {
    lazy: bool,
}

impl FromConfig for GenerationValidator {
    type Config = Option<Settings>;

    fn from_config(settings: Option<Settings>) -> Result<Self> {
        Ok(GenerationValidator {
            lazy: settings.is_some_and(|s| s.lazy),
        })
    }
}

impl GenerationValidator {
    /// The generation `pod` asks for: from the text, or from the whole decoded Pod.
    fn generation(&self, pod: &Lazy<Pod>) -> Option<u64> {
        if self.lazy {
            pod.label(GENERATION)?.parse().ok()
        } else {
            let pod = pod.decode().ok()?;
            pod.labels().get(GENERATION)?.parse().ok()
        }
    }
}

impl Validator for GenerationValidator {
    type Object = Lazy<Pod>;

    fn validate(&self, req: &AdmissionRequest<Lazy<Pod>>, ctx: &Context) -> Verdict {
        let Some(pod) = &req.object else {
            return Verdict::allow();
        };
        let Some(wanted) = self.generation(pod) else {
            return Verdict::invalid(format!(
                "metadata.labels[{GENERATION}]: Invalid value: must be a number"
            ));
        };
        let Some(name) = req.name.as_deref() else {
            return Verdict::allow();
        };
        let stored = match ctx.get_opt::<Lazy<Pod>>(req.namespace.as_deref(), name) {
            Ok(stored) => stored,
            Err(err) => panic!("reading the stored Pod: {err}"),
        };
        match stored.as_ref().and_then(|stored| self.generation(stored)) {
            Some(current) if current > wanted => Verdict::invalid(format!(
                "metadata.labels[{GENERATION}]: Invalid value: {wanted}: the Pod is at generation {current}"
            )),
            _ => Verdict::allow(),
        }
    }
}

export!(reconciler: PodStamper, validator: GenerationValidator);

#[cfg(test)]
mod tests {
    use super::*;
    use krec_guest::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(labels: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn stamp_should_write_once_per_generation() {
        let mut p = pod(&[(GENERATION, "3")]);
        assert_eq!(stamp(&mut p), Decision::Write);
        assert_eq!(p.annotations().get(STAMP).map(String::as_str), Some("3/0"));
        assert_eq!(stamp(&mut p), Decision::UpToDate);
        p.labels_mut().insert(GENERATION.into(), "4".into());
        assert_eq!(stamp(&mut p), Decision::Write);
    }

    #[test]
    fn stamp_should_never_write_read_only_pods() {
        let mut p = pod(&[(GENERATION, "1"), (READ_ONLY, "")]);
        assert_eq!(stamp(&mut p), Decision::ReadOnly);
    }

    #[test]
    fn the_lazy_stamp_should_decide_and_write_as_the_typed_one() {
        use krec_guest::FromJson;
        use krec_guest::k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec};
        let env = |n: usize| {
            (0..n)
                .map(|i| EnvVar {
                    name: format!("E{i}"),
                    value: Some("\"quoted\" ]}".into()),
                    ..Default::default()
                })
                .collect::<Vec<_>>()
        };
        for labels in [
            vec![(GENERATION, "3")],
            vec![(GENERATION, "1"), (READ_ONLY, "")],
            vec![],
        ] {
            let mut typed = pod(&labels);
            typed.spec = Some(PodSpec {
                containers: vec![
                    Container {
                        name: "a".into(),
                        env: Some(env(3)),
                        ..Default::default()
                    },
                    Container {
                        name: "b".into(),
                        ..Default::default()
                    },
                    Container {
                        name: "c".into(),
                        env: Some(env(2)),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            });
            let text = krec_guest::serde_json::to_string(&typed).expect("json");
            let mut lazy = Lazy::<Pod>::from_json_text(text).expect("lazy");
            // A read-only Pod is stamped in memory by the typed arm (what a write would have
            // carried) and not at all by the lazy one: only the first decision compares.
            let rounds = if labels.iter().any(|(k, _)| *k == READ_ONLY) {
                1
            } else {
                2
            };
            for _ in 0..rounds {
                let decision = stamp(&mut typed);
                assert_eq!(stamp_lazy(&mut lazy, STAMP), decision, "{labels:?}");
                if decision == Decision::Write {
                    assert_eq!(
                        lazy.annotation(STAMP),
                        typed.annotations().get(STAMP).map(|v| v.as_str().into())
                    );
                    let sent: Pod = lazy.decode().expect("decode");
                    assert_eq!(sent, typed);
                }
            }
        }
    }
}
