//! Pods: the defaults a new Pod gets, and graceful deletion (a Pod on a node goes when its
//! kubelet says so).

use serde_json::Value;

use crate::registry::{Deletion, Strategy};

/// The Pod strategy.
pub struct PodStrategy;

/// The Pod strategy.
pub static STRATEGY: PodStrategy = PodStrategy;

impl Strategy for PodStrategy {
    fn default_on_create(&self, object: &mut Value) {
        crate::defaults::pod_on_create(object);
    }

    fn deletion(&self) -> Deletion {
        Deletion::Graceful
    }
}
