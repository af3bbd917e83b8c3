//! Native reconcilers: a reconciler written with the guest SDK, compiled into the host process
//! and run in place of a guest's module.
//!
//! The SDK compiled for the host's target routes a reconciler's [`Context`](krec_guest::Context)
//! calls to a [`krec_guest::native::Host`]; `NativeHost` here serves them through the very
//! checks and conversions the WIT host traits use (`Calls`), so one reconciler can run as a Wasm
//! guest and natively in the same host, on the same path: that is how the benchmarks measure
//! what the sandbox costs. A [`NativeRunner`] is the guest's [`Runner`]: register one with
//! [`ManagerOptions::runners`](crate::guests::ManagerOptions::runners), or build a module with
//! [`module`]. Only with the cargo feature `native` (the benchmarks and tests enable it).
//!
//! # Caveats
//!
//! A native reconciler is trusted code: it has no time or memory limit, and nothing stops it
//! once it runs (abandoning it would let a retry of its key run beside it). On a
//! multi-thread runtime it runs on the worker's own task; a host call that is ready at once (a
//! read from the cache) is simply polled to its end, and one that must wait (a write to the API
//! server) blocks in place (`tokio::task::block_in_place`). On a current-thread runtime it runs
//! on a blocking thread. A panic is caught and treated like a guest trap.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use krec_guest::native::{Host, Level, ObjectReference, PatchType};
use krec_guest::{GroupVersionKind, ListParams, Preconditions};
use tokio::runtime::{Handle, RuntimeFlavor};

use crate::cluster::ClusterAccess;
use crate::guest::bindings::guest::{WitAdmissionRequest, WitOperation, WitVerdict};
use crate::guest::bindings::krec::reconciler::{client, events, log};
use crate::guest::imports::{Calls, count_call, log_for};
use crate::manifest::{Manifest, Verb};
use crate::process::metrics::Metrics;
use krec_core::{CallError, Gvk};

use crate::guest::{
    Action, GuestBudgets, GuestModule, ReconcileError, Runner, RunnerCall, TrapCause, Usage,
    bounded_error,
};

/// A reconciler compiled into the host: `krec_guest::native::reconcile::<MyReconciler>`.
pub type NativeReconcile =
    fn(Arc<dyn Host>, krec_guest::Request) -> krec_guest::Result<krec_guest::Action>;

/// A validating webhook compiled into the host: `krec_guest::native::validate::<MyValidator>`.
pub type NativeValidate =
    fn(Arc<dyn Host>, krec_guest::native::Review) -> krec_guest::native::ReviewVerdict;

/// A guest's reconciler (and maybe validating webhook) compiled into the host.
#[derive(Clone, Copy, Debug)]
pub struct NativeRunner {
    /// The reconciler.
    pub reconcile: NativeReconcile,
    /// The validating webhook, if any.
    pub validate: Option<NativeValidate>,
}

/// A runner of `reconcile` alone, for [`ManagerOptions::runners`](crate::guests::ManagerOptions::runners).
pub fn runner(reconcile: NativeReconcile) -> Arc<dyn Runner> {
    Arc::new(NativeRunner {
        reconcile,
        validate: None,
    })
}

/// A guest whose reconciles run `reconcile`, compiled into the host, in place of the module
/// its manifest names (which is not read).
pub fn module(manifest: Arc<Manifest>, reconcile: NativeReconcile) -> GuestModule {
    GuestModule::with_runner(manifest, runner(reconcile))
}

/// [`module`], with a validating webhook compiled into the host too: the guest's `validate`
/// reviews run `validate` (e.g. `krec_guest::native::validate::<MyValidator>`).
pub fn module_with_validator(
    manifest: Arc<Manifest>,
    reconcile: NativeReconcile,
    validate: NativeValidate,
) -> GuestModule {
    let runner = NativeRunner {
        reconcile,
        validate: Some(validate),
    };
    GuestModule::with_runner(manifest, Arc::new(runner))
}

