//! Running a guest's admission exports (`validate`, `mutate`, `convert`) and its map function
//! (`map`) under the manifest's time and memory limits, reading through `reader` and refused
//! every write. As its
//! `isolation` says, a review runs in an instance kept from an earlier review (`reuse`, the
//! default: instantiation is most of a short review's cost) or in a fresh one (`per-reconcile`:
//! nothing carries over from one request to the next). An instance that traps is dropped.

use std::sync::Arc;

use super::imports::Writes;
use super::{
    Body, DeadlineExceeded, GuestModule, HOST_CALL_GRACE, ReconcileError, TrapCause, classify,
    deadline_after, new_store, one_line,
};
use crate::cluster::ClusterAccess;
use crate::guest::bindings::guest::{WitAdmissionRequest, WitVerdict};
use crate::manifest::Isolation;

/// Instances kept for later reviews, per module: as many as the admission server runs at once
/// for one guest (more would never be used, and would hold the guest's memory budget).
const MAX_POOLED: usize = crate::manifest::KEPT_REVIEW_INSTANCES as usize;

/// An instance with its store, kept between reviews and map calls.
pub(crate) struct AdmissionInstance {
    store: wasmtime::Store<super::HostState>,
    bindings: Exports,
}

/// The exports a kept instance is called through: those its component has.
pub(crate) struct Exports {
    /// `validate`, `mutate`, `convert` (WIT 0.1.1).
    admission: Option<crate::guest::bindings::guest::Guest>,
    /// `init`, `map` (WIT 0.1.2).
    extensions: Option<crate::guest::bindings::extensions::Extensions>,
}

/// The export a component lacks, as a call's error.
fn missing(guest: &str, what: &str, since: &str) -> wasmtime::Error {
    wasmtime::format_err!(
        "guest {guest} has no {what} export (WIT krec:reconciler@{since}): rebuild it with this release's krec-guest"
    )
}

/// Which admission export a review calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Review {
    /// `validate`: allow or deny.
    Validate,
    /// `mutate`: allow or deny, and the object as it should be.
    Mutate,
}

impl Review {
    /// `validate` or `mutate`.
    pub fn as_str(self) -> &'static str {
        match self {
            Review::Validate => "validate",
            Review::Mutate => "mutate",
        }
    }
}

