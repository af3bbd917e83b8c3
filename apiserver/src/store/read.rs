//! Reads: get, list (with selectors and continue tokens) and watch (from the history or live).

use super::*;

impl Store {
    /// Get one object.
    pub fn get(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        let key = Key::new(rt, namespace, name);
        self.lock()
            .storage
            .objects()
            .get(&key)
            .map(|o| Self::served(rt, o))
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    /// Whether the object exists (without copying it, as [`get`](Self::get) does).
    pub fn contains(&self, rt: &ResourceType, namespace: Option<&str>, name: &str) -> bool {
        let key = Key::new(rt, namespace, name);
        self.lock().storage.objects().contains_key(&key)
    }

    /// Whether any object of `rt` exists (no copies: asked on every write, whether webhook
    /// configurations exist).
    pub fn has_any(&self, rt: &ResourceType) -> bool {
        let resource = rt.storage_key();
        let start = Key {
            resource,
            namespace: String::new(),
            name: String::new(),
        };
        let state = self.lock();
        state
            .storage
            .objects()
            .range(&start..)
            .next()
            .is_some_and(|(k, _)| k.resource == start.resource)
    }

    /// Every object of `rt` (in `namespace`, when given), shared, in key order: the in-process
    /// read the built-in controllers use (no selectors, no pages, no copies).
    pub fn objects(&self, rt: &ResourceType, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let resource = rt.storage_key();
        let start = Key {
            resource: resource.clone(),
            namespace: namespace.unwrap_or_default().to_owned(),
            name: String::new(),
        };
        let state = self.lock();
        state
            .storage
            .objects()
            .range(start..)
            .take_while(|(k, _)| {
                k.resource == resource && namespace.is_none_or(|ns| k.namespace == ns)
            })
            .map(|(_, o)| Self::served(rt, o))
            .collect()
    }

    /// Every change from now on, of every resource (the in-process feed the built-in
    /// controllers follow; a receiver that falls behind gets `Lagged` and must re-read).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.feed.subscribe()
    }

    /// List objects, optionally one page of `limit` after `continue_token`.
    pub fn list(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        let state = self.lock();
        let resource = rt.storage_key();
        // Every page reports the first page's resourceVersion, so a watch from it replays what
        // changed while the pages were read; once that version is compacted the list must restart.
        let (start, list_rv) = match continue_token {
            Some(token) => {
                let (key, rv) = decode_continue(token)?;
                if rv < state.storage.compacted() {
                    return Err(ApiError::gone(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ));
                }
                (Some(key), rv)
            }
            None => (None, state.storage.rv()),
        };
        // Keys sort by resource, namespace and name: the scan starts at the first key the list
        // can hold (or after the page before) and stops at the first it cannot, so a list costs
        // what it reads, not what the store holds.
        use std::ops::Bound;
        let from = match start {
            Some(after) => Bound::Excluded(after),
            None => Bound::Included(Key {
                resource: resource.clone(),
                namespace: namespace.unwrap_or_default().to_owned(),
                name: String::new(),
            }),
        };
        let mut matching = state
            .storage
            .objects()
            .range((from, Bound::Unbounded))
            .take_while(|(k, _)| {
                k.resource == resource && namespace.is_none_or(|ns| k.namespace == ns)
            })
            .filter(|(_, o)| labels.matches_object(o) && fields.matches_object(o));
        let mut items = Vec::new();
        let mut last = None;
        for (key, object) in matching.by_ref() {
            if limit.is_some_and(|l| l > 0 && items.len() >= l) {
                // One more exists: there is a next page.
                let remaining = 1 + matching.count();
                let token = last.map(|k: &Key| encode_continue(k, list_rv));
                return Ok(ListPage {
                    items,
                    resource_version: list_rv,
                    continue_token: token,
                    remaining: Some(remaining),
                });
            }
            items.push(Self::served(rt, object));
            last = Some(key);
        }
        Ok(ListPage {
            items,
            resource_version: list_rv,
            continue_token: None,
            remaining: None,
        })
    }

    /// Start a watch of `rt`'s objects (filtering by namespace and selectors is the caller's).
    pub fn watch(&self, rt: &ResourceType, from: WatchFrom) -> Result<WatchStart, ApiError> {
        let resource = rt.storage_key();
        let state = self.lock();
        let backlog = match from {
            WatchFrom::Now => state
                .storage
                .objects()
                .iter()
                .filter(|(k, _)| k.resource == resource)
                .map(|(k, o)| {
                    let rv = meta_str(o, "resourceVersion")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(state.storage.rv());
                    Arc::new(Change::new(
                        rv,
                        ChangeType::Added,
                        k.clone(),
                        o.clone(),
                        None,
                    ))
                })
                .collect(),
            WatchFrom::After(rv) => {
                if rv > state.storage.rv() {
                    return Err(ApiError::too_large_resource_version(rv, state.storage.rv()));
                }
                if rv < state.storage.compacted() {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {rv} ({})",
                        state.storage.compacted() + 1
                    )));
                }
                state
                    .storage
                    .history()
                    .iter()
                    .filter(|c| c.rv > rv && c.key.resource == resource)
                    .cloned()
                    .collect()
            }
        };
        *self
            .watches_started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(resource)
            .or_insert(0) += 1;
        Ok(WatchStart {
            backlog,
            feed: self.feed.subscribe(),
            resource_version: state.storage.rv(),
        })
    }
}

/// A continue token: the list's resourceVersion and the last key returned.
fn encode_continue(key: &Key, rv: u64) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{rv}\0{}", key.encode()))
}

fn decode_continue(token: &str) -> Result<(Key, u64), ApiError> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| {
            let (rv, key) = text.split_once('\0')?;
            Some((Key::decode(key)?, rv.parse().ok()?))
        })
        .ok_or_else(|| ApiError::bad_request(format!("invalid continue token {token:?}")))
}
