//! Events recorded by a failing guest are aggregated as client-go's recorder does: one Event
//! whose `count` grows with every retry, not one Event per retry.

use krec::manifest::Manifest;
use krec_tests::{Live, misbehave_manifest};
use serde_json::Value;

/// The misbehave guest, allowed to record Events, retried every millisecond.
fn failing_guest() -> Manifest {
    let path = misbehave_manifest().path;
    let text = std::fs::read_to_string(&path).expect("manifest");
    let text = text.replace(
        "  permissions:\n",
        "  rateLimiter: { baseDelay: 1ms, maxDelay: 1ms, qps: 10000, burst: 10000 }\n  permissions:\n    - { apiVersion: v1, kind: Event, verbs: [create] }\n",
    );
    Manifest::parse(&path, &text).unwrap_or_else(|e| panic!("{e}"))
}

async fn events_about(live: &Live, name: &str) -> Vec<Value> {
    let list = live
        .api
        .list(
            &krec_core::Gvk::new("", "v1", "Event"),
            &krec_core::ListOptions {
                namespace: Some("default".into()),
                ..Default::default()
            },
        )
        .await
        .expect("list events");
    list.into_iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_retries_should_count_into_one_event() {
    let live = Live::start(vec![failing_guest()], vec![]).await;
    // client-go's limits (a burst of 25, then one write per 5 minutes), with time scaled down so
    // that the counts held back are written within the test.
    live.api
        .set_event_limits(krec::cluster::client::events::Limits {
            refill: std::time::Duration::from_millis(50),
            ..Default::default()
        });
    let controller = live.controller("misbehave");
    controller.trigger(krec::controller::Request::new(
        Some("default"),
        "warn-and-fail",
    ));
    live.eventually("100 failed reconciles", || async {
        (controller.stats().errors() >= 100).then_some(())
    })
    .await;
    let event = live
        .eventually("one Event counting 100 or more", || async {
            let events = events_about(&live, "warn-and-fail").await;
            assert!(
                events.len() <= 1,
                "one Event object, not {}: {events:?}",
                events.len()
            );
            let count = events.first()?["count"].as_u64()?;
            (count >= 100).then(|| events[0].clone())
        })
        .await;
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "ReconcileFailed");
    assert_eq!(event["message"], "the backend is down");
    assert_eq!(event["source"]["component"], "misbehave");
    assert!(event["lastTimestamp"].as_str() >= event["firstTimestamp"].as_str());
}
