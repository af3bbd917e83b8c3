//! Guest threads: each guest's reconciles run on threads of its own, apart from the host's
//! runtime, so that one guest's code — a busy loop between its epoch yields, the page faults of
//! a memory bomb, the copy of a 20 MB error string out of its memory — never holds a thread
//! another guest's reconcile or the host's own I/O is waiting for. The kernel then shares the
//! cores between guests thread by thread, within its scheduling latency (milliseconds), and
//! a guest's threads' CPU time is that guest's alone (see `guest::cpu_clock` and the CPU
//! governor in `guest::budget`, which still holds each guest to its share).
//!
//! What a guest thread must not own is anything other guests use after it: connections of the
//! shared client, informers, held-back Events. Such work is spawned on the host's runtime
//! ([`spawn_home`]; the client's requests go there through [`HomeService`]), so that a guest
//! thread can be stopped with its guest without breaking anyone else's. The design and its
//! measurements: `docs/architecture.md`, "Where guest code runs".

use std::cell::RefCell;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::{Handle, Runtime, RuntimeFlavor};
use tokio::task::JoinHandle;

thread_local! {
    /// On a guest thread: the host's runtime, where shared work is spawned.
    static HOME: RefCell<Option<Handle>> = const { RefCell::new(None) };
}

/// The host's runtime when called on a guest thread; `None` elsewhere.
pub fn home() -> Option<Handle> {
    HOME.with(|home| home.borrow().clone())
}

/// Spawn `future` on the host's runtime: from a guest thread, its home; elsewhere, the current
/// runtime (as `tokio::spawn`). For work that outlives the call that starts it and serves more
/// than one guest.
pub fn spawn_home<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match home() {
        Some(home) => home.spawn(future),
        None => tokio::spawn(future),
    }
}

/// One guest's threads: a runtime of `threads` worker threads named after the guest, whose
/// tasks are that guest's workers. Dropping it stops them; so does the host's runtime ending
/// (a test's, or the process's), so that no guest outlives the host that ran it.
#[derive(Debug)]
pub struct GuestThreads {
    handle: Handle,
    /// Taken by whichever stops the threads first: this value's drop or the host's runtime
    /// ending.
    runtime: Arc<Mutex<Option<Runtime>>>,
    priority: Arc<Priority>,
    /// A task on the host's runtime that stops the threads when that runtime ends.
    watch: JoinHandle<()>,
}

/// The nice value of a failing guest's threads: the kernel gives a runnable thread of nice 0
/// about nine times the CPU of one of nice 10 (weights 1024 and 110).
pub const FAILING_NICE: i32 = 10;

/// The kernel priority of one guest's threads: their thread ids (while they run) and whether
/// they are demoted.
#[derive(Debug, Default)]
struct Priority {
    tids: Mutex<Vec<i32>>,
    demoted: AtomicBool,
}

impl Priority {
    fn nice(&self) -> i32 {
        if self.demoted.load(Ordering::Relaxed) {
            FAILING_NICE
        } else {
            0
        }
    }
}

/// How long a stopped guest's threads are given to end the poll they are in.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// Stop the runtime in `slot`, if it still runs, from a thread of its own: a runtime cannot be
/// dropped from async code, and this may run on one of its own threads (the last task holding
/// the guest).
fn stop(slot: &Mutex<Option<Runtime>>) {
    let Some(runtime) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return;
    };
    let (sender, receiver) = std::sync::mpsc::channel();
    let stopping = std::thread::Builder::new()
        .name("krec-stop".into())
        .spawn(move || {
            if let Ok(runtime) = receiver.recv() {
                Runtime::shutdown_timeout(runtime, STOP_WAIT);
            }
        });
    match stopping {
        Ok(_) => {
            let _ = sender.send(runtime);
        }
        Err(err) => {
            tracing::warn!(
                "cannot start a thread to stop a guest's threads ({err}): stopping them in the background"
            );
            runtime.shutdown_background();
        }
    }
}

