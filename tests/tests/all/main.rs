//! The workspace's integration tests (the sample guests in the real host, on the embedded API
//! server), one binary (one link) with a module per area; their harness is this crate's library
//! (`krec_tests`), and `kubectl` is the API server's kubectl harness. Run one area with
//! `cargo test -p krec-tests --test all -- swap::`.

#[path = "../../../apiserver/tests/all/support/kubectl.rs"]
mod kubectl;

mod attacks;
mod consistency;
mod contained;
mod containment;
mod events;
mod extensions;
mod fake_cluster;
mod faults;
mod from_cluster;
mod hostile;
mod languages;
mod live;
mod oci;
mod operate;
mod policies;
mod rbac;
mod readme;
mod rollout;
mod samples;
mod swap;
mod traces;
mod usage;
mod verdicts;
mod webhooks;
