//! The ownership graph garbage collection walks (kube-controller-manager's GC keeps the same in
//! its `GraphBuilder`): every object's key by UID, the dependents of each owner UID, the objects
//! waiting in foreground deletion, and the UIDs that went away since the collector last looked.
//! Kept up to date by every write, so a deletion costs its dependents, not the whole store.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::Value;

use super::delete::{FOREGROUND_DELETION, owner_uids};
use super::{Key, meta_str};
use krec_core::json::Pointer as _;

#[derive(Default)]
pub(super) struct Owners {
    keys: HashMap<String, Key>,
    dependents: HashMap<String, BTreeSet<Key>>,
    foreground: BTreeSet<Key>,
    /// UIDs whose dependents the collector must look at: owners removed, or named by a new
    /// reference without existing.
    pending: HashSet<String>,
}

impl Owners {
    /// Record `object`, stored at `key`.
    pub(super) fn link(&mut self, key: &Key, object: &Value) {
        if let Some(uid) = meta_str(object, "uid") {
            self.keys.insert(uid.to_owned(), key.clone());
        }
        for owner in owner_uids(object) {
            self.dependents
                .entry(owner.to_owned())
                .or_default()
                .insert(key.clone());
            if !self.keys.contains_key(owner) {
                self.pending.insert(owner.to_owned());
            }
        }
        let foreground = object
            .at("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|f| f == FOREGROUND_DELETION));
        if foreground {
            self.foreground.insert(key.clone());
        }
    }

    /// Forget `object`, stored at `key` until now (`removed`: for good, so its dependents must
    /// be looked at).
    pub(super) fn unlink(&mut self, key: &Key, object: &Value, removed: bool) {
        if let Some(uid) = meta_str(object, "uid") {
            if self.keys.get(uid) == Some(key) {
                self.keys.remove(uid);
            }
            if removed {
                self.pending.insert(uid.to_owned());
            }
        }
        for owner in owner_uids(object) {
            if let Some(dependents) = self.dependents.get_mut(owner) {
                dependents.remove(key);
                if dependents.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
        self.foreground.remove(key);
    }

    /// Whether an object with `uid` exists.
    pub(super) fn exists(&self, uid: &str) -> bool {
        self.keys.contains_key(uid)
    }

    /// The objects naming `uid` as an owner.
    pub(super) fn dependents_of(&self, uid: &str) -> Vec<Key> {
        self.dependents
            .get(uid)
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether any object names `uid` as an owner.
    pub(super) fn has_dependents(&self, uid: &str) -> bool {
        self.dependents.contains_key(uid)
    }

    /// The objects carrying the `foregroundDeletion` finalizer.
    pub(super) fn in_foreground_deletion(&self) -> Vec<Key> {
        self.foreground.iter().cloned().collect()
    }

    /// The UIDs to look at since the last call.
    pub(super) fn take_pending(&mut self) -> HashSet<String> {
        std::mem::take(&mut self.pending)
    }
}
