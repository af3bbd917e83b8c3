//! Which JSON parser reads a Pod fastest where a guest runs: every candidate does the read
//! `bench/pod-stamper` does — the generation label, the read-only label, the stamp annotation
//! and the number of environment variables over all containers — from the Pod's JSON text, as
//! a guest receives it from the host (an owned `String`).
//!
//! The same code is built natively (the guest_call benchmark calls [`measure`]) and as a
//! `wasm32-wasip2` command (the benchmark runs it under wasmtime, the text on stdin), so each
//! candidate's Wasm/native ratio comes from one run.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

use krec_guest::k8s_openapi::api::core::v1::Pod;
use krec_guest::{FromJson, Lazy};
use serde::Deserialize;
use serde::de::IgnoredAny;

/// The label holding the wanted generation (as `pod_stamper::GENERATION`).
const GENERATION: &str = "bench.krec.dev/generation";
/// The read-only label.
const READ_ONLY: &str = "bench.krec.dev/read-only";
/// The stamp annotation.
const STAMP: &str = "bench.krec.dev/stamp";

/// What every candidate reads from the Pod.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Read {
    /// The generation label.
    pub generation: Option<String>,
    /// Whether the read-only label is there.
    pub read_only: bool,
    /// The stamp annotation.
    pub stamp: Option<String>,
    /// Environment variables over all containers.
    pub settings: usize,
}

/// A candidate: its name, and the read from an owned copy of the text.
pub type Candidate = (&'static str, fn(String) -> Read);

/// Every candidate, the current SDK's (typed `serde_json`) first.
pub const CANDIDATES: [Candidate; 8] = [
    (
        "serde_json typed Pod (get::<Pod>, the baseline)",
        serde_typed,
    ),
    ("serde_json Value", serde_value),
    (
        "serde_json partial struct (only the fields read)",
        serde_partial,
    ),
    (
        "serde_json RawValue (validate only, nothing read)",
        serde_raw,
    ),
    (
        "krec Lazy<Pod> (get::<Lazy<Pod>>: the text kept, fields found when read)",
        krec_lazy,
    ),
    ("sonic-rs lazy get", sonic_lazy),
    ("sonic-rs typed Pod", sonic_typed),
    ("simd-json borrowed value (tape)", simd_value),
];

/// The read from a decoded `Pod` (both typed candidates').
fn typed_read(pod: Pod) -> Read {
    let labels = pod.metadata.labels.unwrap_or_default();
    Read {
        generation: labels.get(GENERATION).cloned(),
        read_only: labels.contains_key(READ_ONLY),
        stamp: pod.metadata.annotations.and_then(|mut a| a.remove(STAMP)),
        settings: pod.spec.map_or(0, |s| {
            s.containers
                .iter()
                .map(|c| c.env.as_ref().map_or(0, Vec::len))
                .sum()
        }),
    }
}

fn serde_typed(text: String) -> Read {
    typed_read(serde_json::from_str(&text).unwrap_or_default())
}

fn serde_value(text: String) -> Read {
    let pod: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let label = |key: &str| pod["metadata"]["labels"][key].as_str().map(str::to_owned);
    Read {
        generation: label(GENERATION),
        read_only: label(READ_ONLY).is_some(),
        stamp: pod["metadata"]["annotations"][STAMP]
            .as_str()
            .map(str::to_owned),
        settings: pod["spec"]["containers"].as_array().map_or(0, |c| {
            c.iter()
                .map(|c| c["env"].as_array().map_or(0, Vec::len))
                .sum()
        }),
    }
}

#[derive(Deserialize, Default)]
struct PartialPod {
    #[serde(default)]
    metadata: PartialMeta,
    #[serde(default)]
    spec: PartialSpec,
}

#[derive(Deserialize, Default)]
struct PartialMeta {
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
struct PartialSpec {
    #[serde(default)]
    containers: Vec<PartialContainer>,
}

#[derive(Deserialize, Default)]
struct PartialContainer {
    #[serde(default)]
    env: Vec<IgnoredAny>,
}

fn serde_partial(text: String) -> Read {
    let mut pod: PartialPod = serde_json::from_str(&text).unwrap_or_default();
    Read {
        generation: pod.metadata.labels.remove(GENERATION),
        read_only: pod.metadata.labels.contains_key(READ_ONLY),
        stamp: pod.metadata.annotations.remove(STAMP),
        settings: pod.spec.containers.iter().map(|c| c.env.len()).sum(),
    }
}

fn serde_raw(text: String) -> Read {
    let raw: Option<&serde_json::value::RawValue> = serde_json::from_str(&text).ok();
    Read {
        read_only: raw.is_some(),
        ..Read::default()
    }
}

fn lazy_read(pod: &Lazy<Pod>) -> Read {
    Read {
        generation: pod.label(GENERATION).map(|v| v.into_owned()),
        read_only: pod.label(READ_ONLY).is_some(),
        stamp: pod.annotation(STAMP).map(|v| v.into_owned()),
        settings: pod.at(&["spec", "containers"]).map_or(0, |c| {
            c.elements()
                .map(|c| c.get("env").map_or(0, |e| e.elements().count()))
                .sum()
        }),
    }
}

fn krec_lazy(text: String) -> Read {
    lazy_read(
        &<Lazy<Pod> as FromJson>::from_json_text(text).unwrap_or_else(|_| Lazy::from_json("")),
    )
}

fn sonic_lazy(text: String) -> Read {
    let string = |path: &[&str]| {
        sonic_rs::get_from_str(&text, path)
            .ok()
            .and_then(|v| sonic_rs::from_str::<String>(v.as_raw_str()).ok())
    };
    let settings = sonic_rs::get_from_str(&text, ["spec", "containers"])
        .ok()
        .and_then(|c| sonic_rs::from_str::<Vec<PartialContainer>>(c.as_raw_str()).ok())
        .map_or(0, |c| c.iter().map(|c| c.env.len()).sum());
    Read {
        generation: string(&["metadata", "labels", GENERATION]),
        read_only: string(&["metadata", "labels", READ_ONLY]).is_some(),
        stamp: string(&["metadata", "annotations", STAMP]),
        settings,
    }
}

fn sonic_typed(text: String) -> Read {
    typed_read(sonic_rs::from_str(&text).unwrap_or_default())
}

fn simd_value(text: String) -> Read {
    use simd_json::prelude::*;
    let mut bytes = text.into_bytes();
    let Ok(pod) = simd_json::to_borrowed_value(&mut bytes) else {
        return Read::default();
    };
    let meta = pod.get("metadata");
    let label = |key: &str| {
        meta.and_then(|m| m.get("labels"))
            .and_then(|l| l.get_str(key))
            .map(str::to_owned)
    };
    Read {
        generation: label(GENERATION),
        read_only: label(READ_ONLY).is_some(),
        stamp: meta
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get_str(STAMP))
            .map(str::to_owned),
        settings: pod
            .get("spec")
            .and_then(|s| s.get_array("containers"))
            .map_or(0, |c| {
                c.iter()
                    .map(|c| c.get_array("env").map_or(0, |e| e.len()))
                    .sum()
            }),
    }
}

/// One figure: a candidate's median µs per read over the rounds, and its min and max.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// The candidate.
    pub name: &'static str,
    /// Median µs per read.
    pub median_us: f64,
    /// Fastest round.
    pub min_us: f64,
    /// Slowest round.
    pub max_us: f64,
}

