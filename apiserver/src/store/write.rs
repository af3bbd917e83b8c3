//! Writes: create, update (whole object or status) and patch, with kube-apiserver's metadata
//! rules, optimistic concurrency, generation and the status subresource.

use super::*;

impl Store {
    /// Check the namespace of a namespaced write exists (and, for creates, is not terminating).
    pub(super) fn check_namespace(
        state: &State,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        creating: bool,
    ) -> Result<(), ApiError> {
        if !rt.namespaced {
            return Ok(());
        }
        match state.storage.get(&Key::namespace_key(namespace)) {
            None => Err(ApiError::not_found("", "namespaces", namespace)),
            Some(ns) if creating && ns.at("/metadata/deletionTimestamp").is_some() => {
                Err(ApiError::forbidden(format!(
                    "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                    qualified_plural(rt)
                )))
            }
            Some(_) => Ok(()),
        }
    }

    /// A body of another kind (or API group) than the URL names is a 400, as kube-apiserver's
    /// "X cannot be handled as a Y".
    pub(super) fn check_type(rt: &ResourceType, object: &Value) -> Result<(), ApiError> {
        let kind = object.get("kind").and_then(Value::as_str);
        let api_version = object.get("apiVersion").and_then(Value::as_str);
        let group = api_version.map(|v| v.rsplit_once('/').map_or("", |(g, _)| g));
        if kind.is_some_and(|k| k != rt.kind) || group.is_some_and(|g| g != rt.group) {
            return Err(ApiError::bad_request(format!(
                "{} in version {:?} cannot be handled as a {}",
                kind.unwrap_or("object"),
                api_version.unwrap_or(""),
                rt.kind
            )));
        }
        Ok(())
    }

