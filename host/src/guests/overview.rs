//! [`Overview`]: what the host knows of each of its guests at a glance — state, version,
//! figures, the last error, the rollout, the last reconciles — as `GET /guests` on the admin
//! port serves it to `krec top` and the status page.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::Manager;
use crate::controller::{Controller, DURATION_BUCKETS, Reconciled};

/// Every guest of a host, with when it was taken.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Overview {
    /// When (Unix milliseconds): two overviews' counts over the time between them are rates.
    pub unix_ms: u64,
    /// The upper bounds (seconds) of each guest's `durations` counts; the last count is of
    /// those over the last bound.
    pub duration_bounds: Vec<f64>,
    /// The guests, by name.
    pub guests: Vec<GuestView>,
}

/// One guest as the host sees it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestView {
    /// Its name.
    pub name: String,
    /// `Running`; `Standby` (loaded, but another replica or the leader runs its workers);
    /// `Loading`; or `Refused` (see `reason`).
    pub state: &'static str,
    /// Why it was refused (or why a new version of it was, while the old one runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What it runs, while loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<RunningView>,
}

/// A loaded guest's version and figures (counted since its module was loaded here).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunningView {
    /// 1, then counting swaps.
    pub version: u64,
    /// Its module's digest.
    pub digest: String,
    /// The kind it reconciles (`apps/v1/Deployment`); none for a guest of webhooks or
    /// tickers alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconciles_kind: Option<String>,
    /// Reconciles ended, by result.
    pub reconciles: Counts,
    /// Keys being reconciled now.
    pub active: usize,
    /// Workers at most (`maxConcurrentReconciles`).
    pub max_concurrent: u32,
    /// Keys waiting in its queue.
    pub queue_depth: usize,
    /// Keys in quarantine (trapping again and again).
    pub quarantined: usize,
    /// CPU charged to it, seconds: in its own code and in host work done for it.
    pub cpu_seconds: Cpu,
    /// Its instances' linear memory now.
    pub memory_bytes: u64,
    /// Reconciles by how long they took: a count per [`Overview::duration_bounds`] bound, then
    /// those over the last.
    pub durations: Vec<u64>,
    /// The last error or trap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<LastError>,
    /// Its rollout (`spec.rollout`), running or decided: phase, counts, divergences.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<serde_json::Value>,
    /// The last reconciles, newest first.
    pub recent: Vec<Reconciled>,
}

/// Reconciles by how they ended.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// All of them.
    pub total: u64,
    /// `done`.
    pub done: u64,
    /// `requeue` or `requeue-after`.
    pub requeued: u64,
    /// Errors the guest returned.
    pub errors: u64,
    /// Traps.
    pub traps: u64,
}

/// CPU seconds charged to a guest.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Cpu {
    /// In its own code.
    pub wasm: f64,
    /// In host work done for it.
    pub host: f64,
}

/// A guest's last error.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastError {
    /// The key and what went wrong.
    pub message: String,
    /// When (Unix milliseconds).
    pub unix_ms: u64,
}

fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Manager {
    /// Every guest this host loads, refused or loading, by name.
    pub fn overview(&self) -> Overview {
        let running = self.controllers();
        let refused = self.skipped();
        let loading = self.loading_names();
        let mut guests: std::collections::BTreeMap<String, GuestView> = running
            .iter()
            .map(|(name, controller)| {
                let state = if self.holds(name) {
                    "Running"
                } else {
                    "Standby"
                };
                let view = GuestView {
                    name: name.clone(),
                    state,
                    reason: None,
                    running: Some(running_view(controller)),
                };
                (name.clone(), view)
            })
            .collect();
        for name in loading {
            guests.entry(name.clone()).or_insert(GuestView {
                name,
                state: "Loading",
                reason: None,
                running: None,
            });
        }
        for skipped in refused {
            let view = guests.entry(skipped.guest.clone()).or_insert(GuestView {
                name: skipped.guest.clone(),
                state: "Refused",
                reason: None,
                running: None,
            });
            view.reason = Some(skipped.reason);
        }
        Overview {
            unix_ms: unix_ms(SystemTime::now()),
            duration_bounds: DURATION_BUCKETS.to_vec(),
            guests: guests.into_values().collect(),
        }
    }
}

fn running_view(controller: &Controller) -> RunningView {
    let module = controller.module();
    let manifest = module.manifest();
    let stats = controller.stats();
    let usage = module.budgets().totals();
    RunningView {
        version: controller.version().number,
        digest: manifest.shown_digest(module.digest()).to_owned(),
        reconciles_kind: manifest
            .spec
            .for_kind
            .as_ref()
            .map(|kind| format!("{}/{}", kind.api_version, kind.kind)),
        reconciles: Counts {
            total: stats.total(),
            done: stats.done(),
            requeued: stats.requeued(),
            errors: stats.errors(),
            traps: stats.traps(),
        },
        active: stats.active(),
        max_concurrent: manifest.spec.max_concurrent_reconciles.get(),
        queue_depth: controller.queue().len(),
        quarantined: controller.quarantined(),
        cpu_seconds: Cpu {
            wasm: usage.wasm_cpu.as_secs_f64(),
            host: usage.host_cpu.as_secs_f64(),
        },
        memory_bytes: usage.memory_bytes,
        durations: stats.durations(),
        last_error: stats.last_error().map(|(message, at)| LastError {
            message,
            unix_ms: unix_ms(at),
        }),
        rollout: controller.rollout_report(),
        recent: stats.recent(),
    }
}
