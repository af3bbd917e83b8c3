//! A misbehaving guest is contained: a trap ends only that reconcile, is classified, and the
//! worker's next reconcile runs on a fresh instance.

use std::time::{Duration, Instant};

use krec::guest::{Action, ReconcileError, TrapCause};
use krec_core::CallError;

use krec_tests::{Harness, misbehave_manifest};

fn misbehave() -> Harness {
    Harness::with_manifest(misbehave_manifest())
}

async fn expect_trap(h: &mut Harness, name: &str, causes: &[TrapCause]) -> String {
    match h.reconcile(None, name).await {
        Err(ReconcileError::Trap {
            cause: got,
            message,
            guest,
            request,
        }) => {
            assert!(
                causes.contains(&got),
                "{name}: {got} not in {causes:?}: {message}"
            );
            assert_eq!(guest, "misbehave");
            assert_eq!(request, name);
            assert!(
                !h.worker.has_instance(),
                "{name}: a trapped instance is discarded"
            );
            message
        }
        other => panic!("{name}: expected a trap, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_loop_should_be_cut_at_the_timeout() {
    let mut h = misbehave();
    let started = Instant::now();
    let message = expect_trap(&mut h, "loop", &[TrapCause::Timeout]).await;
    assert!(message.contains("time limit of 300ms"), "{message}");
    // Loose bound only to prove the loop did end; not a performance assertion.
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        h.reconcile(None, "ok").await,
        Ok(Action::Done),
        "the worker recovers"
    );
    assert!(h.worker.has_instance());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_blocked_in_a_host_call_should_be_cut_at_the_timeout() {
    let mut h = misbehave();
    let message = expect_trap(&mut h, "sleep", &[TrapCause::Timeout]).await;
    assert!(message.contains("blocked in a host call"), "{message}");
    assert_eq!(
        h.reconcile(None, "ok").await,
        Ok(Action::Done),
        "the worker recovers"
    );
}

#[tokio::test]
async fn a_memory_bomb_should_hit_its_limit() {
    let mut h = misbehave();
    let message = expect_trap(&mut h, "oom", &[TrapCause::OutOfMemory]).await;
    assert!(message.contains("memory limit exceeded"), "{message}");
    assert_eq!(h.reconcile(None, "ok").await, Ok(Action::Done));
}

/// `isolation: per-reconcile` guests run on the pooled engine, whose slots are reused with
/// their memory kept resident: a trap there is contained alike, the manifest's memory limit
/// holds inside the pool's larger slots, and fresh instances keep working in the reused slots.
#[tokio::test]
async fn pooled_instances_should_contain_traps_like_any_other() {
    let mut manifest = misbehave_manifest();
    manifest.spec.isolation = krec::manifest::Isolation::PerReconcile;
    let mut h = Harness::with_manifest(manifest);
    for (name, cause) in [
        ("oom", TrapCause::OutOfMemory),
        ("recurse", TrapCause::StackOverflow),
        ("panic", TrapCause::Panic),
    ] {
        let message = expect_trap(&mut h, name, &[cause]).await;
        if name == "oom" {
            assert!(message.contains("memory limit exceeded"), "{message}");
        }
        // Many fresh instances through the same slots after the trap.
        for _ in 0..20 {
            assert_eq!(
                h.reconcile(None, "ok").await,
                Ok(Action::Done),
                "after {name}"
            );
            assert!(!h.worker.has_instance());
        }
    }
}

/// No page of one instance is visible to the next, whatever the pool does to reset a slot's
/// memory quickly (kept resident, only the pages the last instance touched reset): the guest
/// looks through its whole linear memory for the secret the instance before it left in its
/// heap and at the end of memory it grew. The same guest reusing its instance sees it — the
/// check can fail.
#[tokio::test]
async fn a_fresh_instance_should_see_nothing_an_earlier_one_left_in_memory() {
    let mut manifest = misbehave_manifest();
    manifest.spec.isolation = krec::manifest::Isolation::PerReconcile;
    manifest.spec.limits.timeout = Duration::from_secs(30);
    let mut h = Harness::with_manifest(manifest);
    for round in 0..6 {
        // Instances that look right after the one that left the secret, and others through
        // the same slots in between.
        for _ in 0..2 {
            assert_eq!(
                h.reconcile(None, "remember").await,
                Ok(Action::Done),
                "round {round}"
            );
        }
        assert_eq!(h.reconcile(None, "ok").await, Ok(Action::Done));
    }

    let mut manifest = misbehave_manifest();
    manifest.spec.limits.timeout = Duration::from_secs(30);
    let mut reused = Harness::with_manifest(manifest);
    assert_eq!(reused.reconcile(None, "remember").await, Ok(Action::Done));
    match reused.reconcile(None, "remember").await {
        Err(ReconcileError::Guest { error, .. }) => {
            assert!(
                error.to_string().contains("earlier instance's secret"),
                "{error}"
            );
        }
        other => panic!("a reused instance must see its own secret: {other:?}"),
    }
}

#[tokio::test]
async fn a_panic_should_trap() {
    let mut h = misbehave();
    h.reconcile(None, "ok").await.expect("warm instance");
    expect_trap(&mut h, "panic", &[TrapCause::Panic]).await;
    assert_eq!(h.reconcile(None, "ok").await, Ok(Action::Done));
}

#[tokio::test]
async fn deep_recursion_should_trap_as_stack_overflow() {
    let mut h = misbehave();
    // Rust keeps its stack in linear memory: overflowing it is an out-of-bounds access.
    expect_trap(&mut h, "recurse", &[TrapCause::StackOverflow]).await;
    assert_eq!(h.reconcile(None, "ok").await, Ok(Action::Done));
}

#[tokio::test]
async fn guest_errors_should_be_values_not_traps() {
    let mut h = misbehave();
    match h.reconcile(None, "forbidden").await {
        Err(ReconcileError::Guest {
            error: CallError::Forbidden(msg),
            ..
        }) => {
            assert!(msg.contains("may not delete v1 Namespace"), "{msg}")
        }
        other => panic!("expected forbidden, got {other:?}"),
    }
    assert!(h.worker.has_instance(), "an error value keeps the instance");
    match h.reconcile(None, "bad-json").await {
        Err(ReconcileError::Guest {
            error: CallError::Invalid(msg),
            ..
        }) => {
            assert!(msg.contains("not valid JSON"), "{msg}")
        }
        other => panic!("expected invalid, got {other:?}"),
    }
    assert_eq!(
        h.reconcile(None, "requeue").await,
        Ok(Action::RequeueAfter(Duration::from_millis(1500)))
    );
    assert_eq!(
        h.reconcile(None, "print").await,
        Ok(Action::Done),
        "stdio is captured, not inherited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_output_should_be_refused_or_cut() {
    let mut h = misbehave();
    // An object over the host-call limit is refused before it is parsed.
    match h.reconcile(None, "huge").await {
        Err(ReconcileError::Guest {
            error: CallError::Invalid(msg),
            ..
        }) => assert!(msg.contains("exceeds the"), "{msg}"),
        other => panic!("expected invalid, got {other:?}"),
    }
    // A flood of printed lines is rate-limited in the log; the reconcile ends normally or at
    // its time limit, and the worker goes on.
    match h.reconcile(None, "flood").await {
        Ok(Action::Done)
        | Err(ReconcileError::Trap {
            cause: TrapCause::Timeout,
            ..
        }) => {}
        other => panic!("expected done or a timeout, got {other:?}"),
    }
    assert_eq!(h.reconcile(None, "ok").await, Ok(Action::Done));
}