/// Stops a guest's threads when dropped: held by a task on the host's runtime, which drops it
/// when it ends.
struct StopWithHome(Arc<Mutex<Option<Runtime>>>);

impl Drop for StopWithHome {
    fn drop(&mut self) {
        stop(&self.0);
    }
}

impl GuestThreads {
    /// Threads for the guest `guest` (named `krec:<guest>`, cut to the 15 bytes Linux keeps), or
    /// `None` when the caller's runtime is not the host's multi-threaded one — a test's
    /// single-threaded runtime, often with paused time, keeps its guests' workers on itself —
    /// or the threads cannot be started (logged; the guest then runs on the host's runtime).
    pub fn start(guest: &str, threads: usize) -> Option<Self> {
        let home = Handle::try_current().ok()?;
        if home.runtime_flavor() != RuntimeFlavor::MultiThread {
            return None;
        }
        let mut name = format!("krec:{guest}");
        krec_core::cut(&mut name, 15);
        let priority = Arc::new(Priority::default());
        let (started, stopped) = (priority.clone(), priority.clone());
        let at_home = home.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name(name)
            .on_thread_start(move || {
                HOME.with(|at| *at.borrow_mut() = Some(at_home.clone()));
                let tid = kernel::tid();
                let mut tids = started.tids.lock().unwrap_or_else(|e| e.into_inner());
                tids.push(tid);
                // Always set: a thread inherits the nice value of the one that created it.
                if kernel::restorable() {
                    kernel::set_nice(tid, started.nice());
                }
            })
            .on_thread_stop(move || {
                // Before the id can be given to another thread.
                let tid = kernel::tid();
                let mut tids = stopped.tids.lock().unwrap_or_else(|e| e.into_inner());
                tids.retain(|t| *t != tid);
            })
            .enable_all()
            .build();
        let runtime = match runtime {
            Ok(runtime) => runtime,
            Err(err) => {
                tracing::warn!(
                    guest,
                    "cannot start the guest's threads ({err}): its reconciles run on the host's runtime"
                );
                return None;
            }
        };
        let handle = runtime.handle().clone();
        let runtime = Arc::new(Mutex::new(Some(runtime)));
        let guard = StopWithHome(runtime.clone());
        let watch = home.spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        Some(GuestThreads {
            handle,
            runtime,
            priority,
            watch,
        })
    }

    /// Demote the guest's threads to [`FAILING_NICE`] (`true`: its reconciles keep failing) or
    /// give them back the host's priority. A guest whose reconciles fail is retried with
    /// backoff, key by key; this is the same backoff for its CPU: while it fails, a healthy
    /// guest's thread that wakes runs first. Only where a demoted thread can come back (see
    /// [`kernel::restorable`]); elsewhere nothing changes.
    pub fn demote(&self, demoted: bool) {
        if !kernel::restorable() {
            return;
        }
        let tids = self.priority.tids.lock().unwrap_or_else(|e| e.into_inner());
        if self.priority.demoted.swap(demoted, Ordering::Relaxed) == demoted {
            return;
        }
        let nice = self.priority.nice();
        for tid in tids.iter() {
            kernel::set_nice(*tid, nice);
        }
    }

    /// Spawn `future` on the guest's threads (once they are stopped, it is dropped unrun).
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future)
    }
}

impl Drop for GuestThreads {
    fn drop(&mut self) {
        self.watch.abort();
        stop(&self.runtime);
    }
}

/// Give the calling thread the host's priority back (nice 0) where it may have inherited a
/// guest's demotion: for a long-lived thread a guest's call may start (the memory trimmer).
pub fn undemote_this_thread() {
    if kernel::restorable() {
        kernel::set_nice(kernel::tid(), 0);
    }
}

/// The kernel's side of a guest's priority: Linux's per-thread nice values.
pub mod kernel {
    #[cfg(target_os = "linux")]
    use std::sync::OnceLock;

