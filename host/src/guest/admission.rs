//! Running a guest's admission exports (`validate`, `mutate`, `convert`) under the manifest's
//! time and memory limits, reading through `reader` and refused every write. As its
//! `isolation` says, a review runs in an instance kept from an earlier review (`reuse`, the
//! default: instantiation is most of a short review's cost) or in a fresh one (`per-reconcile`:
//! nothing carries over from one request to the next). An instance that traps is dropped.

use std::sync::Arc;

use super::{
    Body, DeadlineExceeded, GuestModule, HOST_CALL_GRACE, ReconcileError, TrapCause, classify,
    deadline_after, new_store, one_line,
};
use crate::bindings::guest::{WitAdmissionRequest, WitVerdict};
use crate::cluster::ClusterAccess;
use crate::manifest::Isolation;

/// Instances kept for later reviews, per module (more than the admission server runs at once
/// would never be used).
const MAX_POOLED: usize = 32;

/// An instance of the admission world with its store, kept between reviews.
pub(crate) struct AdmissionInstance {
    store: wasmtime::Store<super::HostState>,
    bindings: crate::bindings::guest::Guest,
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
        matches!(
            &self.body,
            Body::Wasm(_, _, Some(_)) | Body::Native(_, Some(_))
        )
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
        metrics: Option<Arc<crate::metrics::Metrics>>,
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
        if let (Body::Native(_, Some(validate)), Review::Validate) = (&self.body, review) {
            return super::native::validate(
                *validate,
                &self.manifest,
                cluster,
                metrics,
                self.budgets.clone(),
                label,
                request,
            )
            .await;
        }
        let label_for_run = label.clone();
        self.run_admission(cluster, metrics, label, move |bindings, store| {
            Box::pin(async move {
                match review {
                    Review::Validate => bindings.call_validate(store, &request).await,
                    Review::Mutate => bindings.call_mutate(store, &request).await,
                }
            })
        })
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

    /// Instantiate the admission world afresh and run `call` on it within the limits.
    async fn run_admission<T, F>(
        &self,
        cluster: &Arc<dyn ClusterAccess>,
        metrics: Option<Arc<crate::metrics::Metrics>>,
        label: String,
        call: F,
    ) -> Result<T, (TrapCause, String)>
    where
        F: for<'a> FnOnce(
            &'a crate::bindings::guest::Guest,
            &'a mut wasmtime::Store<super::HostState>,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = wasmtime::Result<T>> + Send + 'a>,
        >,
    {
        let Body::Wasm(_, _, Some(pre)) = &self.body else {
            return Err((
                TrapCause::Instantiate,
                format!(
                    "guest {} has no admission exports: build it with krec-guest 0.1.1 or later (WIT krec:reconciler@0.1.1)",
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
                    let mut store = new_store(self, pre.engine(), cluster, metrics.clone());
                    let bindings = pre
                        .instantiate_async(&mut store)
                        .await
                        .map_err(|err| (instantiate_cause(&err), one_line(&err)))?;
                    AdmissionInstance { store, bindings }
                }
            };
            let state = instance.store.data_mut();
            state.request = label;
            state.read_only = true;
            state.cluster = cluster.clone();
            state.metrics = metrics;
            state.host_time = std::time::Duration::ZERO;
            state.cpu_paused = std::time::Duration::ZERO;
            state.deadline = deadline_after(timeout);
            instance.store.set_epoch_deadline(1);
            instance.store.data_mut().start_cpu();
            let result = call(&instance.bindings, &mut instance.store).await;
            let _ = instance.store.data_mut().charge_cpu(false);
            // An instance that trapped may be mid-way through anything: it is dropped.
            let value = result.map_err(|err| (classify(&err), one_line(&err)))?;
            if reuse {
                let mut pool = self.pool();
                if pool.len() < MAX_POOLED {
                    pool.push(instance);
                }
            }
            Ok(value)
        };
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
        metrics: Option<Arc<crate::metrics::Metrics>>,
        objects: Vec<String>,
        desired_api_version: String,
    ) -> Result<Result<Vec<String>, String>, ReconcileError> {
        let label = format!("convert to {desired_api_version}");
        self.run_admission(cluster, metrics, label.clone(), move |bindings, store| {
            Box::pin(async move {
                bindings
                    .call_convert(store, &objects, &desired_api_version)
                    .await
            })
        })
        .await
        .map_err(|(cause, message)| self.trap(label, cause, message))
    }
}

fn instantiate_cause(err: &wasmtime::Error) -> TrapCause {
    match classify(err) {
        TrapCause::Other => TrapCause::Instantiate,
        cause => cause,
    }
}
