//! Which guests this replica may run now, when guests are sharded across replicas
//! ([`crate::runtime::shard`]): per guest, a gate its workers wait on and a [`Fence`] its writes pass.
//!
//! The shard loop grants a guest (gate open, fence extended) once it holds the guest's Lease,
//! extends the fence at each renewal, pauses the guest (gate closed, in-flight reconciles
//! finish) before handing it over, and revokes it (gate and fence closed) once the Lease is
//! released or lost. The manager asks for a guest's gate and fence when it starts the guest;
//! both outlive hot swaps of the guest's module.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::cluster::fence::Fence;

/// A guest's gate and fence.
#[derive(Debug)]
struct Slot {
    gate: watch::Sender<bool>,
    fence: Arc<Fence>,
}

/// The gates and fences of every guest this replica knows. See the [module docs](self).
#[derive(Debug, Default)]
pub struct Tenures {
    slots: Mutex<BTreeMap<String, Slot>>,
}

impl Tenures {
    /// No guest granted yet.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    fn with_slot<T>(&self, guest: &str, f: impl FnOnce(&Slot) -> T) -> T {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let slot = slots.entry(guest.to_owned()).or_insert_with(|| Slot {
            gate: watch::channel(false).0,
            fence: Arc::new(Fence::closed(guest)),
        });
        f(slot)
    }

    /// The gate `guest`'s workers wait on (closed until granted).
    pub fn gate(&self, guest: &str) -> watch::Receiver<bool> {
        self.with_slot(guest, |slot| slot.gate.subscribe())
    }

    /// The fence `guest`'s writes pass (closed until granted).
    pub fn fence(&self, guest: &str) -> Arc<Fence> {
        self.with_slot(guest, |slot| slot.fence.clone())
    }

    /// Run `guest` here: writes until `until`, workers take keys.
    pub fn grant(&self, guest: &str, until: Instant) {
        self.with_slot(guest, |slot| {
            slot.fence.extend(until);
            slot.gate.send_replace(true);
        });
    }

    /// Let `guest`'s writes go on until `until` (a renewal).
    pub fn extend(&self, guest: &str, until: Instant) {
        self.with_slot(guest, |slot| slot.fence.extend(until));
    }

    /// Stop taking `guest`'s keys; reconciles running finish and may still write.
    pub fn pause(&self, guest: &str) {
        self.with_slot(guest, |slot| slot.gate.send_replace(false));
    }

    /// Stop `guest` here: no new reconcile, no write.
    pub fn revoke(&self, guest: &str) {
        self.with_slot(guest, |slot| {
            slot.gate.send_replace(false);
            slot.fence.close();
        });
    }

    /// Close the gate of every running guest whose fence has closed (no renewal within the
    /// deadline); returns their names. Cheap: the shard loop's watchdog calls it often, so a
    /// guest stops at its deadline even while the loop waits on a slow API server.
    pub fn close_expired(&self) -> Vec<String> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .iter()
            .filter(|(_, slot)| *slot.gate.borrow() && !slot.fence.is_open())
            .map(|(name, slot)| {
                slot.gate.send_replace(false);
                name.clone()
            })
            .collect()
    }

    /// Whether `guest`'s workers take keys here now.
    pub fn is_running(&self, guest: &str) -> bool {
        self.with_slot(guest, |slot| *slot.gate.borrow())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_guest_should_run_between_grant_and_revoke() {
        let tenures = Tenures::new();
        let gate = tenures.gate("g");
        let fence = tenures.fence("g");
        assert!(!*gate.borrow() && !fence.is_open(), "closed until granted");
        tenures.grant("g", Instant::now() + Duration::from_secs(10));
        assert!(*gate.borrow() && fence.is_open() && tenures.is_running("g"));
        tenures.pause("g");
        assert!(
            !*gate.borrow() && fence.is_open(),
            "paused: writes in flight go on"
        );
        tenures.revoke("g");
        assert!(!fence.is_open(), "revoked: no write");
        tenures.grant("g", Instant::now() + Duration::from_secs(1));
        assert!(tenures.close_expired().is_empty(), "within the deadline");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(tenures.close_expired(), ["g"], "past it");
        assert!(!*gate.borrow());
        assert!(!tenures.is_running("other"), "unknown guests do not run");
    }
}