#[async_trait::async_trait]
impl Runner for NativeRunner {
    async fn reconcile(
        &self,
        call: RunnerCall<'_>,
        namespace: Option<&str>,
        name: &str,
    ) -> (Result<Action, ReconcileError>, Usage) {
        let request = krec_guest::Request {
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        };
        run(self.reconcile, call, request).await
    }

    fn validates(&self) -> bool {
        self.validate.is_some()
    }

    async fn validate(
        &self,
        call: RunnerCall<'_>,
        label: String,
        request: WitAdmissionRequest,
    ) -> Result<WitVerdict, ReconcileError> {
        match self.validate {
            Some(validate) => review(validate, call, label, request).await,
            None => Err(ReconcileError::Guest {
                guest: call.manifest.name.clone(),
                request: label,
                error: CallError::Other("this native guest has no validator".into()),
            }),
        }
    }
}

/// The host side of one native reconcile: the guest's manifest, cluster and request.
struct NativeHost {
    manifest: Arc<Manifest>,
    cluster: Arc<dyn ClusterAccess>,
    metrics: Option<Arc<Metrics>>,
    budgets: Arc<GuestBudgets>,
    request: String,
    /// When the reconcile should end (native reconciles are never cut, but writes keep to it).
    deadline: Instant,
    handle: Handle,
    /// Whether the reconcile runs on a runtime worker (multi-thread runtime) rather than on a
    /// blocking thread.
    on_worker: bool,
    /// Nanoseconds spent in host calls.
    host_nanos: AtomicU64,
    /// When the reconcile's first host call started.
    first_call: std::sync::OnceLock<Instant>,
    /// Whether writes are allowed (not in an admission review).
    writes_allowed: super::imports::Writes,
}

fn gvk(g: &GroupVersionKind) -> Gvk {
    Gvk::new(&g.group, &g.version, &g.kind)
}

fn wit_gvk(g: &GroupVersionKind) -> crate::guest::bindings::WitGvk {
    crate::guest::bindings::WitGvk {
        group: g.group.clone(),
        version: g.version.clone(),
        kind: g.kind.clone(),
    }
}

impl NativeHost {
    fn calls(&self) -> Calls<'_> {
        Calls {
            manifest: &self.manifest,
            cluster: &self.cluster,
            request: &self.request,
            writes: &self.budgets.writes,
            deadline: self.deadline,
            writes_allowed: self.writes_allowed,
        }
    }

    /// Run a host call to its end on this thread, and account for it as the WIT host does.
    fn run<T: crate::guest::imports::Handed>(
        &self,
        verb: &'static str,
        taken: usize,
        call: impl Future<Output = Result<T, CallError>>,
    ) -> krec_guest::Result<T> {
        let started = Instant::now();
        let _ = self.first_call.set(started);
        let mut call = std::pin::pin!(self.budgets.ledger.time(call));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let result = match call.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(result) => result,
            std::task::Poll::Pending if self.on_worker => {
                tokio::task::block_in_place(|| self.handle.block_on(call))
            }
            std::task::Poll::Pending => self.handle.block_on(call),
        };
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.host_nanos.fetch_add(nanos, Ordering::Relaxed);
        count_call(self.metrics.as_deref(), &self.manifest.name, verb, &result);
        let handed = result
            .as_ref()
            .map_or(0, crate::guest::imports::Handed::handed);
        self.budgets.ledger.call(verb, handed, taken);
        result
    }
}

impl Host for NativeHost {
    fn get(
        &self,
        kind: &GroupVersionKind,
        namespace: Option<&str>,
        name: &str,
    ) -> krec_guest::Result<String> {
        let calls = self.calls();
        self.run(
            "get",
            0,
            calls.get_json(gvk(kind), namespace.map(str::to_owned), name.to_owned()),
        )
    }

    fn list(
        &self,
        kind: &GroupVersionKind,
        params: &ListParams,
    ) -> krec_guest::Result<Vec<String>> {
        let calls = self.calls();
        self.run("list", 0, calls.list_json(gvk(kind), params.clone()))
    }

