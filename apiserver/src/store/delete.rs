//! Deletion: finalizers, propagation (background, foreground, orphan), namespace and CRD clean-up, and
//! owner-reference garbage collection.

use std::collections::BTreeSet;

use super::*;

impl Store {
    /// Delete an object. Returns the object: gone, or marked for deletion when finalizers hold it.
    pub fn delete(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        let mut state = self.lock();
        let key = Key::new(rt, namespace, name);
        let current = state
            .storage
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        for (field, wanted) in [
            ("uid", &options.uid),
            ("resourceVersion", &options.resource_version),
        ] {
            if let Some(wanted) = wanted
                && meta_str(&current, field) != Some(wanted.as_str())
            {
                let problem = format!(
                    "Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {}",
                    meta_str(&current, field).unwrap_or_default()
                );
                return Err(ApiError::precondition(&rt.group, &rt.plural, name, problem));
            }
        }
        if options.dry_run {
            return Ok(Self::served(rt, &current));
        }
        let uid = meta_str(&current, "uid").unwrap_or_default().to_owned();
        if options.propagation != Propagation::Foreground
            && let Some(marked) =
                self.terminate_gracefully(&mut state, rt, &key, &current, options.grace_period)?
        {
            if options.propagation == Propagation::Orphan {
                self.orphan_dependents(&mut state, &uid)?;
            }
            return Ok(Self::served(rt, &marked));
        }
        let result = match options.propagation {
            Propagation::Orphan => {
                self.orphan_dependents(&mut state, &uid)?;
                self.delete_locked(&mut state, rt, &key)?
            }
            Propagation::Foreground => {
                self.delete_foreground(&mut state, rt, &key)?;
                self.finish_foreground(&mut state)?;
                state.storage.get(&key).cloned().unwrap_or(current)
            }
            Propagation::Background => self.delete_locked(&mut state, rt, &key)?,
        };
        Ok(Self::served(rt, &result))
    }