    /// This thread's kernel id (0 where there is none to name).
    pub fn tid() -> i32 {
        #[cfg(target_os = "linux")]
        {
            #[allow(unsafe_code)]
            // SAFETY: gettid has no preconditions and cannot fail.
            unsafe {
                libc::gettid()
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            0
        }
    }

    /// Set thread `tid`'s nice value; whether the kernel did.
    pub fn set_nice(tid: i32, nice: i32) -> bool {
        #[cfg(target_os = "linux")]
        {
            let Ok(tid) = libc::id_t::try_from(tid) else {
                return false;
            };
            #[allow(unsafe_code)]
            // SAFETY: setpriority only reads its integer arguments; on Linux, PRIO_PROCESS with
            // a thread id sets that thread's nice value.
            let done = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) };
            done == 0
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (tid, nice);
            false
        }
    }

    /// Whether a thread demoted to [`FAILING_NICE`](super::FAILING_NICE) can be given nice 0
    /// back: raising a nice value is always allowed, lowering it needs `CAP_SYS_NICE` or an
    /// `RLIMIT_NICE` of at least 20 (most containers have neither). Tried once, on a thread of
    /// its own; where it cannot, guests are never demoted (a demotion that cannot end would
    /// outlast the failures it answers). Logged once.
    pub fn restorable() -> bool {
        #[cfg(target_os = "linux")]
        {
            static RESTORABLE: OnceLock<bool> = OnceLock::new();
            *RESTORABLE.get_or_init(|| {
                let probe = std::thread::Builder::new()
                    .name("krec-nice".into())
                    .spawn(|| {
                        let tid = tid();
                        set_nice(tid, super::FAILING_NICE) && set_nice(tid, 0)
                    })
                    .ok()
                    .and_then(|probe| probe.join().ok())
                    .unwrap_or(false);
                if !probe {
                    tracing::info!(
                        "failing guests keep their threads' priority: the kernel would not give a demoted thread its priority back (that needs CAP_SYS_NICE or RLIMIT_NICE of 20); the CPU governor alone holds them to their share"
                    );
                }
                probe
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }
}

/// A client's service whose requests run on the host's runtime (the one it was made on): their
/// connections — pooled, shared by every guest — are made and driven there, and live on when a
/// guest's threads stop. Dropping a request's future (a guest's timeout, its worker stopped)
/// cancels the request, as it would without this. Without a runtime at its making, it calls the
/// inner service directly.
#[derive(Clone, Debug)]
pub struct HomeService<S> {
    inner: S,
    home: Option<Handle>,
}

impl<S> HomeService<S> {
    /// Wrap `inner`, its requests to run on the current runtime.
    pub fn new(inner: S) -> Self {
        HomeService {
            inner,
            home: Handle::try_current().ok(),
        }
    }
}

/// The layer of [`HomeService`]s on the current runtime.
#[derive(Clone, Debug, Default)]
pub struct HomeLayer;

impl<S> tower::Layer<S> for HomeLayer {
    type Service = HomeService<S>;

    fn layer(&self, inner: S) -> HomeService<S> {
        HomeService::new(inner)
    }
}

/// A task that is aborted when its handle is dropped.
struct Aborting<T>(JoinHandle<T>);

impl<T> Future for Aborting<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<S, R> tower::Service<R> for HomeService<S>
where
    S: tower::Service<R> + Send,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Into<tower::BoxError> + Send + 'static,
{
    type Response = S::Response;
    type Error = tower::BoxError;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<S::Response, tower::BoxError>> + Send + 'static>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let call = self.inner.call(request);
        match &self.home {
            Some(home) => {
                let task = Aborting(home.spawn(call));
                Box::pin(async move {
                    match task.await {
                        Ok(answer) => answer.map_err(Into::into),
                        Err(err) => Err(err.into()),
                    }
                })
            }
            None => Box::pin(async move { call.await.map_err(Into::into) }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_guest_thread_should_spawn_shared_work_at_home_and_be_named_after_its_guest() {
        let threads = GuestThreads::start("a-guest-with-a-long-name", 1).expect("threads");
        let (name, at_home) = threads
            .spawn(async {
                let name = std::thread::current().name().map(str::to_owned);
                let at_home = spawn_home(async { home().is_none() }).await.expect("home");
                (name, at_home)
            })
            .await
            .expect("task");
        assert_eq!(name.as_deref(), Some("krec:a-guest-wi"));
        assert!(
            at_home,
            "shared work runs on the host's runtime, not a guest thread"
        );
        assert!(
            home().is_none(),
            "the host's own threads have no home to go to"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stopping_a_guests_threads_should_leave_work_it_spawned_at_home_running() {
        let threads = GuestThreads::start("stopping", 1).expect("threads");
        let (tx, rx) = tokio::sync::oneshot::channel();
        threads
            .spawn(async move {
                spawn_home(async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let _ = tx.send(());
                });
            })
            .await
            .expect("task");
        drop(threads);
        rx.await
            .expect("the shared work outlived the guest's threads");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_made_on_a_guest_thread_should_run_at_home() {
        use tower::{Service, ServiceExt};
        let threads = GuestThreads::start("requests", 1).expect("threads");
        // Made on the host's runtime, as the client is; called from a guest thread.
        let service = HomeService::new(tower::service_fn(|(): ()| async {
            let name = std::thread::current().name().map(str::to_owned);
            Ok::<_, std::convert::Infallible>(name)
        }));
        let (on_guest_thread, ran_on) = threads
            .spawn(async move {
                let on_guest_thread = home().is_some();
                let mut service = service;
                let service = service.ready().await.expect("ready");
                (on_guest_thread, service.call(()).await.expect("answer"))
            })
            .await
            .expect("task");
        assert!(on_guest_thread);
        assert!(
            !ran_on.unwrap_or_default().starts_with("krec:"),
            "the request's future ran on the host's runtime"
        );
    }

    #[test]
    fn a_guests_threads_should_stop_when_the_hosts_runtime_ends() {
        let host = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (held, mut released) = tokio::sync::oneshot::channel::<()>();
        let threads = host.block_on(async {
            let threads = GuestThreads::start("outlived", 1).expect("threads");
            threads.spawn(async move {
                let _held = held;
                std::future::pending::<()>().await;
            });
            threads
        });
        // The guest's threads are still held (a controller that was never shut down).
        drop(host);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while released.try_recv() == Err(tokio::sync::oneshot::error::TryRecvError::Empty) {
            assert!(
                std::time::Instant::now() < deadline,
                "the guest's task still runs"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(threads);
    }

    /// Thread `tid`'s nice value, from /proc.
    fn nice_of(tid: i32) -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
        let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
        fields.get(16)?.parse().ok()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_demoted_guests_threads_should_run_at_nice_10_and_come_back() {
        if !cfg!(target_os = "linux") || !kernel::restorable() {
            // Nothing is demoted where it could not come back: checked by `demote` itself.
            let threads = GuestThreads::start("unmoved", 1).expect("threads");
            threads.demote(true);
            let tid = threads.spawn(async { kernel::tid() }).await.expect("tid");
            assert_ne!(nice_of(tid), Some(FAILING_NICE));
            return;
        }
        let threads = GuestThreads::start("demoted", 1).expect("threads");
        let tid = threads.spawn(async { kernel::tid() }).await.expect("tid");
        assert_eq!(nice_of(tid), Some(0));
        threads.demote(true);
        assert_eq!(nice_of(tid), Some(FAILING_NICE));
        // A thread the demoted guest starts is demoted too; one it starts after, not.
        let blocking = threads
            .spawn(async { tokio::task::spawn_blocking(kernel::tid).await })
            .await
            .expect("task")
            .expect("blocking");
        assert_eq!(nice_of(blocking), Some(FAILING_NICE));
        threads.demote(false);
        assert_eq!(nice_of(tid), Some(0));
        assert_eq!(nice_of(blocking), Some(0));
    }

    #[tokio::test]
    async fn a_single_threaded_runtime_should_keep_its_guests_on_itself() {
        assert!(GuestThreads::start("test", 1).is_none());
    }
}
