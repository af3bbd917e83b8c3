//! [`ApiClient`]: the host's direct line to the Kubernetes API server, over `kube`.
//!
//! Objects go in and out as JSON values, untouched (no round trip through typed structs that
//! could drop fields). Discovery maps each kind to its resource and scope once; a kind the server
//! does not serve is looked up again on the next call, so a CRD created later is found.

pub mod events;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use krec_core::ErrorKind;
use kube::Client;
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;
use serde_json::{Value, json};

use krec_core::{
    CallError, EventRecord, Gvk, ListOptions, ObjectHead, PatchType, Preconditions, WriteKind,
};

/// A kind as the API server serves it.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The kind's resource (plural, apiVersion).
    pub resource: ApiResource,
    /// Whether objects of the kind live in namespaces.
    pub namespaced: bool,
}

/// A name or namespace as one URL path segment. Names a guest controls must not reach another
/// path (`x/status` would bypass the `patch-status` permission) or add a query.
fn segment(what: &str, text: &str) -> Result<String, CallError> {
    if text.is_empty() || text == "." || text == ".." || text.contains('/') || text.contains('%') {
        return Err(CallError::Invalid(format!(
            "{what} {text:?} is not a valid object {what}"
        )));
    }
    Ok(text
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' | b'@' => {
                char::from(b).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect())
}

impl Resolved {
    /// The collection URL: `/api/v1/namespaces/{ns}/pods`, `/apis/apps/v1/replicasets`, ...
    ///
    /// # Errors
    ///
    /// `invalid` for a namespace that is not one path segment.
    pub fn collection_url(&self, namespace: Option<&str>) -> Result<String, CallError> {
        let r = &self.resource;
        let prefix = if r.group.is_empty() {
            format!("/api/{}", r.version)
        } else {
            format!("/apis/{}/{}", r.group, r.version)
        };
        Ok(match namespace.filter(|_| self.namespaced) {
            Some(ns) => format!(
                "{prefix}/namespaces/{}/{}",
                segment("namespace", ns)?,
                r.plural
            ),
            None => format!("{prefix}/{}", r.plural),
        })
    }

    fn object_url(
        &self,
        namespace: Option<&str>,
        name: &str,
        status: bool,
    ) -> Result<String, CallError> {
        let sub = if status { "/status" } else { "" };
        Ok(format!(
            "{}/{}{sub}",
            self.collection_url(namespace)?,
            segment("name", name)?
        ))
    }
}

/// Map a `kube` error to the WIT error the guest sees, keeping the API server's message.
pub fn access_error(err: kube::Error) -> CallError {
    match err {
        kube::Error::Api(status) => {
            let message = if status.message.is_empty() {
                status.reason.clone()
            } else {
                status.message.clone()
            };
            let kind = ErrorKind::of(status.code, &status.reason);
            CallError::of(kind, status.code, &status.reason, message)
        }
        kube::Error::SerdeError(e) => CallError::Other(format!("decoding the response: {e}")),
        other => CallError::Unavailable(other.to_string()),
    }
}

fn percent(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// A `kube` client with a discovery cache and JSON-in, JSON-out calls.
pub struct ApiClient {
    client: Client,
    resolved: RwLock<HashMap<Gvk, Resolved>>,
    /// Aggregates and rate-limits the Events recorded through this client.
    events: std::sync::Mutex<events::EventRecorder>,
    /// Every write is a server-side dry run (`dryRun=All`): validated, admitted and answered,
    /// never stored.
    dry_run: bool,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient").finish_non_exhaustive()
    }
}

impl ApiClient {
    /// Wrap a client.
    pub fn new(client: Client) -> Arc<Self> {
        Self::with_dry_run(client, false)
    }

    /// A client on the same connection whose every write is a server-side dry run
    /// (`dryRun=All`): what a shadow version's writes go through (see [`crate::rollout`]).
    pub fn dry_run(&self) -> Arc<Self> {
        Self::with_dry_run(self.client.clone(), true)
    }

