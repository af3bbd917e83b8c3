//! The host's integration tests, one binary (one link) with a module per area: `krec check`,
//! `krec cluster`, the deployment manifests, `krec dev` and `krec new`, leader election, the
//! native admission arm, `krec run`, sharding, the soak test and webhook registration; `common` is their harness. Run
//! one area with `cargo test -p krec --test all -- shard::`.

mod check;
mod cluster_cli;
mod common;
mod dashboards;
mod deploy;
mod dev;
mod leader;
mod native_admission;
mod push;
mod run;
mod shard;
mod soak;
mod status;
mod top;
mod traces;
mod webhooks;