    fn create(&self, object: &str) -> krec_guest::Result<String> {
        let calls = self.calls();
        self.run("create", object.len(), calls.write(object, Verb::Create))
    }

    fn update(&self, object: &str, status: bool) -> krec_guest::Result<String> {
        let calls = self.calls();
        if status {
            self.run(
                "update_status",
                object.len(),
                calls.write(object, Verb::UpdateStatus),
            )
        } else {
            self.run("update", object.len(), calls.write(object, Verb::Update))
        }
    }

    fn patch(
        &self,
        kind: &GroupVersionKind,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        body: &str,
        status: bool,
    ) -> krec_guest::Result<String> {
        let how = client::PatchType::from(patch_type);
        let calls = self.calls();
        self.run(
            "patch",
            body.len(),
            calls.patch_json(
                gvk(kind),
                namespace.map(str::to_owned),
                name.to_owned(),
                how,
                body,
                status,
            ),
        )
    }

    fn delete(
        &self,
        kind: &GroupVersionKind,
        namespace: Option<&str>,
        name: &str,
        preconditions: Option<&Preconditions>,
    ) -> krec_guest::Result<()> {
        let preconditions = preconditions.map(|p| client::Preconditions {
            uid: p.uid.clone(),
            resource_version: p.resource_version.clone(),
        });
        let calls = self.calls();
        self.run(
            "delete",
            0,
            calls.delete_object(
                gvk(kind),
                namespace.map(str::to_owned),
                name.to_owned(),
                preconditions,
            ),
        )
    }

    fn record_event(
        &self,
        regarding: &ObjectReference,
        event_type: krec_guest::EventType,
        reason: &str,
        message: &str,
    ) -> krec_guest::Result<()> {
        let regarding = events::ObjectReference {
            kind: wit_gvk(&regarding.gvk),
            namespace: regarding.namespace.clone(),
            name: regarding.name.clone(),
            uid: regarding.uid.clone(),
        };
        let event_type = match event_type {
            krec_guest::EventType::Normal => events::EventType::Normal,
            krec_guest::EventType::Warning => events::EventType::Warning,
        };
        let calls = self.calls();
        self.run(
            "event",
            reason.len() + message.len(),
            calls.record_event(regarding, event_type, reason.to_owned(), message.to_owned()),
        )
    }

    fn log(&self, level: Level, message: &str) {
        let level = match level {
            Level::Trace => log::Level::Trace,
            Level::Debug => log::Level::Debug,
            Level::Info => log::Level::Info,
            Level::Warn => log::Level::Warn,
            Level::Error => log::Level::Error,
        };
        log_for(
            &self.manifest,
            &self.request,
            level,
            message.to_owned(),
            &self.budgets,
        );
    }
}

/// Run one reconcile of `request` with the native reconciler `reconcile`.
async fn run(
    reconcile: NativeReconcile,
    call: RunnerCall<'_>,
    request: krec_guest::Request,
) -> (Result<Action, ReconcileError>, Usage) {
    let shown = request.to_string();
    let manifest = call.manifest;
    let host = NativeHost::new(&call, shown.clone(), super::imports::Writes::Allowed);
    let on_worker = host.on_worker;
    let dyn_host: Arc<dyn Host> = host.clone();
    let started = Instant::now();
    let outcome = call_native(on_worker, move || reconcile(dyn_host, request)).await;
    let host_time = Duration::from_nanos(host.host_nanos.load(Ordering::Relaxed));
    let usage = Usage {
        guest_time: started.elapsed().saturating_sub(host_time),
        memory_peak: 0,
        entered: started,
        first_call: host.first_call.get().copied(),
    };
    let result = match outcome {
        Ok(Ok(krec_guest::Action::Done)) => Ok(Action::Done),
        Ok(Ok(krec_guest::Action::Requeue)) => Ok(Action::Requeue),
        Ok(Ok(krec_guest::Action::RequeueAfter(after))) => Ok(Action::RequeueAfter(after)),
        Ok(Err(error)) => Err(ReconcileError::Guest {
            guest: manifest.name.clone(),
            request: shown,
            error: bounded_error(error),
        }),
        Err(panic) => Err(ReconcileError::Trap {
            guest: manifest.name.clone(),
            request: shown,
            cause: TrapCause::Panic,
            message: panic_message(panic.as_ref()),
        }),
    };
    (result, usage)
}

