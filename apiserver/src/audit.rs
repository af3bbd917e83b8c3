//! The audit log: one `audit.k8s.io/v1` `Event` per write request, at level `Metadata` and stage
//! `ResponseComplete`, as kube-apiserver's `--audit-log-path` writes them under a policy that
//! logs every create, update, patch and delete (reads and watches are not logged).
//!
//! Each event names the request (`verb`, `requestURI`, `objectRef`), the client (`userAgent`,
//! `sourceIPs`), the answer (`responseStatus.code`) and when it was received and answered
//! (`requestReceivedTimestamp`, `stageTimestamp`, microseconds). Events are kept in memory
//! (the newest [`KEPT`]) for tests to read, and appended to a file as JSON lines when one is
//! given. `user` is the authenticated user (empty for a request refused with 401), and
//! `impersonatedUser` whom it acted as.

use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{Value, json};

/// How many events are kept in memory (the oldest are dropped first).
pub const KEPT: usize = 200_000;

/// Where write requests are recorded. See the [module docs](self).
#[derive(Debug, Default)]
pub struct AuditLog {
    events: Mutex<std::collections::VecDeque<Value>>,
    file: Option<Mutex<std::io::LineWriter<std::fs::File>>>,
}

/// One write request, as [`AuditLog::record`] takes it.
#[derive(Debug)]
pub struct Request<'a> {
    /// The HTTP method.
    pub method: &'a str,
    /// The path and query.
    pub uri: &'a str,
    /// The `User-Agent` header.
    pub user_agent: &'a str,
    /// Who made it; `None` when authentication failed.
    pub user: Option<&'a crate::authentication::UserInfo>,
    /// Whom it was made as (`Impersonate-User`), if anyone.
    pub impersonated: Option<&'a crate::authentication::UserInfo>,
    /// When the request arrived.
    pub received: jiff::Timestamp,
    /// The response's status code.
    pub code: u16,
    /// Annotations admission added (admission policies' audit annotations).
    pub annotations: &'a [(String, String)],
}

/// Audit annotations a response carries to its request's event (in its extensions).
#[derive(Clone, Debug, Default)]
pub struct Annotations(pub Vec<(String, String)>);

impl AuditLog {
    /// A log kept in memory only.
    pub fn in_memory() -> Self {
        AuditLog::default()
    }

    /// A log kept in memory and appended to `path` (created if missing).
    ///
    /// # Errors
    ///
    /// When the file cannot be opened for appending.
    pub fn to_file(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(AuditLog {
            events: Mutex::default(),
            file: Some(Mutex::new(std::io::LineWriter::new(file))),
        })
    }