impl GuestModule {
    /// The instances kept for reviews.
    fn pool(&self) -> std::sync::MutexGuard<'_, Vec<AdmissionInstance>> {
        // A panic while holding the lock leaves a list of whole instances: still usable.
        self.admission_pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the component exports the admission functions (the SDK builds them since WIT
    /// 0.1.1; a 0.1.0 component is a reconciler only).
    pub fn has_admission(&self) -> bool {
        match &self.body {
            Body::Wasm(wasm) => wasm.admission.is_some(),
            Body::Runner(runner) => runner.validates(),
        }
    }

    /// Answer one admission request with the guest's `validate` or `mutate`, in a fresh instance.
    ///
    /// # Errors
    ///
    /// [`ReconcileError::Trap`] when the guest traps, runs past `limits.timeout` or exceeds its
    /// memory; the caller applies the webhook's `failurePolicy`.
    pub async fn admit(
        &self,
        cluster: &Arc<dyn ClusterAccess>,
        metrics: Option<Arc<crate::process::metrics::Metrics>>,
        review: Review,
        request: WitAdmissionRequest,
    ) -> Result<WitVerdict, ReconcileError> {
        let label = format!(
            "{} {}",
            review.as_str(),
            match &request.namespace {
                Some(ns) => format!("{ns}/{}", request.name.as_deref().unwrap_or("")),
                None => request.name.clone().unwrap_or_default(),
            }
        );
        if let (Body::Runner(runner), Review::Validate) = (&self.body, review) {
            let call = super::RunnerCall {
                manifest: &self.manifest,
                cluster,
                metrics,
                budgets: self.budgets.clone(),
            };
            return runner.validate(call, label, request).await;
        }
        let label_for_run = label.clone();
        let guest = self.manifest.name.clone();
        self.run_admission(
            cluster,
            metrics,
            label,
            Writes::RefusedInReview,
            move |bindings, store| {
                Box::pin(async move {
                    let Some(bindings) = &bindings.admission else {
                        return Err(missing(&guest, review.as_str(), "0.1.1"));
                    };
                    match review {
                        Review::Validate => bindings.call_validate(store, &request).await,
                        Review::Mutate => bindings.call_mutate(store, &request).await,
                    }
                })
            },
        )
        .await
        .map_err(|(cause, message)| self.trap(label_for_run, cause, message))
    }

    fn trap(&self, request: String, cause: TrapCause, message: String) -> ReconcileError {
        ReconcileError::Trap {
            guest: self.manifest.name.clone(),
            request,
            cause,
            message,
        }
    }

    /// Instantiate the admission world afresh and run `call` on it within the limits, its
    /// writes refused as `writes` says (a review's or a map's).
    async fn run_admission<T, F>(
        &self,
        cluster: &Arc<dyn ClusterAccess>,
        metrics: Option<Arc<crate::process::metrics::Metrics>>,
        label: String,
        writes: Writes,
        call: F,
    ) -> Result<T, (TrapCause, String)>
    where
        F: for<'a> FnOnce(
            &'a Exports,
            &'a mut wasmtime::Store<super::HostState>,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = wasmtime::Result<T>> + Send + 'a>,
        >,
    {
        let Body::Wasm(wasm) = &self.body else {
            return Err((
                TrapCause::Instantiate,
                format!(
                    "guest {} runs compiled-in code: it has no instance",
                    self.manifest.name
                ),
            ));
        };
        let timeout = self.manifest.spec.limits.timeout;
        let reuse = self.manifest.spec.isolation == Isolation::Reuse;
        let kept = if reuse { self.pool().pop() } else { None };
        let run = async {
            let mut instance = match kept {
                Some(instance) => instance,
                None => {
                    let mut store =
                        new_store(self, wasm.pre.engine(), cluster, metrics.clone(), None);
                    let started = async {
                        let instance = self.start_instance(&mut store).await?;
                        let admission = match &wasm.admission {
                            Some(indices) => Some(indices.load(&mut store, &instance)?),
                            None => None,
                        };
                        let extensions = match &wasm.extensions {
                            Some(indices) => Some(indices.load(&mut store, &instance)?),
                            None => None,
                        };
                        wasmtime::Result::Ok(Exports {
                            admission,
                            extensions,
                        })
                    };
                    let bindings = started
                        .await
                        .map_err(|err| (instantiate_cause(&err), one_line(&err)))?;
                    store.data_mut().limits.mark_ready();
                    AdmissionInstance { store, bindings }
                }
            };
            let state = instance.store.data_mut();
            state.request = label;
            state.trace = crate::telemetry::current();
            state.writes_allowed = writes;
            state.cluster = cluster.clone();
            state.metrics = metrics;
            state.host_time = std::time::Duration::ZERO;
            state.cpu_paused = std::time::Duration::ZERO;
            state.deadline = deadline_after(timeout);
            instance.store.set_epoch_deadline(1);
            let result = call(&instance.bindings, &mut instance.store).await;
            // A pooled instance must not hold the review's trace past it.
            instance.store.data_mut().trace = None;
            // An instance that trapped may be mid-way through anything: it is dropped.
            let value = result.map_err(|err| (classify(&err), one_line(&err)))?;
            if reuse && instance.store.data().limits.worth_keeping() {
                let mut pool = self.pool();
                if pool.len() < MAX_POOLED {
                    pool.push(instance);
                }
            }
            Ok(value)
        };
        let run = super::cpu_clock::Metered::new(self.budgets.cpu.clone(), run);
        match tokio::time::timeout(timeout.saturating_add(HOST_CALL_GRACE), run).await {
            Ok(result) => result,
            Err(_) => {
                let err = wasmtime::Error::from(DeadlineExceeded(timeout))
                    .context("blocked in a host call");
                Err((TrapCause::Timeout, one_line(&err)))
            }
        }
    }

    /// Convert custom resources with the guest's `convert` (a CRD conversion webhook).
    ///
    /// # Errors
    ///
    /// A trap as for [`admit`](Self::admit); the guest's own refusal is `Ok(Err(message))`.
    pub async fn convert(
        &self,
        cluster: &Arc<dyn ClusterAccess>,
        metrics: Option<Arc<crate::process::metrics::Metrics>>,
        objects: Vec<String>,
        desired_api_version: String,
    ) -> Result<Result<Vec<String>, ConversionRefused>, ReconcileError> {
        let label = format!("convert to {desired_api_version}");
        let guest = self.manifest.name.clone();
        self.run_admission(
            cluster,
            metrics,
            label.clone(),
            Writes::RefusedInReview,
            move |bindings, store| {
                Box::pin(async move {
                    let Some(bindings) = &bindings.admission else {
                        return Err(missing(&guest, "convert", "0.1.1"));
                    };
                    bindings
                        .call_convert(store, &objects, &desired_api_version)
                        .await
                })
            },
        )
        .await
        .map(|converted| converted.map_err(ConversionRefused))
        .map_err(|(cause, message)| self.trap(label, cause, message))
    }
}

/// A guest's refusal to convert, with its message (the `ConversionReview`'s failure message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConversionRefused(pub String);

impl GuestModule {
    /// Whether the component exports `map` (WIT 0.1.2).
    pub fn has_map(&self) -> bool {
        matches!(&self.body, Body::Wasm(wasm) if wasm.extensions.is_some())
    }

    /// The requests the guest's `map` makes of `object` (JSON text) of kind `kind`: a watch
    /// with `mapByGuest`. Runs in a kept instance, as reviews do, with the guest's limits.
    ///
    /// # Errors
    ///
    /// [`ReconcileError::Guest`] when `map` returns an error; [`ReconcileError::Trap`] when it
    /// traps or breaks a limit.
    pub async fn map(
        &self,
        cluster: &Arc<dyn ClusterAccess>,
        metrics: Option<Arc<crate::process::metrics::Metrics>>,
        kind: crate::guest::bindings::WitGvk,
        object: Arc<str>,
    ) -> Result<Vec<crate::guest::bindings::WitRequest>, ReconcileError> {
        let label = format!("map {}", kind.kind);
        let guest = self.manifest.name.clone();
        let result = self
            .run_admission(
                cluster,
                metrics,
                label.clone(),
                Writes::RefusedInMap,
                move |bindings, store| {
                    Box::pin(async move {
                        let Some(bindings) = &bindings.extensions else {
                            return Err(missing(&guest, "map", "0.1.2"));
                        };
                        bindings.call_map(store, &kind, &object).await
                    })
                },
            )
            .await
            .map_err(|(cause, message)| self.trap(label.clone(), cause, message))?;
        match result {
            Ok(requests) => Ok(requests),
            Err(error) => Err(ReconcileError::Guest {
                guest: self.manifest.name.clone(),
                request: label,
                error: super::bounded_error(error.into()),
            }),
        }
    }
}

fn instantiate_cause(err: &wasmtime::Error) -> TrapCause {
    match classify(err) {
        TrapCause::Other => TrapCause::Instantiate,
        cause => cause,
    }
}