    fn with_dry_run(client: Client, dry_run: bool) -> Arc<Self> {
        Arc::new_cyclic(|this| ApiClient {
            client,
            resolved: RwLock::new(HashMap::new()),
            events: std::sync::Mutex::new(events::EventRecorder::new(
                Arc::new(ApiEvents(this.clone())),
                events::Limits::default(),
            )),
            dry_run,
        })
    }

    /// The query of a write as `field_manager` (and a dry run's flag).
    fn write_query(&self, field_manager: &str) -> String {
        let dry_run = if self.dry_run { "&dryRun=All" } else { "" };
        format!("?fieldManager={}{dry_run}", percent(field_manager))
    }

    fn events_slot(&self) -> std::sync::MutexGuard<'_, events::EventRecorder> {
        // A recorder is replaced whole: usable after a panic elsewhere.
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The underlying client (for watches).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The resource and scope of `gvk`, from discovery (cached once found).
    ///
    /// # Errors
    ///
    /// `not-found` when the server does not serve the kind (a missing CRD); `unavailable` when
    /// discovery fails.
    pub async fn resolve(&self, gvk: &Gvk) -> Result<Resolved, CallError> {
        if let Some(found) = self
            .resolved
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(gvk)
        {
            return Ok(found.clone());
        }
        let query = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
        let (resource, caps) = kube::discovery::pinned_kind(&self.client, &query)
            .await
            .map_err(|err| match err {
                kube::Error::Discovery(_) => {
                    CallError::NotFound(format!("the API server does not serve {gvk}"))
                }
                kube::Error::Api(status) if status.code == 404 => {
                    CallError::NotFound(format!("the API server does not serve {gvk}"))
                }
                other => access_error(other),
            })?;
        let found = Resolved {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
        };
        self.resolved
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(gvk.clone(), found.clone());
        Ok(found)
    }

    /// Whether `gvk`'s objects live in namespaces, from discovery. Asked on every guest call
    /// (permission checks), so a kind already found is answered without copying its resource.
    ///
    /// # Errors
    ///
    /// As [`resolve`](Self::resolve).
    pub async fn namespaced(&self, gvk: &Gvk) -> Result<bool, CallError> {
        let known = self
            .resolved
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(gvk)
            .map(|r| r.namespaced);
        match known {
            Some(namespaced) => Ok(namespaced),
            None => Ok(self.resolve(gvk).await?.namespaced),
        }
    }

    async fn send(
        &self,
        builder: http::request::Builder,
        body: Vec<u8>,
    ) -> Result<Value, CallError> {
        let request = crate::telemetry::with_traceparent(builder)
            .body(body)
            .map_err(|e| CallError::Invalid(format!("building the request: {e}")))?;
        self.client
            .request::<Value>(request)
            .await
            .map_err(access_error)
    }

    fn encode(value: &Value) -> Result<Vec<u8>, CallError> {
        serde_json::to_vec(value).map_err(|e| CallError::Other(format!("encoding: {e}")))
    }

