//! Watches: the changes of a resource from a resourceVersion, with bookmarks, `410 Gone` when
//! the history no longer reaches back, and an end when the server stops or the CRD goes.

use super::*;

/// How long a watch from a resourceVersion the store has not reached waits for it (as
/// kube-apiserver's watch cache, 3 s) before failing.
pub(super) const FRESHNESS_WAIT: Duration = Duration::from_secs(3);

pub(super) async fn watch(
    server: Arc<ApiServer>,
    target: Target,
    params: &Params,
    rendering: Rendering,
    fault: Option<crate::faults::Fault>,
    held: Option<watchers::Held>,
) -> Result<Response, ApiError> {
    use crate::faults::Fault;
    if fault == Some(Fault::ExpireWatch) {
        let err = ApiError::gone("too old resource version (injected fault)");
        let line = watch_line("ERROR", &err.status());
        return Ok(stream_response(futures::stream::iter([line])));
    }
    let (labels, fields) = params.selectors(&target.rt)?;
    let from = match params.get("resourceVersion") {
        None | Some("0") => WatchFrom::Now,
        Some(rv) => WatchFrom::After(
            rv.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?,
        ),
    };
    let bookmarks = params.flag("allowWatchBookmarks");
    let timeout = match params.get("timeoutSeconds") {
        Some(t) => match t
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?
        {
            0 => DEFAULT_WATCH_TIMEOUT,
            seconds => Duration::from_secs(seconds),
        },
        None => DEFAULT_WATCH_TIMEOUT,
    };
    let timeout = match fault {
        Some(Fault::EndWatch(after)) => timeout.min(after),
        _ => timeout,
    };
    // Streaming lists (WatchList): the current objects as ADDED events, then a BOOKMARK marking
    // their end.
    let initial_events = params.flag("sendInitialEvents");
    if initial_events && from != WatchFrom::Now {
        return Err(ApiError::invalid(
            "",
            "",
            "",
            vec![(
                "sendInitialEvents".into(),
                "Forbidden: sendInitialEvents is supported with resourceVersion \"\" or \"0\" only"
                    .into(),
            )],
        ));
    }
    let include = params.get("includeObject").map(str::to_owned);
    // A resourceVersion the store has not reached yet: wait for it a while, as kube-apiserver's
    // watch cache does, then answer 504 "Too large resource version".
    let waiting = tokio::time::Instant::now() + FRESHNESS_WAIT;
    let mut started = server.store.watch(&target.rt, from);
    while matches!(&started, Err(err) if err.code == 504) && tokio::time::Instant::now() < waiting {
        tokio::time::sleep(Duration::from_millis(50)).await;
        started = server.store.watch(&target.rt, from);
    }
    let start = match started {
        Ok(start) => start,
        // kube-apiserver reports an expired watch as an ERROR event in a 200 stream.
        Err(err) if err.code == 410 => {
            let line = watch_line("ERROR", &err.status());
            return Ok(stream_response(futures::stream::iter([line])));
        }
        Err(err) => return Err(err),
    };
    // Each line with when it was made, for a `slow-watch` fault to hold it back by.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(tokio::time::Instant, Bytes)>(64);
    let lag = match fault {
        Some(Fault::SlowWatch(delay)) => Some(delay),
        _ => None,
    };
    let rt = target.rt.clone();
    let namespace = target.namespace.clone();
    let open = server
        .metrics
        .watch_opened(&rt.group, &rt.version, &rt.plural, namespace.is_some());
    tokio::spawn(async move {
        // Counted as open (and against its user) until the stream ends.
        let _open = (open, held);
        let params = Params(
            include
                .map(|i| HashMap::from([("includeObject".to_owned(), i)]))
                .unwrap_or_default(),
        );
        let tx = tx;
        // Bookmarks are objects of the kind the watch sends (kube-apiserver transforms them as
        // it transforms events).
        let (bookmark_kind, bookmark_api_version) = match rendering {
            Rendering::Metadata => (
                "PartialObjectMetadata".to_owned(),
                "meta.k8s.io/v1".to_owned(),
            ),
            _ => (rt.kind.clone(), rt.api_version()),
        };
        let send = async |line: Bytes| tx.send((tokio::time::Instant::now(), line)).await;
        let mut feed = start.feed;
        let mut last_rv = start.resource_version;
        let render = async |kind: &str, change: &crate::store::Change| -> Result<Bytes, Bytes> {
            let served = Store::served(&rt, &change.object);
            let served = conversion::one_to_version(&rt, served)
                .await
                .map_err(|err| watch_line("ERROR", &err.status()))?;
            Ok(if rendering != Rendering::Objects {
                watch_line(kind, &render_one(&rt, served, rendering, &params))
            } else if Arc::ptr_eq(&served, &change.object) {
                // Served as stored: every watch shares one encoding of the object.
                watch_line_encoded(kind, change.object_json())
            } else {
                watch_line(kind, &served)
            })
        };
        // A CRD change that changes this type (its schema, its conversion) ends the watch, as
        // kube-apiserver ends the watches of the storage it replaces: clients watch again.
        let registry = server.store.registry();
        let mut generation = registry.generation();
        let mut type_changed = || {
            let now = registry.generation();
            if now == generation {
                return false;
            }
            generation = now;
            registry
                .by_plural(&rt.group, &rt.version, &rt.plural)
                .as_ref()
                != Some(&rt)
        };
        let matches = |o: &Value| labels.matches_object(o) && fields.matches_object(o);
        let in_scope = |ns: &str| namespace.as_deref().is_none_or(|n| n == ns);
        for change in start.backlog {
            if in_scope(&change.key.namespace)
                && let Some(kind) = event_kind(&change, &matches)
            {
                let (line, failed) = match render(kind, &change).await {
                    Ok(line) => (line, false),
                    Err(error) => (error, true),
                };
                if send(line).await.is_err() || failed {
                    return;
                }
            }
        }
        if initial_events {
            let end = json!({"kind": bookmark_kind, "apiVersion": bookmark_api_version, "metadata": {
                "resourceVersion": last_rv.to_string(),
                "annotations": {"k8s.io/initial-events-end": "true"}}});
            if send(watch_line("BOOKMARK", &end)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut stopped = server.stopped.clone();
        let mut bookmark = tokio::time::interval(server.bookmark_interval);
        bookmark.tick().await;
        // Only a CRD's change changes a served type: built-in kinds need no timer.
        let custom = rt.schema.is_some();
        let mut registry_check = tokio::time::interval(REGISTRY_CHECK);
        registry_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let line = tokio::select! {
                _ = &mut deadline => return,
                _ = stopped.changed() => return,
                // The client went away: stop now rather than at the next event.
                _ = tx.closed() => return,
                _ = bookmark.tick(), if bookmarks => {
                    // Only what this watch has already passed on: a bookmark must never run
                    // ahead of events still queued for it.
                    watch_line("BOOKMARK", &json!({"kind": bookmark_kind,
                        "apiVersion": bookmark_api_version,
                        "metadata": {"resourceVersion": last_rv.to_string()}}))
                }
                // The registry changes just after the CRD's own event: look again a moment later.
                _ = registry_check.tick(), if custom => {
                    if type_changed() {
                        return;
                    }
                    continue;
                }
                received = feed.recv() => match received {
                    Ok(change) => {
                        last_rv = change.rv;
                        if type_changed() {
                            return;
                        }
                        if change.key.resource != rt.storage_key() || !in_scope(&change.key.namespace) {
                            continue;
                        }
                        match event_kind(&change, &matches) {
                            Some(kind) => match render(kind, &change).await {
                                Ok(line) => line,
                                Err(error) => {
                                    let _ = send(error).await;
                                    return;
                                }
                            },
                            None => continue,
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        let err = ApiError::gone("the watch fell too far behind; relist");
                        let _ = send(watch_line("ERROR", &err.status())).await;
                        return;
                    }
                    Err(RecvError::Closed) => return,
                },
            };
            if send(line).await.is_err() {
                return; // the client went away
            }
        }
    });
    let lines =
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).then(move |(made, line)| async move {
            if let Some(lag) = lag {
                tokio::time::sleep_until(made + lag).await;
            }
            line
        });
    Ok(stream_response(lines))
}

/// How often a watch of a custom resource checks whether its CRD changed (beyond the check at
/// every change the store makes).
pub(super) const REGISTRY_CHECK: Duration = Duration::from_secs(1);

/// ADDED/MODIFIED/DELETED for a change as a selector-filtered watch sees it: an object that
/// starts matching is ADDED, one that stops matching is DELETED.
pub(super) fn event_kind(
    change: &crate::store::Change,
    matches: &impl Fn(&Value) -> bool,
) -> Option<&'static str> {
    let now = matches(&change.object);
    match change.change {
        ChangeType::Added => now.then_some("ADDED"),
        ChangeType::Deleted => now.then_some("DELETED"),
        ChangeType::Modified => {
            let before = change.old.as_deref().is_some_and(matches);
            match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            }
        }
    }
}

pub(super) fn watch_line(kind: &str, object: &Value) -> Bytes {
    watch_line_encoded(kind, &krec_core::json::object_to_vec(object))
}

/// A watch event line around an object already encoded as JSON.
pub(super) fn watch_line_encoded(kind: &str, object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object.len() + kind.len() + 24);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

pub(super) fn stream_response(
    stream: impl futures::Stream<Item = Bytes> + Send + 'static,
) -> Response {
    let body = Body::from_stream(stream.map(Ok::<_, Infallible>));
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}
