//! The embedded API server's integration tests, one binary (one link) with a module per area:
//! kube-rs and client-go error answers, authentication, kubectl scenarios, connection limits, the built-in
//! controllers, the protocol, and admission webhooks. Run one area with
//! `cargo test -p krec-apiserver --test all -- kubectl::`.

mod admission_policies;
mod api_errors;
mod authentication;
mod authorization;
mod kubectl;
mod limits;
mod living_cluster;
mod server;
mod support;
mod validation_rules;
mod webhooks;