    /// GET one object.
    pub async fn get(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, CallError> {
        let resolved = self.resolve(gvk).await?;
        let url = resolved.object_url(namespace, name, false)?;
        self.send(http::Request::get(url), Vec::new()).await
    }

    /// LIST objects (every page), each with `apiVersion` and `kind` set.
    pub async fn list(&self, gvk: &Gvk, options: &ListOptions) -> Result<Vec<Value>, CallError> {
        let resolved = self.resolve(gvk).await?;
        let base = resolved.collection_url(options.namespace.as_deref())?;
        let mut items = Vec::new();
        let mut continue_token: Option<String> = None;
        loop {
            let mut query = vec!["limit=500".to_owned()];
            if let Some(s) = &options.label_selector {
                query.push(format!("labelSelector={}", percent(s)));
            }
            if let Some(s) = &options.field_selector {
                query.push(format!("fieldSelector={}", percent(s)));
            }
            if let Some(c) = &continue_token {
                query.push(format!("continue={}", percent(c)));
            }
            let url = format!("{base}?{}", query.join("&"));
            let mut page = self.send(http::Request::get(url), Vec::new()).await?;
            if let Some(Value::Array(page_items)) = page.get_mut("items").map(Value::take) {
                for mut item in page_items {
                    if let Some(map) = item.as_object_mut() {
                        map.insert("apiVersion".into(), json!(gvk.api_version()));
                        map.insert("kind".into(), json!(gvk.kind));
                    }
                    items.push(item);
                }
            }
            continue_token = page
                .pointer("/metadata/continue")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
                .map(str::to_owned);
            if continue_token.is_none() {
                return Ok(items);
            }
        }
    }

    /// POST a new object as `field_manager`.
    pub async fn create(&self, object: &Value, field_manager: &str) -> Result<Value, CallError> {
        self.write(WriteKind::Create, object, field_manager).await
    }

    /// PUT an object (or its status) as `field_manager`.
    pub async fn update(
        &self,
        object: &Value,
        status: bool,
        field_manager: &str,
    ) -> Result<Value, CallError> {
        let kind = if status {
            WriteKind::UpdateStatus
        } else {
            WriteKind::Update
        };
        self.write(kind, object, field_manager).await
    }

    /// [`write_text`](Self::write_text) for an object given as a value.
    async fn write(
        &self,
        kind: WriteKind,
        object: &Value,
        field_manager: &str,
    ) -> Result<Value, CallError> {
        let head = ObjectHead {
            gvk: Gvk::of_object(object)?,
            namespace: meta_str(object, "namespace").map(str::to_owned),
            name: meta_str(object, "name").map(str::to_owned),
        };
        let json = String::from_utf8(Self::encode(object)?)
            .map_err(|e| CallError::Other(format!("encoding: {e}")))?;
        let text = self.write_text(kind, &head, &json, field_manager).await?;
        serde_json::from_str(&text)
            .map_err(|e| CallError::Other(format!("decoding the response: {e}")))
    }

    /// POST or PUT (an object or its status) an object given as JSON text, as `field_manager`;
    /// the text is sent as it is and the stored object returned as the server's text.
    pub async fn write_text(
        &self,
        kind: WriteKind,
        head: &ObjectHead,
        json: &str,
        field_manager: &str,
    ) -> Result<String, CallError> {
        let resolved = self.resolve(&head.gvk).await?;
        let namespace = head.namespace.as_deref();
        let builder = match kind {
            WriteKind::Create => http::Request::post(format!(
                "{}{}",
                resolved.collection_url(namespace)?,
                self.write_query(field_manager)
            )),
            WriteKind::Update | WriteKind::UpdateStatus => {
                let name = head
                    .name
                    .as_deref()
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| CallError::Invalid("object has no metadata.name".into()))?;
                http::Request::put(format!(
                    "{}{}",
                    resolved.object_url(namespace, name, kind == WriteKind::UpdateStatus)?,
                    self.write_query(field_manager)
                ))
            }
        };
        let request = crate::telemetry::with_traceparent(builder)
            .header("content-type", "application/json")
            .body(json.as_bytes().to_vec())
            .map_err(|e| CallError::Invalid(format!("building the request: {e}")))?;
        let text = self
            .client
            .request_text(request)
            .await
            .map_err(access_error)?;
        // The guest gets the text as it is: it must at least be JSON.
        serde_json::from_str::<serde::de::IgnoredAny>(&text).map_err(|e| {
            CallError::Other(format!("the API server answered with invalid JSON: {e}"))
        })?;
        Ok(text)
    }

    /// PATCH an object (or its status) as `field_manager`.
    #[allow(clippy::too_many_arguments)]
    pub async fn patch(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        body: &Value,
        status: bool,
        field_manager: &str,
    ) -> Result<Value, CallError> {
        let resolved = self.resolve(gvk).await?;
        let content_type = match patch_type {
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Json => "application/json-patch+json",
            PatchType::Strategic => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        };
        // Server-side apply takes ownership of conflicting fields: the guest is the controller
        // of what it applies, as controller-runtime's `client.ForceOwnership` does.
        let force = if patch_type == PatchType::Apply {
            "&force=true"
        } else {
            ""
        };
        let url = format!(
            "{}{}{force}",
            resolved.object_url(namespace, name, status)?,
            self.write_query(field_manager)
        );
        let builder = http::Request::patch(url).header("content-type", content_type);
        self.send(builder, Self::encode(body)?).await
    }

