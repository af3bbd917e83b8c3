//! `apps`: the workload controllers' kinds.

pub mod daemonset;
pub mod deployment;
pub mod replicaset;
pub mod statefulset;