/// Run native guest code to its end, a panic caught: in place on a runtime worker, else on a
/// blocking thread. No timeout: native code cannot be stopped, and abandoning it would let a
/// retry run beside it.
async fn call_native<T: Send + 'static>(
    on_worker: bool,
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Box<dyn std::any::Any + Send>> {
    let call = move || std::panic::catch_unwind(AssertUnwindSafe(call));
    match on_worker {
        true => call(),
        false => match tokio::task::spawn_blocking(call).await {
            Ok(outcome) => outcome,
            Err(join) => Err(Box::new(join.to_string())),
        },
    }
}

/// What a caught panic says.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "the native guest panicked".to_owned())
}

impl NativeHost {
    /// The host of one call of `manifest`'s native guest, labelled `request` in logs and errors.
    fn new(
        call: &RunnerCall<'_>,
        request: String,
        writes_allowed: super::imports::Writes,
    ) -> Arc<NativeHost> {
        let handle = Handle::current();
        Arc::new(NativeHost {
            manifest: call.manifest.clone(),
            cluster: call.cluster.clone(),
            metrics: call.metrics.clone(),
            budgets: call.budgets.clone(),
            deadline: Instant::now() + call.manifest.spec.limits.timeout,
            request,
            on_worker: handle.runtime_flavor() == RuntimeFlavor::MultiThread,
            handle,
            host_nanos: AtomicU64::new(0),
            first_call: std::sync::OnceLock::new(),
            writes_allowed,
        })
    }
}

/// Answer one admission review with a native validator, as the guest's `validate` export would:
/// reads served by the host's checks, writes refused, a panic a trap.
async fn review(
    validate: NativeValidate,
    call: RunnerCall<'_>,
    label: String,
    request: WitAdmissionRequest,
) -> Result<WitVerdict, ReconcileError> {
    use krec_guest::native::{Review, ReviewOperation, ReviewUserInfo};
    let manifest = call.manifest;
    let host = NativeHost::new(
        &call,
        label.clone(),
        super::imports::Writes::RefusedInReview,
    );
    let review = Review {
        uid: request.uid,
        kind: krec_guest::native::WitGvk {
            group: request.kind.group,
            version: request.kind.version,
            kind: request.kind.kind,
        },
        resource: request.resource,
        sub_resource: request.sub_resource,
        name: request.name,
        namespace: request.namespace,
        operation: match request.operation {
            WitOperation::Create => ReviewOperation::Create,
            WitOperation::Update => ReviewOperation::Update,
            WitOperation::Delete => ReviewOperation::Delete,
            WitOperation::Connect => ReviewOperation::Connect,
        },
        user_info: ReviewUserInfo {
            username: request.user_info.username,
            groups: request.user_info.groups,
        },
        object: request.object,
        old_object: request.old_object,
        dry_run: request.dry_run,
    };
    let dyn_host: Arc<dyn Host> = host.clone();
    let outcome = call_native(host.on_worker, move || validate(dyn_host, review)).await;
    match outcome {
        Ok(verdict) => Ok(WitVerdict {
            allowed: verdict.allowed,
            code: verdict.code,
            message: verdict.message,
            reason: verdict.reason,
            warnings: verdict.warnings,
            audit_annotations: verdict.audit_annotations,
            patched: verdict.patched,
        }),
        Err(panic) => Err(ReconcileError::Trap {
            guest: manifest.name.clone(),
            request: label,
            cause: TrapCause::Panic,
            message: panic_message(panic.as_ref()),
        }),
    }
}
