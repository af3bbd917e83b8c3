//! Controller helpers, as controller-runtime's `controllerutil` and `meta` packages and
//! kube-runtime's `finalizer` offer them: owner references, create-or-update, finalizers,
//! status conditions, and an API scoped to one kind and namespace.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use kube_core::Resource;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::params::{ListParams, Patch};
use crate::reconciler::Action;

/// Make `owner` the controller of `object` (controller-runtime's `SetControllerReference`): an
/// owner reference with `controller: true` and `blockOwnerDeletion: true`, so that deleting the
/// owner deletes the object and the object's events reach the owner's reconciler (`owns`).
///
/// # Errors
///
/// [`Error::Invalid`] when `owner` has no UID (it was never stored), or `object` already has
/// another controller.
pub fn set_controller_reference<O, K>(owner: &O, object: &mut K) -> Result<()>
where
    O: Resource<DynamicType = ()>,
    K: Resource,
{
    let meta = owner.meta();
    let uid = meta.uid.clone().ok_or_else(|| {
        Error::Invalid(format!(
            "the owner {} has no metadata.uid: read it from the cluster first",
            O::kind(&())
        ))
    })?;
    let name = meta.name.clone().unwrap_or_default();
    let reference = OwnerReference {
        api_version: O::api_version(&()).into_owned(),
        kind: O::kind(&()).into_owned(),
        name,
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let shown = object_name(object.meta());
    let references = object.meta_mut().owner_references.get_or_insert_default();
    if let Some(other) = references
        .iter()
        .find(|r| r.controller == Some(true) && r.uid != reference.uid)
    {
        return Err(Error::Invalid(format!(
            "{shown} is already controlled by {} {}",
            other.kind, other.name
        )));
    }
    references.retain(|r| r.uid != reference.uid);
    references.push(reference);
    Ok(())
}

fn object_name(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    match (&meta.namespace, &meta.name) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        (None, Some(name)) => name.clone(),
        _ => "the object".into(),
    }
}

/// Whether `owner` is `object`'s controller (an owner reference with its UID and
/// `controller: true`).
pub fn is_controlled_by<O: Resource, K: Resource>(object: &K, owner: &O) -> bool {
    let Some(uid) = owner.meta().uid.as_ref() else {
        return false;
    };
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && &r.uid == uid)
}

/// What [`Context::create_or_update`] and [`Context::create_or_patch`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperationResult {
    /// The object did not exist and was created.
    Created,
    /// The object existed and was changed.
    Updated,
    /// The object existed and already was as wanted: nothing was written.
    Unchanged,
}

/// A condition for [`set_condition`]: `status` `"True"` or `"False"` (or `"Unknown"`), with the
/// object's generation it was computed from.
pub fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation,
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
    }
}

/// Set `new` in `conditions` as controller-runtime's `meta.SetStatusCondition` does: a new type
/// is added; for an existing one, `lastTransitionTime` changes only when the status does, and
/// reason, message and observedGeneration are updated. Returns whether anything changed (so
/// the status needs writing).
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        None => {
            conditions.push(new);
            true
        }
        Some(existing) => {
            let mut changed = false;
            if existing.status != new.status {
                existing.status = new.status;
                existing.last_transition_time = new.last_transition_time;
                changed = true;
            }
            for (field, value) in [
                (&mut existing.reason, new.reason),
                (&mut existing.message, new.message),
            ] {
                if *field != value {
                    *field = value;
                    changed = true;
                }
            }
            if existing.observed_generation != new.observed_generation {
                existing.observed_generation = new.observed_generation;
                changed = true;
            }
            changed
        }
    }
}

/// The condition of `type_`, if set.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// What a reconcile behind a finalizer is asked to do (kube-runtime's `finalizer::Event`).
#[derive(Debug)]
pub enum FinalizerEvent<K> {
    /// The object lives: bring the world in line with it.
    Apply(K),
    /// The object is being deleted: clean up what it made outside its owner references; once
    /// this returns `Ok`, the finalizer is removed and the object goes.
    Cleanup(K),
}

