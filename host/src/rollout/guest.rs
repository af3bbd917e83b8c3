//! [`GuestRollouts`]: what a guest keeps of its rollouts beyond the one running beside its
//! version — the recording its workers write to (`krec record`), the task that acts on the
//! running rollout's decision, the last decided rollout's report, and the last one rolled back
//! (which `krec diff --retry` tries again).

use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

use super::Rollout;
use super::recording::Slot;
use crate::manifest::{RolloutMode, RolloutSpec};

/// A guest's rollouts (see the module's docs).
#[derive(Default)]
pub struct GuestRollouts {
    recording: Arc<Slot>,
    /// Acts on the running rollout's decision.
    concluder: Mutex<Option<JoinHandle<()>>>,
    /// The report of the last rollout decided (promoted or rolled back).
    concluded: Mutex<Option<serde_json::Value>>,
    /// The last rollout rolled back.
    rolled_back: Mutex<Option<Arc<Rollout>>>,
}

impl GuestRollouts {
    /// The recording the workers write to, while one runs.
    pub fn recording(&self) -> &Arc<Slot> {
        &self.recording
    }

    /// `task` acts on the running rollout's decision from now; the one acting on an earlier
    /// rollout's stops.
    pub fn conclude_with(&self, task: JoinHandle<()>) {
        if let Some(old) = self
            .concluder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(task)
        {
            old.abort();
        }
    }

    /// Stop acting on the running rollout's decision (its version is being replaced).
    pub fn stop_concluding(&self) {
        if let Some(task) = self
            .concluder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }

    /// `rollout` was decided (`promoted`, or rolled back): its report is kept, and a rolled
    /// back one may be tried again.
    pub fn decided(&self, rollout: &Arc<Rollout>, promoted: bool) {
        *self.concluded.lock().unwrap_or_else(|e| e.into_inner()) = Some(rollout.report());
        *self.rolled_back.lock().unwrap_or_else(|e| e.into_inner()) =
            (!promoted).then(|| rollout.clone());
    }

    /// `spec`'s candidate for guest `guest` could not be loaded (`problem`): the report says
    /// so, rolled back before it started.
    pub fn refused(&self, guest: &str, spec: &RolloutSpec, problem: &str) {
        *self.concluded.lock().unwrap_or_else(|e| e.into_inner()) = Some(serde_json::json!({
            "guest": guest,
            "candidate": spec.candidate.display().to_string(),
            "digest": "",
            "mode": match spec.mode {
                RolloutMode::Shadow => "shadow",
                RolloutMode::Canary => "canary",
            },
            "phase": "RolledBack",
            "reason": format!("the candidate could not be loaded: {problem}"),
            "live": {}, "candidateCounts": {}, "divergences": [],
        }));
    }

    /// The last decided rollout's report, if any.
    pub fn concluded(&self) -> Option<serde_json::Value> {
        self.concluded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The last rollout rolled back, taken to be tried again.
    pub fn take_rolled_back(&self) -> Option<Arc<Rollout>> {
        self.rolled_back
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Forget the decided rollouts: the manifest no longer has `spec.rollout`.
    pub fn forget(&self) {
        *self.concluded.lock().unwrap_or_else(|e| e.into_inner()) = None;
        *self.rolled_back.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

impl Drop for GuestRollouts {
    /// The task acting on a decision ends with the guest.
    fn drop(&mut self) {
        self.stop_concluding();
    }
}