    /// DELETE an object, in the background (dependents are garbage-collected); the
    /// `resourceVersion` of the answer (the deletion's, or the object's marked for deletion).
    pub async fn delete(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        preconditions: Option<&Preconditions>,
    ) -> Result<Option<String>, CallError> {
        let resolved = self.resolve(gvk).await?;
        let mut options = json!({"apiVersion": "v1", "kind": "DeleteOptions",
            "propagationPolicy": "Background"});
        if let Some(p) = preconditions {
            options["preconditions"] = json!({"uid": p.uid, "resourceVersion": p.resource_version});
        }
        let mut url = resolved.object_url(namespace, name, false)?;
        if self.dry_run {
            url.push_str("?dryRun=All");
        }
        let builder = http::Request::delete(url).header("content-type", "application/json");
        let answer = self.send(builder, Self::encode(&options)?).await?;
        // The deleted object (its last state at the deletion's version), or the object marked
        // for deletion; a `Status` carries none.
        Ok(answer
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .filter(|_| answer.get("kind").and_then(Value::as_str) != Some("Status"))
            .map(str::to_owned))
    }

    /// Record an Event, aggregated with its repeats and rate limited per reporter and object
    /// (see [`events`]).
    ///
    /// # Errors
    ///
    /// The API server's refusal (the Event's count stays recorded for its next write).
    pub async fn record_event(&self, event: &EventRecord) -> Result<(), CallError> {
        let recorder = self.events_slot().clone();
        recorder.record(event).await.map(drop)
    }

    /// Use `limits` for the Events recorded from now on (a new recorder: repeats seen so far
    /// are forgotten).
    pub fn set_event_limits(self: &Arc<Self>, limits: events::Limits) {
        let writer = Arc::new(ApiEvents(Arc::downgrade(self)));
        *self.events_slot() = events::EventRecorder::new(writer, limits);
    }
}

/// Writes Events through the API client that owns the recorder (held weakly: the client owns
/// the recorder).
struct ApiEvents(std::sync::Weak<ApiClient>);

impl ApiEvents {
    fn client(&self) -> Result<Arc<ApiClient>, CallError> {
        self.0
            .upgrade()
            .ok_or_else(|| CallError::Unavailable("the API client is gone".into()))
    }
}

#[async_trait::async_trait]
impl events::EventWriter for ApiEvents {
    async fn create_event(&self, event: &Value, field_manager: &str) -> Result<Value, CallError> {
        self.client()?.create(event, field_manager).await
    }

    async fn patch_event(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
        field_manager: &str,
    ) -> Result<Value, CallError> {
        self.client()?
            .patch(
                &Gvk::new("", "v1", "Event"),
                Some(namespace),
                name,
                PatchType::Merge,
                patch,
                false,
                field_manager,
            )
            .await
    }
}

fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_should_stay_one_path_segment() {
        let resolved = Resolved {
            resource: ApiResource {
                group: "samplecontroller.k8s.io".into(),
                version: "v1alpha1".into(),
                api_version: "samplecontroller.k8s.io/v1alpha1".into(),
                kind: "Foo".into(),
                plural: "foos".into(),
            },
            namespaced: true,
        };
        assert_eq!(
            resolved.object_url(Some("default"), "example-foo", true),
            Ok(
                "/apis/samplecontroller.k8s.io/v1alpha1/namespaces/default/foos/example-foo/status"
                    .into()
            )
        );
        for bad in ["x/status", "..", ".", "", "a%2Fb"] {
            assert!(
                matches!(
                    resolved.object_url(Some("default"), bad, false),
                    Err(CallError::Invalid(_))
                ),
                "{bad:?}"
            );
        }
        assert!(
            resolved
                .object_url(Some("../kube-system"), "x", false)
                .is_err()
        );
        assert_eq!(
            resolved.object_url(Some("default"), "a?b=c#d", false),
            Ok(
                "/apis/samplecontroller.k8s.io/v1alpha1/namespaces/default/foos/a%3Fb%3Dc%23d"
                    .into()
            )
        );
    }
}