/// A JSON merge patch (RFC 7386) from `before` to `after`: changed and new fields, removed ones
/// as `null`, arrays whole.
fn merge_patch(before: &Value, after: &Value) -> Option<Value> {
    match (before, after) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = serde_json::Map::new();
            for (key, value) in new {
                match old.get(key) {
                    Some(previous) => {
                        if let Some(child) = merge_patch(previous, value) {
                            patch.insert(key.clone(), child);
                        }
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            for key in old.keys() {
                if !new.contains_key(key) {
                    patch.insert(key.clone(), Value::Null);
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if before == after => None,
        _ => Some(after.clone()),
    }
}

impl Context {
    /// controller-runtime's `CreateOrUpdate`: read the object named by `object`'s metadata (or
    /// start from `object` if it does not exist), let `mutate` make it as wanted, then create
    /// it, update it (with its `resourceVersion`, so a concurrent change is a conflict) or,
    /// when `mutate` changed nothing, write nothing.
    ///
    /// ```
    /// # use krec_guest::prelude::*;
    /// # use krec_guest::k8s_openapi::api::core::v1::ConfigMap;
    /// # use krec_guest::OperationResult;
    /// # fn sync(ctx: &Context) -> Result<OperationResult> {
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.namespace = Some("default".into());
    /// let (_cm, result) = ctx.create_or_update(cm, |cm| {
    ///     cm.data.get_or_insert_default().insert("mode".into(), "fast".into());
    ///     Ok(())
    /// })?;
    /// # Ok(result) }
    /// ```
    ///
    /// # Errors
    ///
    /// The read's or write's error, or `mutate`'s; [`Error::Invalid`] when `mutate` renames
    /// the object.
    pub fn create_or_update<K>(
        &self,
        object: K,
        mutate: impl FnOnce(&mut K) -> Result<()>,
    ) -> Result<(K, OperationResult)>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        self.create_or_write(object, mutate, |ctx, _states, wanted| ctx.update(wanted))
    }

    /// controller-runtime's `CreateOrPatch`: as [`create_or_update`](Self::create_or_update),
    /// but an existing object is changed by a JSON merge patch of what `mutate` changed (no
    /// `resourceVersion`: fields others changed meanwhile are kept, not a conflict).
    ///
    /// # Errors
    ///
    /// As [`create_or_update`](Self::create_or_update).
    pub fn create_or_patch<K>(
        &self,
        object: K,
        mutate: impl FnOnce(&mut K) -> Result<()>,
    ) -> Result<(K, OperationResult)>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        self.create_or_write(object, mutate, |ctx, (before, after), wanted| {
            let mut patch = merge_patch(before, after).unwrap_or(Value::Null);
            if let Some(meta) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("resourceVersion");
            }
            let meta = wanted.meta();
            ctx.patch::<K>(
                meta.namespace.as_deref(),
                meta.name.as_deref().unwrap_or_default(),
                &Patch::Merge(patch),
            )
        })
    }

    fn create_or_write<K>(
        &self,
        object: K,
        mutate: impl FnOnce(&mut K) -> Result<()>,
        // Writes `wanted`, given the existing object's JSON and `wanted`'s.
        write: impl FnOnce(&Context, (&Value, &Value), &K) -> Result<K>,
    ) -> Result<(K, OperationResult)>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let namespace = object.meta().namespace.clone();
        let name = object.meta().name.clone().ok_or_else(|| {
            Error::Invalid(format!("{}: metadata.name is required", K::kind(&())))
        })?;
        let Some(current) = self.get_opt::<K>(namespace.as_deref(), &name)? else {
            let mut object = object;
            mutate(&mut object)?;
            return Ok((self.create(&object)?, OperationResult::Created));
        };
        let before = serde_json::to_value(&current)?;
        let mut wanted: K = serde_json::from_value(before.clone())?;
        mutate(&mut wanted)?;
        if wanted.meta().name.as_deref() != Some(name.as_str())
            || wanted.meta().namespace != namespace
        {
            return Err(Error::Invalid(format!(
                "{} {name}: mutate must not change the name or namespace",
                K::kind(&())
            )));
        }
        let after = serde_json::to_value(&wanted)?;
        if after == before {
            return Ok((current, OperationResult::Unchanged));
        }
        let written = write(self, (&before, &after), &wanted)?;
        Ok((written, OperationResult::Updated))
    }

    /// Reconcile behind a finalizer, as kube-runtime's `finalizer` does: while the object lives,
    /// make sure it carries `finalizer` (added first, by an update, before `reconcile` sees
    /// the object) and call `reconcile` with [`FinalizerEvent::Apply`]; once it is being
    /// deleted, call it with [`FinalizerEvent::Cleanup`] and remove the finalizer when that
    /// succeeds, so the object goes. An object being deleted without the finalizer is done.
    ///
    /// # Errors
    ///
    /// `reconcile`'s error (the finalizer stays and the key is retried), or the update's.
    pub fn finalizer<K>(
        &self,
        object: K,
        finalizer: &str,
        reconcile: impl FnOnce(FinalizerEvent<K>) -> Result<Action>,
    ) -> Result<Action>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone,
    {
        let has = object
            .meta()
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == finalizer);
        let deleting = object.meta().deletion_timestamp.is_some();
        match (deleting, has) {
            (false, false) => {
                let mut object = object;
                object
                    .meta_mut()
                    .finalizers
                    .get_or_insert_default()
                    .push(finalizer.to_owned());
                // The update's own event brings the object back with the finalizer on.
                self.update(&object)?;
                Ok(Action::done())
            }
            (false, true) => reconcile(FinalizerEvent::Apply(object)),
            (true, true) => {
                let action = reconcile(FinalizerEvent::Cleanup(object.clone()))?;
                let mut object = object;
                if let Some(finalizers) = object.meta_mut().finalizers.as_mut() {
                    finalizers.retain(|f| f != finalizer);
                }
                match self.update(&object) {
                    // Gone already: another finalizer-holder was faster, nothing to remove.
                    Ok(_) | Err(Error::NotFound(_)) => Ok(action),
                    Err(err) => Err(err),
                }
            }
            (true, false) => Ok(Action::done()),
        }
    }

    /// The calls for one kind in one namespace (`None`: cluster-scoped, or all namespaces for
    /// a list), so neither is repeated on every call: `ctx.api::<Deployment>(req.namespace())`.
    pub fn api<'a, K>(&'a self, namespace: Option<&'a str>) -> Api<'a, K>
    where
        K: Resource<DynamicType = ()>,
    {
        Api {
            ctx: self,
            namespace,
            _kind: std::marker::PhantomData,
        }
    }
}

