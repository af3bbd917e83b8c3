//! What the API server's benchmarks and the host's share (the host's `benches/common` includes
//! this file): paths, the quick switch, statistics and the watch fan-out load.

#![allow(dead_code)] // each bench uses its own subset

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::Api;
use serde_json::json;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Whether `KREC_BENCH_QUICK` asks for the short run (`make bench-quick`).
pub fn quick() -> bool {
    std::env::var_os("KREC_BENCH_QUICK").is_some()
}

/// Median, minimum and maximum of `samples` (not empty).
pub fn median_min_max(mut samples: Vec<f64>) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    (
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1],
    )
}

/// The `p`-th percentile (0–100) of `samples` (not empty), nearest rank.
pub fn percentile(samples: &mut [f64], p: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// What [`watch_fanout`] measured.
pub struct FanOut {
    /// Update sent → event received, in µs, over every delivery to every watch.
    pub latencies: Vec<f64>,
    /// Updates written per second.
    pub write_rate: f64,
}

/// `total` merge patches of the ConfigMap `target` (which must exist at `from`), one every
/// `interval`, each stamped with its send time and watched by `watchers` watches.
pub async fn watch_fanout(
    cms: &Api<k8s_openapi::api::core::v1::ConfigMap>,
    target: &str,
    from: &str,
    total: usize,
    interval: Duration,
    watchers: usize,
) -> FanOut {
    use kube::api::{Patch, PatchParams, WatchEvent, WatchParams};
    let epoch = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let (cms, from) = (cms.clone(), from.to_owned());
        let params = WatchParams::default()
            .fields(&format!("metadata.name={target}"))
            .timeout(60);
        tasks.push(tokio::spawn(async move {
            let mut stream = cms.watch(&params, &from).await.expect("watch").boxed();
            let mut latencies = Vec::with_capacity(total);
            while let Some(event) = stream.try_next().await.expect("event") {
                if let WatchEvent::Modified(cm) = event {
                    let sent: f64 = cm
                        .data
                        .as_ref()
                        .and_then(|d| d.get("sent_us"))
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0.0);
                    latencies.push(epoch.elapsed().as_secs_f64() * 1e6 - sent);
                    if latencies.len() == total {
                        break;
                    }
                }
            }
            latencies
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut ticker = tokio::time::interval(interval);
    let started = Instant::now();
    for i in 0..total {
        ticker.tick().await;
        let sent = format!("{:.0}", epoch.elapsed().as_secs_f64() * 1e6);
        let patch = json!({"data": {"sent_us": sent, "i": i.to_string()}});
        cms.patch(target, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("patch");
    }
    let write_rate = total as f64 / started.elapsed().as_secs_f64();
    let mut latencies = Vec::new();
    for task in tasks {
        let got = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("watchers finish")
            .expect("watcher");
        latencies.extend(got);
    }
    FanOut {
        latencies,
        write_rate,
    }
}