    /// Create an object in `namespace` (from the URL; `None` for cluster-scoped).
    pub fn create(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        mut object: Value,
        options: impl Into<WriteOptions>,
    ) -> Result<Arc<Value>, ApiError> {
        let options = options.into();
        if !object.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        Self::check_type(rt, &object)?;
        let body_ns = meta_str(&object, "namespace").map(str::to_owned);
        let namespace = if rt.namespaced {
            match (namespace, body_ns.as_deref()) {
                (Some(url), Some(body)) if url != body => {
                    return Err(ApiError::bad_request(format!(
                        "the namespace of the provided object ({body}) does not match the namespace sent on the request ({url})"
                    )));
                }
                (Some(ns), _) | (None, Some(ns)) => Some(ns.to_owned()),
                (None, None) => {
                    return Err(ApiError::bad_request(
                        "a namespace is required to create a namespaced object",
                    ));
                }
            }
        } else {
            None
        };
        let name = match meta_str(&object, "name").filter(|n| !n.is_empty()) {
            Some(name) => name.to_owned(),
            None => match meta_str(&object, "generateName").filter(|p| !p.is_empty()) {
                Some(prefix) => format!("{prefix}{}", name_suffix()),
                None => {
                    return Err(ApiError::invalid(
                        &rt.kind,
                        &rt.group,
                        "",
                        vec![(
                            "metadata.name".into(),
                            "Required value: name or generateName is required".into(),
                        )],
                    ));
                }
            },
        };
        let api_version = rt.api_version();
        let now = now_rfc3339();
        let strategy = registry::strategy(rt);
        {
            let map = object.as_object_mut().expect("checked above");
            map.insert("apiVersion".into(), json!(api_version));
            map.insert("kind".into(), json!(rt.kind));
            if rt.status_subresource && !strategy.keeps_status_on_create() {
                map.remove("status");
            }
        }
        let meta = metadata_mut(&mut object);
        meta.insert("name".into(), json!(name));
        match &namespace {
            Some(ns) => meta.insert("namespace".into(), json!(ns)),
            None => meta.remove("namespace"),
        };
        let keep = |meta: &Map<String, Value>, field: &str| {
            options.prepared && meta.get(field).is_some_and(Value::is_string)
        };
        if !keep(meta, "uid") {
            meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        }
        if !keep(meta, "creationTimestamp") {
            meta.insert("creationTimestamp".into(), json!(now));
        }
        for field in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
            "generation",
            "selfLink",
        ] {
            meta.remove(field);
        }
        // Only a server-side apply brings its own (computed) managedFields.
        if !options.applied {
            meta.remove("managedFields");
        }
        if tracks_generation(rt) {
            meta.insert("generation".into(), json!(1));
        }
        Self::default_new(rt, &mut object);
        // Judged before the lock: nothing above reads the store.
        let judged = Self::judge_rules(rt, &object, None);
        let mut state = self.lock();
        if let Some(ns) = &namespace {
            Self::check_namespace(&state, rt, ns, &name, true)?;
        }
        let key = Key::new(rt, namespace.as_deref(), &name);
        if state.storage.objects().contains_key(&key) {
            return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
        }
        self.validate(rt, &object, &name, None, judged.as_ref())?;
        let mut siblings = state
            .storage
            .objects()
            .iter()
            .filter(|(k, _)| k.resource == key.resource)
            .map(|(_, o)| &**o);
        strategy.prepare_for_create(&mut object, &mut siblings);
        if !options.applied {
            managed::record_update(
                &Value::Null,
                &mut object,
                Schema::of(rt),
                &managed::Write {
                    manager: &options.manager,
                    api_version: &api_version,
                    subresource: None,
                    time: &now,
                },
            );
        }
        if options.dry_run {
            return Ok(Arc::new(object));
        }
        let stored = self.write(&mut state, key, Write::Put(object))?;
        self.after_write(rt, &stored);
        Ok(Self::served(rt, &stored))
    }

    /// The defaults a new object gets (a CRD's schema defaults and pruning, or the built-in
    /// kind's defaulters), as kube-apiserver applies them when it decodes a create — before
    /// mutating admission sees the object.
    pub fn default_new(rt: &ResourceType, object: &mut Value) {
        if let Some(schema) = &rt.schema {
            schema::apply_defaults(schema, object);
            schema::prune(schema, object);
        } else {
            let strategy = registry::strategy(rt);
            strategy.default(object);
            strategy.default_on_create(object);
        }
    }

    /// What a stored object sets off in the server, by its kind's strategy (CRDs serve their
    /// types).
    pub(super) fn after_write(&self, rt: &ResourceType, stored: &Value) {
        registry::strategy(rt).after_write(&self.registry, stored);
    }

    /// Replace an object (`status`: through the status subresource).
    pub fn update(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        object: Value,
        status: bool,
        options: impl Into<WriteOptions>,
    ) -> Result<Arc<Value>, ApiError> {
        let options = options.into();
        let judged = Self::has_rules(rt)
            .then(|| {
                let key = Key::new(rt, namespace, name);
                let old = self.lock().storage.get(&key).cloned()?;
                self.judge_update(rt, namespace, name, &old, object.clone(), status, &options)
            })
            .flatten();
        let mut state = self.lock();
        self.update_locked(
            &mut state,
            rt,
            namespace,
            name,
            object,
            status,
            &options,
            judged.as_ref(),
        )
    }

    /// Whether `rt` has CEL rules to judge its objects by.
    fn has_rules(rt: &ResourceType) -> bool {
        #[cfg(feature = "server")]
        {
            rt.schema
                .as_ref()
                .and_then(crate::expressions::rules_for)
                .is_some()
        }
        #[cfg(not(feature = "server"))]
        {
            let _ = rt;
            false
        }
    }

    /// Judge by `rt`'s CEL rules the object `new` would be stored as, replacing `old`, without
    /// the lock: what [`update_locked`](Self::update_locked) would validate if `old` is still
    /// the stored object then. `None` when the write fails before validation (it fails the same
    /// way under the lock).
    #[allow(clippy::too_many_arguments)]
    fn judge_update(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        old: &Value,
        mut new: Value,
        status: bool,
        options: &WriteOptions,
    ) -> Option<RulesVerdict> {
        update::check_target(rt, namespace, name, &new, status).ok()?;
        update::check_precondition(rt, name, old, &new).ok()?;
        Self::prepare_update(rt, old, &mut new, status, options.applied);
        Self::judge_rules(rt, &new, Some(old))
    }

    /// What an update makes of `new` from `old` before it is validated: the status strategy,
    /// the server's fields carried over, the generation, the schema's defaults and pruning.
    fn prepare_update(
        rt: &ResourceType,
        old: &Value,
        new: &mut Value,
        status: bool,
        applied: bool,
    ) {
        update::status_strategy(rt, status, old, new);
        update::carry_system_fields(rt, old, new, applied);
        update::next_generation(rt, old, new);
        if let Some(schema) = &rt.schema {
            schema::apply_defaults(schema, new);
            schema::prune(schema, new);
        } else {
            registry::strategy(rt).default(new);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn update_locked(
        &self,
        state: &mut State,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        mut new: Value,
        status: bool,
        options: &WriteOptions,
        judged: Option<&RulesVerdict>,
    ) -> Result<Arc<Value>, ApiError> {
        update::check_target(rt, namespace, name, &new, status)?;
        let key = Key::new(rt, namespace, name);
        let old = state
            .storage
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        update::check_precondition(rt, name, &old, &new)?;
        Self::prepare_update(rt, &old, &mut new, status, options.applied);
        update::check_finalizers(rt, name, &old, &new)?;
        self.validate(rt, &new, name, Some(&old), judged)?;
        if !status {
            registry::strategy(rt)
                .prepare_for_update(&old, &mut new)
                .map_err(|causes| registry::invalid(rt, name, causes))?;
        }
        if !options.applied {
            managed::record_update(
                &old,
                &mut new,
                Schema::of(rt),
                &managed::Write {
                    manager: &options.manager,
                    api_version: &rt.api_version(),
                    subresource: status.then_some("status"),
                    time: &now_rfc3339(),
                },
            );
        }
        if *old == new {
            // Nothing changed: no new resourceVersion, no watch event (as kube-apiserver).
            return Ok(Self::served(rt, &old));
        }
        if options.dry_run {
            return Ok(Arc::new(new));
        }
        let held = registry::strategy(rt).deletion() == Deletion::AfterContents;
        // `ShouldDeleteDuringUpdate`: an update removing the last finalizer of an object marked
        // for deletion removes it — unless it is still in its grace period (a terminating Pod),
        // which only its kubelet's delete ends.
        let in_grace = old
            .at("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .is_some_and(|grace| grace > 0);
        if new.at("/metadata/deletionTimestamp").is_some()
            && !has_finalizers(&new)
            && !held
            && !in_grace
        {
            let stored = self.write(state, key.clone(), Write::Put(new))?;
            self.remove_locked(state, rt, &key)?;
            return Ok(Self::served(rt, &stored));
        }
        let stored = self.write(state, key, Write::Put(new))?;
        self.after_write(rt, &stored);
        Ok(Self::served(rt, &stored))
    }

    /// Patch an object: `apply` computes the patched object from the current one (or `None` when
    /// the object does not exist, for server-side apply's create).
    pub fn patch<F>(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        status: bool,
        options: impl Into<WriteOptions>,
        mut apply: F,
    ) -> Result<Arc<Value>, ApiError>
    where
        F: FnMut(Option<&Value>) -> Result<Option<Value>, ApiError>,
    {
        let options = options.into();
        let key = Key::new(rt, namespace, name);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let stored = self.lock().storage.objects().get(&key).cloned();
            let current = stored.as_ref().map(|o| Self::served(rt, o));
            let Some(current) = current else {
                return match apply(None)? {
                    Some(mut created) if !status => {
                        match meta_str(&created, "name") {
                            Some(body_name) if body_name != name => {
                                return Err(ApiError::bad_request(format!(
                                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                                )));
                            }
                            Some(_) => {}
                            None => {
                                metadata_mut(&mut created).insert("name".into(), json!(name));
                            }
                        }
                        self.create(rt, namespace, created, options)
                    }
                    _ => Err(ApiError::not_found(&rt.group, &rt.plural, name)),
                };
            };
            // The patch is computed without the store's lock (it can be expensive: a JSON patch
            // may copy megabytes), then written only if the object did not change meanwhile —
            // kube-apiserver's GuaranteedUpdate.
            let current_rv = meta_str(&current, "resourceVersion").map(str::to_owned);
            let mut patched = apply(Some(&current))?
                .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
            // A patch cannot change identity; a stale resourceVersion in the patch is a conflict,
            // a missing one means "whatever is current".
            let patched_rv = meta_str(&patched, "resourceVersion").map(str::to_owned);
            if patched_rv.is_none()
                && let Some(rv) = &current_rv
            {
                metadata_mut(&mut patched).insert("resourceVersion".into(), json!(rv));
            }
            // A patch that names no other version than the one it was applied to is retried on
            // a concurrent change, as kube-apiserver does (up to 5 times).
            let retriable = patched_rv.is_none() || patched_rv == current_rv;
            // The CEL rules judged without the lock too, on the object as it is stored.
            let judged = match &stored {
                Some(old) if Self::has_rules(rt) => {
                    self.judge_update(rt, namespace, name, old, patched.clone(), status, &options)
                }
                _ => None,
            };
            let mut state = self.lock();
            let written = self.update_locked(
                &mut state,
                rt,
                namespace,
                name,
                patched,
                status,
                &options,
                judged.as_ref(),
            );
            match written {
                Err(err) if err.code == 409 && retriable && attempt < MAX_PATCH_ATTEMPTS => {
                    continue;
                }
                result => return result,
            }
        }
    }
}

impl Store {
    /// Whether `object` is stored in `rt`'s version.
    pub(super) fn in_version(rt: &ResourceType, object: &Value) -> bool {
        object
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| rt.is_api_version(v))
    }

    /// The stored object at `rt`/`namespace`/`name` when it is stored in another version than
    /// `rt`'s and `rt` has a conversion webhook: what [`reencode`](Self::reencode) needs
    /// converted before a write in `rt`'s version.
    pub fn needs_reencoding(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<Value>> {
        rt.conversion.as_ref()?;
        let key = Key::new(rt, namespace, name);
        let state = self.lock();
        let object = state.storage.get(&key)?;
        (!Self::in_version(rt, object)).then(|| object.clone())
    }

    /// Store `converted` — the object at its key converted to another version — in place of the
    /// stored object, if that is still at `converted`'s resourceVersion: same resourceVersion,
    /// no watch event (the object did not change, only the version it is kept in). Returns
    /// whether it was replaced.
    pub fn reencode(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        converted: Value,
    ) -> Result<bool, ApiError> {
        let name = meta_str(&converted, "name").unwrap_or_default();
        let key = Key::new(rt, namespace, name);
        let mut state = self.lock();
        let current_rv = state
            .storage
            .get(&key)
            .and_then(|o| meta_str(o, "resourceVersion"));
        if current_rv.is_none() || current_rv != meta_str(&converted, "resourceVersion") {
            return Ok(false);
        }
        state.storage.rewrite(key, converted)?;
        Ok(true)
    }
}

/// Times a patch is applied again when the object changed while it was being computed
/// (kube-apiserver's `maxRetryWhenPatchConflicts`).
const MAX_PATCH_ATTEMPTS: u32 = 5;

/// Whether what `generation` tracks changed: everything but `metadata`, and but `status` when
/// the kind has a status subresource (compared in place: objects are large, copies are not free).
pub(super) fn spec_changed(rt: &ResourceType, old: &Value, new: &Value) -> bool {
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return old != new;
    };
    let tracked = |key: &&String| {
        key.as_str() != "metadata" && !(rt.status_subresource && key.as_str() == "status")
    };
    old.keys()
        .chain(new.keys())
        .filter(tracked)
        .any(|key| old.get(key) != new.get(key))
}

/// Kinds whose objects carry `metadata.generation`: those with a spec and a status subresource,
/// and every custom resource.
fn tracks_generation(rt: &ResourceType) -> bool {
    rt.status_subresource || rt.schema.is_some()
}

/// Random suffix for `generateName`, from the alphabet kube-apiserver uses.
fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..5]
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

/// `plural.group` (`deployments.apps`), or the plural for the core group, as kube-apiserver names
/// resources in messages.
fn qualified_plural(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        rt.plural.clone()
    } else {
        format!("{}.{}", rt.plural, rt.group)
    }
}
