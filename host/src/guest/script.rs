//! A scripted guest for the host's unit tests: a [`Runner`] that returns the results it is
//! given (then `done`) and records which key it was called for, and when.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::time::Instant as Clock;

use super::{Action, ReconcileError, Runner, RunnerCall, Usage};
use crate::guest::bindings::guest::{WitAdmissionRequest, WitVerdict};
use krec_core::CallError;

/// A guest that returns scripted results (then `done`) and records when each key came.
#[derive(Debug, Default)]
pub(crate) struct Script {
    results: Mutex<VecDeque<Result<Action, ()>>>,
    calls: Mutex<Vec<(String, Clock)>>,
}

impl Script {
    pub(crate) fn new(results: Vec<Result<Action, ()>>) -> Arc<Self> {
        Arc::new(Script {
            results: Mutex::new(results.into()),
            calls: Mutex::default(),
        })
    }

    pub(crate) fn calls(&self) -> Vec<(String, Clock)> {
        self.calls.lock().expect("calls").clone()
    }
}

#[async_trait::async_trait]
impl Runner for Script {
    async fn reconcile(
        &self,
        call: RunnerCall<'_>,
        _namespace: Option<&str>,
        name: &str,
    ) -> (Result<Action, ReconcileError>, Usage) {
        self.calls
            .lock()
            .expect("calls")
            .push((name.to_owned(), Clock::now()));
        let next = self.results.lock().expect("results").pop_front();
        let result = match next.unwrap_or(Ok(Action::Done)) {
            Ok(action) => Ok(action),
            Err(()) => Err(ReconcileError::Guest {
                guest: call.manifest.name.clone(),
                request: name.to_owned(),
                error: CallError::Conflict("scripted".into()),
            }),
        };
        let usage = Usage {
            guest_time: Duration::ZERO,
            memory_peak: 0,
            entered: Instant::now(),
            first_call: None,
        };
        (result, usage)
    }

    fn validates(&self) -> bool {
        false
    }

    async fn validate(
        &self,
        call: RunnerCall<'_>,
        label: String,
        _request: WitAdmissionRequest,
    ) -> Result<WitVerdict, ReconcileError> {
        Err(ReconcileError::Guest {
            guest: call.manifest.name.clone(),
            request: label,
            error: CallError::Other("no validator".into()),
        })
    }
}