    /// Graceful deletion of a running Pod (`pod.Strategy.CheckGracefulDelete`): a Pod bound to
    /// an existing node, not finished, with a grace period above zero, is marked with
    /// `deletionTimestamp` (now + grace) and `deletionGracePeriodSeconds` and stays until its
    /// kubelet deletes it with grace 0; a second delete may shorten the grace. `None` when the
    /// delete is to happen at once.
    fn terminate_gracefully(
        &self,
        state: &mut State,
        rt: &ResourceType,
        key: &Key,
        current: &Arc<Value>,
        grace: Option<i64>,
    ) -> Result<Option<Arc<Value>>, ApiError> {
        if registry::strategy(rt).deletion() != Deletion::Graceful
            || !self
                .graceful_pods
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Ok(None);
        }
        let node = current
            .at("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let finished = matches!(
            current.at("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        );
        let node_key = Key {
            resource: "/nodes".into(),
            namespace: String::new(),
            name: node.to_owned(),
        };
        if node.is_empty() || finished || !state.storage.objects().contains_key(&node_key) {
            return Ok(None);
        }
        let grace = grace
            .or_else(|| {
                current
                    .at("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(30)
            .max(0);
        if grace == 0 {
            return Ok(None);
        }
        let marked_grace = current
            .at("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64);
        if marked_grace.is_some_and(|g| g <= grace) {
            return Ok(Some(current.clone()));
        }
        let deadline = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_secs(grace))
            .unwrap_or_else(|_| jiff::Timestamp::now());
        let mut marked = (**current).clone();
        let meta = metadata_mut(&mut marked);
        meta.insert(
            "deletionTimestamp".into(),
            json!(deadline.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        );
        meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
        Ok(Some(self.write(state, key.clone(), Write::Put(marked))?))
    }

    /// Foreground deletion of `key`: with dependents, the object is marked for deletion with the
    /// `foregroundDeletion` finalizer and its dependents are deleted in the foreground in turn (a
    /// dependent that has other owners only loses its reference to this one); without, it is
    /// deleted as usual.
    fn delete_foreground(
        &self,
        state: &mut State,
        rt: &ResourceType,
        key: &Key,
    ) -> Result<(), ApiError> {
        let Some(current) = state.storage.get(key).cloned() else {
            return Ok(());
        };
        let uid = meta_str(&current, "uid").unwrap_or_default().to_owned();
        let dependents = self.dependents(state, &uid);
        if dependents.is_empty() {
            self.delete_locked(state, rt, key)?;
            return Ok(());
        }
        let mut marked = if current.at("/metadata/deletionTimestamp").is_none() {
            mark_deleting(&current)
        } else {
            (*current).clone()
        };
        let finalizers = marked["metadata"]
            .as_object_mut()
            .map(|meta| meta.entry("finalizers").or_insert_with(|| json!([])));
        if let Some(Value::Array(finalizers)) = finalizers
            && !finalizers.iter().any(|f| f == FOREGROUND_DELETION)
        {
            finalizers.push(json!(FOREGROUND_DELETION));
        }
        self.write(state, key.clone(), Write::Put(marked))?;
        let uids: HashSet<String> = state
            .storage
            .objects()
            .values()
            .filter(|o| o.at("/metadata/deletionTimestamp").is_none())
            .filter_map(|o| meta_str(o, "uid").map(str::to_owned))
            .collect();
        for (dependent_key, dependent) in dependents {
            let other_owner_lives = owner_uids(&dependent).any(|u| u != uid && uids.contains(u));
            if other_owner_lives {
                self.write(
                    state,
                    dependent_key,
                    Write::Put(without_owner(&dependent, &uid)),
                )?;
            } else if let Some(dependent_rt) = self.registry.by_storage_key(&dependent_key.resource)
            {
                self.delete_foreground(state, &dependent_rt, &dependent_key)?;
            }
        }
        Ok(())
    }

    /// The objects with an owner reference to `uid`.
    fn dependents(&self, state: &State, uid: &str) -> Vec<(Key, Arc<Value>)> {
        state
            .owners
            .dependents_of(uid)
            .into_iter()
            .filter_map(|k| state.storage.get(&k).map(|o| (k, o.clone())))
            .collect()
    }

    /// Let go of the owners in foreground deletion whose dependents are all gone: their
    /// `foregroundDeletion` finalizer is removed, and they go unless other finalizers hold them.
    pub(super) fn finish_foreground(&self, state: &mut State) -> Result<(), ApiError> {
        loop {
            let done: Vec<Key> = state
                .owners
                .in_foreground_deletion()
                .into_iter()
                .filter(|k| {
                    state.storage.get(k).is_some_and(|o| {
                        !state
                            .owners
                            .has_dependents(meta_str(o, "uid").unwrap_or_default())
                    })
                })
                .collect();
            if done.is_empty() {
                return Ok(());
            }
            for key in done {
                let Some(object) = state.storage.get(&key).cloned() else {
                    continue;
                };
                let mut released = (*object).clone();
                if let Some(finalizers) = released
                    .at_mut("/metadata/finalizers")
                    .and_then(Value::as_array_mut)
                {
                    finalizers.retain(|f| f != FOREGROUND_DELETION);
                    if finalizers.is_empty() {
                        metadata_mut(&mut released).remove("finalizers");
                    }
                }
                if has_finalizers(&released) {
                    self.write(state, key, Write::Put(released))?;
                } else if let Some(rt) = self.registry.by_storage_key(&key.resource) {
                    self.write(state, key.clone(), Write::Put(released))?;
                    self.remove_locked(state, &rt, &key)?;
                } else {
                    self.write(state, key, Write::Remove)?;
                }
            }
        }
    }

    /// Delete under the lock: mark if finalizers hold the object, else remove it.
    pub(super) fn delete_locked(
        &self,
        state: &mut State,
        rt: &ResourceType,
        key: &Key,
    ) -> Result<Arc<Value>, ApiError> {
        let current = state
            .storage
            .get(key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, &key.name))?;
        let strategy = registry::strategy(rt);
        let held = matches!(
            strategy.deletion(),
            Deletion::AfterContents | Deletion::AfterInstances
        );
        if !(has_finalizers(&current) || held) {
            return self.remove_locked(state, rt, key);
        }
        // Held: a namespace until its contents are gone, a CRD until its custom resources are,
        // anything else until its finalizers are removed.
        let marked = if current.at("/metadata/deletionTimestamp").is_none() {
            let mut marked = mark_deleting(&current);
            strategy.mark_deleting(&mut marked);
            self.write(state, key.clone(), Write::Put(marked))?
        } else {
            current
        };
        match strategy.deletion() {
            Deletion::AfterContents => self.finalize_namespace(state, &key.name)?,
            Deletion::AfterInstances => self.finalize_crd(state, &key.name)?,
            Deletion::Finalizers | Deletion::Graceful => {}
        }
        Ok(state.storage.get(key).cloned().unwrap_or(marked))
    }

    /// Delete a terminating CRD's custom resources (finalizers respected); remove the CRD and
    /// stop serving its types once none are left.
    pub(super) fn finalize_crd(&self, state: &mut State, crd_name: &str) -> Result<(), ApiError> {
        let crd_key = Key {
            resource: CRD_RESOURCE.into(),
            namespace: String::new(),
            name: crd_name.to_owned(),
        };
        let Some(crd) = state.storage.get(&crd_key).cloned() else {
            return Ok(());
        };
        let Some(resource) = crd_resource(&crd) else {
            return Ok(());
        };
        let instances: Vec<Key> = state
            .storage
            .objects()
            .keys()
            .filter(|k| k.resource == resource)
            .cloned()
            .collect();
        for key in instances {
            self.remove_or_mark(state, key)?;
        }
        self.collect_garbage(state)?;
        if !state
            .storage
            .objects()
            .keys()
            .any(|k| k.resource == resource)
        {
            self.write(state, crd_key, Write::Remove)?;
            self.registry.remove_crd(crd_name);
        }
        Ok(())
    }

    /// Remove an object for good, then run the consequences: CRD types go away with their
    /// objects, dependents are garbage-collected, a terminating namespace may finish.
    pub(super) fn remove_locked(
        &self,
        state: &mut State,
        rt: &ResourceType,
        key: &Key,
    ) -> Result<Arc<Value>, ApiError> {
        let removed = self.write(state, key.clone(), Write::Remove)?;
        // Removed outright (a CRD not through finalize_crd: its types stop).
        registry::strategy(rt).after_remove(&self.registry, &key.name);
        if rt.schema.is_some() {
            // The last custom resource of a terminating CRD lets the CRD go.
            let crd_name = format!("{}.{}", rt.plural, rt.group);
            let crd_key = Key {
                resource: CRD_RESOURCE.into(),
                namespace: String::new(),
                name: crd_name.clone(),
            };
            if state
                .storage
                .objects()
                .get(&crd_key)
                .is_some_and(|c| c.at("/metadata/deletionTimestamp").is_some())
            {
                self.finalize_crd(state, &crd_name)?;
            }
        }
        self.collect_garbage(state)?;
        self.finish_foreground(state)?;
        if !key.namespace.is_empty() {
            let ns_key = Key::namespace_key(&key.namespace);
            if state
                .storage
                .objects()
                .get(&ns_key)
                .is_some_and(|ns| ns.at("/metadata/deletionTimestamp").is_some())
            {
                self.finalize_namespace(state, &key.namespace)?;
            }
        }
        Ok(removed)
    }

    /// Delete a terminating namespace's contents; remove it once they are all gone.
    pub(super) fn finalize_namespace(
        &self,
        state: &mut State,
        namespace: &str,
    ) -> Result<(), ApiError> {
        let contents: Vec<Key> = state
            .storage
            .objects()
            .keys()
            .filter(|k| k.namespace == namespace)
            .cloned()
            .collect();
        for key in contents {
            self.remove_or_mark(state, key)?;
        }
        let remaining = state
            .storage
            .objects()
            .keys()
            .any(|k| k.namespace == namespace);
        let ns_key = Key::namespace_key(namespace);
        if !remaining && state.storage.objects().contains_key(&ns_key) {
            self.write(state, ns_key, Write::Remove)?;
        }
        Ok(())
    }

    /// Remove an object, or, when finalizers hold it, mark it for deletion (once).
    pub(super) fn remove_or_mark(&self, state: &mut State, key: Key) -> Result<(), ApiError> {
        let Some(object) = state.storage.get(&key).cloned() else {
            return Ok(());
        };
        if !has_finalizers(&object) {
            self.write(state, key, Write::Remove)?;
        } else if object.at("/metadata/deletionTimestamp").is_none() {
            self.write(state, key, Write::Put(mark_deleting(&object)))?;
        }
        Ok(())
    }

    /// Remove owner references to `uid` from its dependents.
    pub(super) fn orphan_dependents(&self, state: &mut State, uid: &str) -> Result<(), ApiError> {
        for (key, object) in self.dependents(state, uid) {
            self.write(state, key, Write::Put(without_owner(&object, uid)))?;
        }
        Ok(())
    }

    /// Background garbage collection: delete objects all of whose owners are gone. Only the
    /// dependents of owners that went away (or never existed) since the last pass are looked
    /// at, through the ownership graph.
    pub(super) fn collect_garbage(&self, state: &mut State) -> Result<(), ApiError> {
        loop {
            let gone = state.owners.take_pending();
            if gone.is_empty() {
                return Ok(());
            }
            let mut garbage = BTreeSet::new();
            for uid in gone.iter().filter(|u| !state.owners.exists(u)) {
                for key in state.owners.dependents_of(uid) {
                    let Some(object) = state.storage.get(&key) else {
                        continue;
                    };
                    if object.at("/metadata/deletionTimestamp").is_none()
                        && owner_uids(object).all(|u| !state.owners.exists(u))
                    {
                        garbage.insert(key);
                    }
                }
            }
            for key in garbage {
                self.remove_or_mark(state, key)?;
            }
        }
    }
}

/// `object` without its owner reference to `uid` (and without `ownerReferences` when none is
/// left, as Go's JSON omits an empty list).
fn without_owner(object: &Value, uid: &str) -> Value {
    let mut kept = object.clone();
    if let Some(refs) = kept
        .at_mut("/metadata/ownerReferences")
        .and_then(Value::as_array_mut)
    {
        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
        if refs.is_empty() {
            metadata_mut(&mut kept).remove("ownerReferences");
        }
    }
    kept
}

/// The finalizer of an owner waiting for its dependents (foreground deletion).
pub(super) const FOREGROUND_DELETION: &str = "foregroundDeletion";

/// Storage key prefix of CRD objects.
const CRD_RESOURCE: &str = "apiextensions.k8s.io/customresourcedefinitions";

/// The storage key prefix (`group/plural`) of a CRD's custom resources.
fn crd_resource(crd: &Value) -> Option<String> {
    let group = crd.at("/spec/group").and_then(Value::as_str)?;
    let plural = crd.at("/spec/names/plural").and_then(Value::as_str)?;
    Some(format!("{group}/{plural}"))
}

/// An object marked for deletion, as kube-apiserver's `markAsDeleting`: `deletionTimestamp`
/// set, grace period 0, and `generation` bumped where the kind tracks it.
fn mark_deleting(object: &Value) -> Value {
    let mut marked = object.clone();
    let generation = object.at("/metadata/generation").and_then(Value::as_i64);
    let meta = metadata_mut(&mut marked);
    meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
    meta.insert("deletionGracePeriodSeconds".into(), json!(0));
    if let Some(generation) = generation.filter(|g| *g > 0) {
        meta.insert("generation".into(), json!(generation.saturating_add(1)));
    }
    marked
}

pub(super) fn owner_uids(object: &Value) -> impl Iterator<Item = &str> {
    object
        .at("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str))
}