/// Time every candidate on `text`: `rounds` rounds of `per_round` reads, candidates
/// interleaved round by round. Panics if a candidate reads something else than the baseline
/// (a parser that skipped the work would win for nothing).
pub fn measure(text: &str, rounds: usize, per_round: usize) -> Vec<Figure> {
    let expected = serde_typed(text.to_owned());
    assert!(
        expected.generation.is_some() && expected.settings > 0,
        "{expected:?}"
    );
    for (name, read) in CANDIDATES.iter().skip(1) {
        if !name.contains("RawValue") {
            assert_eq!(
                read(text.to_owned()),
                expected,
                "{name} read something else"
            );
        }
    }
    let mut samples = vec![Vec::with_capacity(rounds); CANDIDATES.len()];
    for _ in 0..rounds {
        for ((_, read), samples) in CANDIDATES.iter().zip(&mut samples) {
            let started = Instant::now();
            for _ in 0..per_round {
                black_box(read(black_box(text).to_owned()));
            }
            samples.push(started.elapsed().as_secs_f64() * 1e6 / per_round as f64);
        }
    }
    CANDIDATES
        .iter()
        .zip(samples)
        .map(|((name, _), mut samples)| {
            samples.sort_by(f64::total_cmp);
            Figure {
                name,
                median_us: samples[samples.len() / 2],
                min_us: samples[0],
                max_us: samples[samples.len() - 1],
            }
        })
        .collect()
}