    /// Record `request` if it is a write (POST, PUT, PATCH, DELETE on a resource path).
    pub fn record(&self, request: &Request<'_>) {
        let verb = match request.method {
            "POST" => "create",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => return,
        };
        let path = request.uri.split('?').next().unwrap_or_default();
        let Some(object) = object_ref(path) else {
            return;
        };
        let verb = if verb == "delete" && object.get("name").is_none() {
            "deletecollection"
        } else {
            verb
        };
        let event = json!({
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": "Metadata",
            "auditID": uuid::Uuid::new_v4().to_string(),
            "stage": "ResponseComplete",
            "requestURI": request.uri,
            "verb": verb,
            "user": request.user.map_or_else(|| json!({}), |user| json!({"username": user.username, "groups": user.groups})),
            "sourceIPs": ["127.0.0.1"],
            "userAgent": request.user_agent,
            "objectRef": object,
            "responseStatus": {"metadata": {}, "code": request.code},
            "requestReceivedTimestamp": micro(request.received),
            "stageTimestamp": micro(jiff::Timestamp::now()),
        });
        let mut event = event;
        if let Some(user) = request.impersonated {
            event["impersonatedUser"] = json!({"username": user.username, "groups": user.groups});
        }
        if !request.annotations.is_empty() {
            event["annotations"] = request
                .annotations
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        if let Some(file) = &self.file {
            let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(err) = writeln!(file, "{event}") {
                tracing::warn!("writing the audit log: {err}");
            }
        }
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        if events.len() == KEPT {
            events.pop_front();
        }
        events.push_back(event);
    }

    /// The events kept, oldest first.
    pub fn events(&self) -> Vec<Value> {
        let events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        events.iter().cloned().collect()
    }
}

fn micro(at: jiff::Timestamp) -> String {
    format!("{at:.6}")
}

/// The `objectRef` of a resource path: `/api/v1/namespaces/ns/pods/name/status`,
/// `/apis/group/version/plural`, …; `None` for other paths.
fn object_ref(path: &str) -> Option<Value> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", namespace, rest @ ..] if !rest.is_empty() => (Some(*namespace), rest),
        _ => (None, rest),
    };
    let mut object = serde_json::Map::new();
    match rest {
        [resource, tail @ ..] if !resource.is_empty() => {
            object.insert("resource".into(), json!(resource));
            if let Some(name) = tail.first() {
                object.insert("name".into(), json!(name));
            }
            if let Some(subresource) = tail.get(1) {
                object.insert("subresource".into(), json!(subresource));
            }
        }
        _ => return None,
    }
    if let Some(namespace) = namespace {
        object.insert("namespace".into(), json!(namespace));
    }
    object.insert("apiGroup".into(), json!(group));
    object.insert("apiVersion".into(), json!(version));
    Some(Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    static ADMIN: std::sync::LazyLock<crate::authentication::UserInfo> =
        std::sync::LazyLock::new(crate::authentication::UserInfo::admin);

    fn request<'a>(method: &'a str, uri: &'a str) -> Request<'a> {
        Request {
            method,
            uri,
            user_agent: "kubectl/v1.34.0",
            user: Some(&ADMIN),
            impersonated: None,
            received: jiff::Timestamp::now(),
            code: 201,
            annotations: &[],
        }
    }

    #[test]
    fn writes_should_be_recorded_with_their_object_and_client() {
        let log = AuditLog::in_memory();
        log.record(&request(
            "POST",
            "/api/v1/namespaces/demo/configmaps?fieldManager=kubectl-create",
        ));
        log.record(&request(
            "PATCH",
            "/apis/apps/v1/namespaces/demo/deployments/web/status",
        ));
        log.record(&request("DELETE", "/api/v1/namespaces/demo/pods"));
        log.record(&request("PUT", "/api/v1/namespaces/demo"));
        log.record(&request("GET", "/api/v1/namespaces/demo/configmaps"));
        log.record(&request("POST", "/version"));
        let events = log.events();
        assert_eq!(
            events.len(),
            4,
            "reads and non-resource paths are not logged"
        );
        assert_eq!(events[0]["verb"], "create");
        assert_eq!(
            events[0]["objectRef"],
            json!({"resource": "configmaps", "namespace": "demo", "apiGroup": "", "apiVersion": "v1"})
        );
        assert_eq!(events[0]["user"]["username"], "krec");
        assert!(events[0].get("impersonatedUser").is_none());
        let reader = crate::authentication::UserInfo {
            username: "system:serviceaccount:demo:reader".into(),
            groups: vec!["system:serviceaccounts".into()],
            ..Default::default()
        };
        log.record(&Request {
            impersonated: Some(&reader),
            annotations: &[("policy/key".into(), "value".into())],
            ..request("DELETE", "/api/v1/namespaces/demo/pods/p")
        });
        let last = log.events().pop().expect("recorded");
        assert_eq!(
            last["impersonatedUser"],
            json!({"username": "system:serviceaccount:demo:reader", "groups": ["system:serviceaccounts"]})
        );
        assert_eq!(last["annotations"], json!({"policy/key": "value"}));
        assert_eq!(events[0]["userAgent"], "kubectl/v1.34.0");
        assert_eq!(events[0]["responseStatus"]["code"], 201);
        assert_eq!(
            events[1]["objectRef"],
            json!({"resource": "deployments", "namespace": "demo", "name": "web",
                "subresource": "status", "apiGroup": "apps", "apiVersion": "v1"})
        );
        assert_eq!(events[2]["verb"], "deletecollection");
        assert_eq!(
            events[3]["objectRef"],
            json!({"resource": "namespaces", "name": "demo", "apiGroup": "", "apiVersion": "v1"})
        );
    }

    #[test]
    fn a_file_log_should_hold_one_json_line_per_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.log");
        let log = AuditLog::to_file(&path).expect("open");
        log.record(&request("POST", "/api/v1/namespaces"));
        log.record(&request("DELETE", "/api/v1/namespaces/demo"));
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["verb"], "delete");
    }
}