/// A kind in a namespace, through a [`Context`]; see [`Context::api`].
#[derive(Debug)]
pub struct Api<'a, K> {
    ctx: &'a Context,
    namespace: Option<&'a str>,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K> Api<'_, K>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
{
    /// Get `name`; [`Error::NotFound`] if it does not exist.
    ///
    /// # Errors
    ///
    /// As [`Context::get`].
    pub fn get(&self, name: &str) -> Result<K> {
        self.ctx.get(self.namespace, name)
    }

    /// Get `name`, or `None` if it does not exist.
    ///
    /// # Errors
    ///
    /// As [`Context::get_opt`].
    pub fn get_opt(&self, name: &str) -> Result<Option<K>> {
        self.ctx.get_opt(self.namespace, name)
    }

    /// List in this namespace (`params`' own namespace is replaced).
    ///
    /// # Errors
    ///
    /// As [`Context::list`].
    pub fn list(&self, params: &ListParams) -> Result<Vec<K>> {
        let params = params.clone().namespace(self.namespace);
        self.ctx.list(&params)
    }

    /// Create `object`, in this namespace.
    ///
    /// # Errors
    ///
    /// As [`Context::create`].
    pub fn create(&self, object: &K) -> Result<K> {
        self.ctx.create(&self.placed(object)?)
    }

    /// Replace `object`.
    ///
    /// # Errors
    ///
    /// As [`Context::update`].
    pub fn update(&self, object: &K) -> Result<K> {
        self.ctx.update(&self.placed(object)?)
    }

    /// Replace `object`'s status.
    ///
    /// # Errors
    ///
    /// As [`Context::update_status`].
    pub fn update_status(&self, object: &K) -> Result<K> {
        self.ctx.update_status(&self.placed(object)?)
    }

    /// Patch `name`.
    ///
    /// # Errors
    ///
    /// As [`Context::patch`].
    pub fn patch(&self, name: &str, patch: &Patch) -> Result<K> {
        self.ctx.patch(self.namespace, name, patch)
    }

    /// Patch `name`'s status.
    ///
    /// # Errors
    ///
    /// As [`Context::patch_status`].
    pub fn patch_status(&self, name: &str, patch: &Patch) -> Result<K> {
        self.ctx.patch_status(self.namespace, name, patch)
    }

    /// Delete `name`.
    ///
    /// # Errors
    ///
    /// As [`Context::delete`].
    pub fn delete(&self, name: &str) -> Result<()> {
        self.ctx.delete::<K>(self.namespace, name)
    }

    /// [`Context::create_or_update`] in this namespace.
    ///
    /// # Errors
    ///
    /// As [`Context::create_or_update`].
    pub fn create_or_update(
        &self,
        object: K,
        mutate: impl FnOnce(&mut K) -> Result<()>,
    ) -> Result<(K, OperationResult)> {
        self.ctx.create_or_update(self.placed_owned(object), mutate)
    }

    /// `object` in this namespace; an object naming another is refused.
    fn placed(&self, object: &K) -> Result<K> {
        let value = serde_json::to_value(object)?;
        Ok(self.placed_owned(serde_json::from_value(value)?))
    }

    fn placed_owned(&self, mut object: K) -> K {
        if let Some(ns) = self.namespace {
            object
                .meta_mut()
                .namespace
                .get_or_insert_with(|| ns.to_owned());
        }
        object
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn owned(uid: Option<&str>) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("owner".into());
        cm.metadata.namespace = Some("default".into());
        cm.metadata.uid = uid.map(str::to_owned);
        cm
    }

    #[test]
    fn controller_references_should_be_set_once_and_refuse_a_second_controller() {
        let owner = owned(Some("u-1"));
        let mut deployment = Deployment::default();
        set_controller_reference(&owner, &mut deployment).expect("set");
        set_controller_reference(&owner, &mut deployment).expect("again: no duplicate");
        assert_eq!(
            deployment.metadata.owner_references.as_ref().map(Vec::len),
            Some(1)
        );
        assert!(is_controlled_by(&deployment, &owner));
        let other = owned(Some("u-2"));
        assert!(set_controller_reference(&other, &mut deployment).is_err());
        assert!(!is_controlled_by(&deployment, &other));
        assert!(set_controller_reference(&owned(None), &mut Deployment::default()).is_err());
    }

    #[test]
    fn conditions_should_move_their_transition_time_only_when_status_changes() {
        let mut conditions = Vec::new();
        assert!(set_condition(
            &mut conditions,
            condition("Ready", false, "Starting", "", Some(1))
        ));
        let first = conditions[0].last_transition_time.clone();
        let mut later = condition("Ready", false, "Waiting", "pods pending", Some(2));
        later.last_transition_time =
            Time(first.0 + k8s_openapi::jiff::SignedDuration::from_secs(60));
        assert!(set_condition(&mut conditions, later.clone()));
        assert_eq!(
            conditions[0].last_transition_time, first,
            "same status: time kept"
        );
        assert_eq!(conditions[0].reason, "Waiting");
        assert!(
            !set_condition(&mut conditions, later.clone()),
            "nothing changed"
        );
        let mut ready = condition("Ready", true, "Available", "", Some(2));
        ready.last_transition_time = later.last_transition_time.clone();
        assert!(set_condition(&mut conditions, ready));
        assert_eq!(
            conditions[0].last_transition_time,
            later.last_transition_time
        );
        assert_eq!(
            find_condition(&conditions, "Ready").map(|c| c.status.as_str()),
            Some("True")
        );
    }

    #[test]
    fn merge_patches_should_hold_only_the_changes() {
        let before = serde_json::json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1]});
        let after = serde_json::json!({"a": 1, "b": {"c": 5}, "e": [1, 2], "f": true});
        assert_eq!(
            merge_patch(&before, &after),
            Some(serde_json::json!({"b": {"c": 5, "d": null}, "e": [1, 2], "f": true}))
        );
        assert_eq!(merge_patch(&before, &before), None);
    }
}
