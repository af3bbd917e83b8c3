//! kube-apiserver's validation rules, as pure functions of the object (and, for updates, the
//! stored object): each returns the causes of a 422 Invalid as `(field, message)`, with the
//! field paths and messages kube-apiserver gives.

use serde_json::{Value, json};

use crate::json::Pointer;

pub use crate::error::Cause;

/// The annotation kube-apiserver requires on CRDs of protected groups.
pub const API_APPROVED_ANNOTATION: &str = "api-approved.kubernetes.io";

/// Where the API approval policy is explained (quoted in kube-apiserver's messages).
const API_APPROVAL_POLICY: &str = "https://github.com/kubernetes/enhancements/pull/1111";

/// `metadata.ownerReferences`, as apimachinery's `ValidateOwnerReferences`: each reference names
/// an apiVersion with a version, a kind, a name and a uid; an Event cannot own; at most one
/// reference is the controller (each further one is a cause).
pub fn owner_references(object: &Value) -> Vec<Cause> {
    let Some(references) = object
        .at("/metadata/ownerReferences")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let path = "metadata.ownerReferences";
    let mut causes = Vec::new();
    let mut first_controller: Option<String> = None;
    for reference in references {
        let field = |name: &str| reference.get(name).and_then(Value::as_str).unwrap_or("");
        let api_version = field("apiVersion");
        let version = api_version.rsplit_once('/').map_or(api_version, |(_, v)| v);
        let required = [
            (
                "apiVersion",
                version,
                api_version,
                "version must not be empty",
            ),
            ("kind", field("kind"), field("kind"), "must not be empty"),
            ("name", field("name"), field("name"), "must not be empty"),
            ("uid", field("uid"), field("uid"), "must not be empty"),
        ];
        for (child, checked, shown, message) in required {
            if checked.is_empty() {
                causes.push((
                    format!("{path}.{child}"),
                    format!("Invalid value: {shown:?}: {message}"),
                ));
            }
        }
        if api_version == "v1" && field("kind") == "Event" {
            causes.push((
                path.to_owned(),
                format!(
                    "Invalid value: {reference}: /v1, Kind=Event is disallowed from being an owner"
                ),
            ));
        }
        if reference.get("controller").and_then(Value::as_bool) == Some(true) {
            let this = format!("{}/{}", field("kind"), field("name"));
            match &first_controller {
                Some(first) => causes.push((
                    path.to_owned(),
                    format!(
                        "Invalid value: {}: Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}",
                        Value::Array(references.clone()),
                    ),
                )),
                None => first_controller = Some(this),
            }
        }
    }
    causes
}

/// Whether `group` is one of the Kubernetes community's protected API groups (`k8s.io`,
/// `kubernetes.io` and their subdomains), whose CRDs need API approval.
pub fn is_protected_community_group(group: &str) -> bool {
    ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|g| group == *g || group.strip_suffix(g).is_some_and(|p| p.ends_with('.')))
}

/// The approval state of a CRD's `api-approved.kubernetes.io` annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalState {
    /// No annotation (or an empty one).
    Missing,
    /// A value starting with `unapproved`: allowed, recorded as not approved.
    Bypassed,
    /// A URL with a scheme and a host: the approving pull request.
    Approved,
    /// Anything else.
    Invalid,
}

/// The approval state of `annotations`, and the reason kube-apiserver gives for it.
pub fn api_approval_state(annotations: Option<&Value>) -> (ApprovalState, String) {
    let value = annotations
        .and_then(|a| a.get(API_APPROVED_ANNOTATION))
        .and_then(Value::as_str)
        .unwrap_or("");
    if value.is_empty() {
        (
            ApprovalState::Missing,
            format!(
                "protected groups must have approval annotation {API_APPROVED_ANNOTATION:?}, see {API_APPROVAL_POLICY}"
            ),
        )
    } else if value.starts_with("unapproved") {
        (ApprovalState::Bypassed, format!("not approved: {value:?}"))
    } else if is_absolute_url_with_host(value) {
        (ApprovalState::Approved, format!("approved in {value}"))
    } else {
        (
            ApprovalState::Invalid,
            format!(
                "protected groups must have approval annotation {API_APPROVED_ANNOTATION:?} with either a URL or a reason starting with \"unapproved\", see {API_APPROVAL_POLICY}"
            ),
        )
    }
}

/// `scheme://host…` with a valid scheme and a non-empty host (what Go's `url.ParseRequestURI`
/// accepts with `Scheme` and `Host` set).
fn is_absolute_url_with_host(value: &str) -> bool {
    let Some((scheme, rest)) = value.split_once("://") else {
        return false;
    };
    let scheme_ok = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    scheme_ok && !host.is_empty() && !value.chars().any(|c| c.is_control() || c == ' ')
}

/// The API approval rule of apiextensions' `validateAPIApproval`: a CRD of a protected group
/// needs the annotation with a URL or an `unapproved…` reason. On update it is only checked when
/// the approval state changes, so controllers updating an old CRD's spec are not refused.
pub fn crd_api_approval(crd: &Value, old: Option<&Value>) -> Vec<Cause> {
    let group = crd.at("/spec/group").and_then(Value::as_str).unwrap_or("");
    if !is_protected_community_group(group) {
        return Vec::new();
    }
    let annotations = crd.at("/metadata/annotations");
    let (state, reason) = api_approval_state(annotations);
    if old.is_some_and(|old| api_approval_state(old.at("/metadata/annotations")).0 == state) {
        return Vec::new();
    }
    let field = format!("metadata.annotations[{API_APPROVED_ANNOTATION}]");
    match state {
        ApprovalState::Approved | ApprovalState::Bypassed => Vec::new(),
        ApprovalState::Missing => vec![(field, format!("Required value: {reason}"))],
        ApprovalState::Invalid => {
            let value = annotations
                .and_then(|a| a.get(API_APPROVED_ANNOTATION))
                .and_then(Value::as_str)
                .unwrap_or("");
            vec![(field, format!("Invalid value: {value:?}: {reason}"))]
        }
    }
}

/// The `KubernetesAPIApprovalPolicyConformant` condition kube-apiserver's API approval controller
/// keeps on CRDs of protected groups; `None` for other groups.
pub fn crd_api_approval_condition(crd: &Value, now: &str) -> Option<Value> {
    let group = crd.at("/spec/group").and_then(Value::as_str)?;
    if !is_protected_community_group(group) {
        return None;
    }
    let (state, message) = api_approval_state(crd.at("/metadata/annotations"));
    let (status, reason) = match state {
        ApprovalState::Approved => ("True", "ApprovedAnnotation"),
        ApprovalState::Bypassed => ("False", "UnapprovedAnnotation"),
        ApprovalState::Missing => ("False", "MissingAnnotation"),
        ApprovalState::Invalid => ("False", "InvalidAnnotation"),
    };
    Some(json!({
        "type": "KubernetesAPIApprovalPolicyConformant",
        "status": status,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }))
}

/// Most bytes a ConfigMap's or Secret's data may hold (`data` and `binaryData` together).
pub const MAX_DATA_BYTES: usize = 1 << 20;

/// Most bytes of annotations (keys and values) an object may have.
pub const MAX_ANNOTATION_BYTES: usize = 256 << 10;

/// Go's `%#v` of a `map[string]string`, as kube-apiserver prints label maps in messages.
fn go_map(map: Option<&Value>) -> String {
    let entries: Vec<String> = map
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or_default()))
        .collect();
    format!("map[string]string{{{}}}", entries.join(", "))
}

/// The rules of kube-apiserver's validation of built-in kinds that controllers most often trip
/// over: a Pod needs containers, each with a name and an image; a workload needs a selector that
/// matches its template's labels, and keeps it; a Job keeps its template; immutable ConfigMaps
/// and Secrets keep their data; data and annotations have size limits. `old` is the stored
/// object of an update.
pub fn builtin(group: &str, kind: &str, object: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let annotations: usize = object
        .at("/metadata/annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if annotations > MAX_ANNOTATION_BYTES {
        causes.push((
            "metadata.annotations".into(),
            format!("Too long: must have at most {MAX_ANNOTATION_BYTES} bytes"),
        ));
    }
    match (group, kind) {
        ("", "Pod") => {
            if let Some(spec) = object.get("spec") {
                pod_spec(spec, "spec", &mut causes);
            }
        }
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") | ("batch", "Job") => {
            workload(group, kind, object, old, &mut causes);
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            causes.extend(crate::admissionregistration::validate(
                crate::admissionregistration::HookKind::Validating,
                object,
            ));
        }
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            causes.extend(crate::admissionregistration::validate(
                crate::admissionregistration::HookKind::Mutating,
                object,
            ));
        }
        ("", "ConfigMap" | "Secret") => {
            let size: usize = ["data", "binaryData", "stringData"]
                .iter()
                .filter_map(|f| object.get(*f).and_then(Value::as_object))
                .flatten()
                .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
                .sum();
            if size > MAX_DATA_BYTES {
                causes.push((
                    if kind == "Secret" { "data" } else { "[]" }.into(),
                    format!("Too long: must have at most {MAX_DATA_BYTES} bytes"),
                ));
            }
            if let Some(old) = old.filter(|o| o.get("immutable") == Some(&Value::Bool(true))) {
                if object.get("immutable") != Some(&Value::Bool(true)) {
                    causes.push((
                        "immutable".into(),
                        "Forbidden: field is immutable when `immutable` is set".into(),
                    ));
                }
                for field in ["data", "binaryData"] {
                    let empty = |v: Option<&Value>| {
                        v.and_then(Value::as_object).is_none_or(|m| m.is_empty())
                    };
                    let (was, is) = (old.get(field), object.get(field));
                    if was != is && !(empty(was) && empty(is)) {
                        causes.push((
                            field.into(),
                            "Forbidden: field is immutable when `immutable` is set".into(),
                        ));
                    }
                }
            }
        }
        _ => {}
    }
    causes
}

/// A pod spec's containers: at least one, each named and with an image.
fn pod_spec(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    let containers = spec.get("containers").and_then(Value::as_array);
    if containers.is_none_or(|c| c.is_empty()) {
        causes.push((format!("{path}.containers"), "Required value".into()));
    }
    for list in ["initContainers", "containers"] {
        for (i, c) in spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            // The item's path, written only for a problem found.
            let at = || format!("{path}.{list}[{i}]");
            match c.get("name").and_then(Value::as_str) {
                None | Some("") => causes.push((format!("{}.name", at()), "Required value".into())),
                Some(name) if !crate::selector::is_dns_label(name) => causes.push((
                    format!("{}.name", at()),
                    format!("Invalid value: {name:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
                )),
                Some(_) => {}
            }
            if list == "containers"
                && c.get("image")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            {
                causes.push((format!("{}.image", at()), "Required value".into()));
            }
        }
    }
}

/// A workload's selector, template and the fields it may not change.
fn workload(group: &str, kind: &str, object: &Value, old: Option<&Value>, causes: &mut Vec<Cause>) {
    let selector = object.at("/spec/selector");
    let labels = object.at("/spec/template/metadata/labels");
    // A Job without `manualSelector` gets its selector from the server (defaults).
    match selector {
        None | Some(Value::Null) => causes.push(("spec.selector".into(), "Required value".into())),
        Some(selector) => {
            let empty = selector
                .get("matchLabels")
                .and_then(Value::as_object)
                .is_none_or(|m| m.is_empty())
                && selector
                    .get("matchExpressions")
                    .and_then(Value::as_array)
                    .is_none_or(|m| m.is_empty());
            if empty {
                causes.push((
                    "spec.selector".into(),
                    format!(
                        "Invalid value: {selector}: empty selector is invalid for {}",
                        kind.to_lowercase()
                    ),
                ));
            } else if !selector_matches(selector, labels) {
                causes.push((
                    "spec.template.metadata.labels".into(),
                    format!(
                        "Invalid value: {}: `selector` does not match template `labels`",
                        go_map(labels)
                    ),
                ));
            }
        }
    }
    match object.at("/spec/template/spec") {
        Some(spec) => pod_spec(spec, "spec.template.spec", causes),
        None => causes.push((
            "spec.template.spec.containers".into(),
            "Required value".into(),
        )),
    }
    if group == "batch" {
        let policy = object
            .at("/spec/template/spec/restartPolicy")
            .and_then(Value::as_str);
        if !matches!(policy, Some("Never" | "OnFailure")) {
            causes.push((
                "spec.template.spec.restartPolicy".into(),
                format!(
                    "Unsupported value: {:?}: supported values: \"OnFailure\", \"Never\"",
                    policy.unwrap_or("")
                ),
            ));
        }
    }
    if let Some(old) = old {
        let immutable: &[&str] = if group == "batch" {
            &["/spec/selector", "/spec/template"]
        } else {
            &["/spec/selector"]
        };
        for pointer in immutable {
            let (was, is) = (old.at(pointer), object.at(pointer));
            if was != is {
                causes.push((
                    pointer.trim_start_matches('/').replace('/', "."),
                    format!(
                        "Invalid value: {}: field is immutable",
                        is.cloned().unwrap_or(Value::Null)
                    ),
                ));
            }
        }
    }
}

/// Whether a `LabelSelector` selects objects with `labels`.
fn selector_matches(selector: &Value, labels: Option<&Value>) -> bool {
    let labels = labels.and_then(Value::as_object);
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let by_labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let by_expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match e["operator"].as_str() {
                Some("In") => label(key).is_some_and(|v| values.contains(&v)),
                Some("NotIn") => label(key).is_none_or(|v| !values.contains(&v)),
                Some("Exists") => label(key).is_some(),
                Some("DoesNotExist") => label(key).is_none(),
                _ => false,
            }
        });
    by_labels && by_expressions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_objects_should_meet_kube_apiservers_rules() {
        let pod = json!({"spec": {"containers": []}});
        assert_eq!(
            builtin("", "Pod", &pod, None),
            vec![("spec.containers".to_owned(), "Required value".to_owned())]
        );
        let pod = json!({"spec": {"containers": [{"name": "Web"}]}});
        let causes = builtin("", "Pod", &pod, None);
        assert_eq!(causes.len(), 2, "{causes:?}");
        assert_eq!(
            causes[1],
            (
                "spec.containers[0].image".to_owned(),
                "Required value".to_owned()
            )
        );

        let deployment = |app: &str| {
            json!({"spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
        };
        assert!(builtin("apps", "Deployment", &deployment("web"), None).is_empty());
        assert_eq!(
            builtin("apps", "Deployment", &deployment("other"), None),
            vec![("spec.template.metadata.labels".to_owned(),
                "Invalid value: map[string]string{\"app\":\"other\"}: `selector` does not match template `labels`".to_owned())]
        );
        let mut moved = deployment("x");
        moved["spec"]["selector"] = json!({"matchLabels": {"app": "x"}});
        let causes = builtin("apps", "Deployment", &moved, Some(&deployment("web")));
        assert!(causes[0].1.ends_with("field is immutable"), "{causes:?}");

        let old = json!({"immutable": true, "data": {"a": "b"}});
        let new = json!({"immutable": true, "data": {"a": "c"}});
        assert_eq!(
            builtin("", "ConfigMap", &new, Some(&old)),
            vec![(
                "data".to_owned(),
                "Forbidden: field is immutable when `immutable` is set".to_owned()
            )]
        );
        let big = json!({"data": {"a": "x".repeat(MAX_DATA_BYTES + 1)}});
        assert!(
            builtin("", "ConfigMap", &big, None)[0]
                .1
                .starts_with("Too long")
        );
    }

    fn crd(group: &str, annotation: Option<&str>) -> Value {
        let mut crd =
            json!({"metadata": {"name": format!("foos.{group}")}, "spec": {"group": group}});
        if let Some(a) = annotation {
            crd["metadata"]["annotations"] = json!({API_APPROVED_ANNOTATION: a});
        }
        crd
    }

    #[test]
    fn protected_groups_should_be_k8s_io_and_kubernetes_io_and_their_subdomains() {
        for group in [
            "k8s.io",
            "kubernetes.io",
            "samplecontroller.k8s.io",
            "a.b.kubernetes.io",
        ] {
            assert!(is_protected_community_group(group), "{group}");
        }
        for group in [
            "example.com",
            "notk8s.io",
            "k8s.io.example.com",
            "xkubernetes.io",
            "",
        ] {
            assert!(!is_protected_community_group(group), "{group}");
        }
    }

    #[test]
    fn a_protected_crd_should_need_a_url_or_an_unapproved_reason() {
        let missing = crd_api_approval(&crd("samplecontroller.k8s.io", None), None);
        assert_eq!(
            missing,
            vec![(
                "metadata.annotations[api-approved.kubernetes.io]".to_owned(),
                "Required value: protected groups must have approval annotation \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111".to_owned()
            )]
        );
        let invalid = crd_api_approval(&crd("samplecontroller.k8s.io", Some("yes")), None);
        assert_eq!(
            invalid[0].1,
            "Invalid value: \"yes\": protected groups must have approval annotation \"api-approved.kubernetes.io\" with either a URL or a reason starting with \"unapproved\", see https://github.com/kubernetes/enhancements/pull/1111"
        );
        for ok in [
            "unapproved, experimental-only; please get an approval from Kubernetes API reviewers if you're trying to develop a CRD in the *.k8s.io or *.kubernetes.io groups",
            "https://github.com/kubernetes/kubernetes/pull/78458",
        ] {
            assert_eq!(crd_api_approval(&crd("x.k8s.io", Some(ok)), None), vec![]);
        }
        assert_eq!(crd_api_approval(&crd("example.com", None), None), vec![]);
    }

    #[test]
    fn an_update_should_only_be_checked_when_the_approval_state_changes() {
        let old = crd("x.k8s.io", None);
        assert_eq!(crd_api_approval(&crd("x.k8s.io", None), Some(&old)), vec![]);
        assert_eq!(
            crd_api_approval(&crd("x.k8s.io", Some("bad")), Some(&old)).len(),
            1
        );
    }

    #[test]
    fn the_condition_should_record_the_approval_state() {
        let now = "2026-01-01T00:00:00Z";
        let reason =
            |a| crd_api_approval_condition(&crd("x.k8s.io", a), now).map(|c| c["reason"].clone());
        assert_eq!(reason(None), Some(json!("MissingAnnotation")));
        assert_eq!(
            reason(Some("unapproved")),
            Some(json!("UnapprovedAnnotation"))
        );
        assert_eq!(
            reason(Some("https://x.io/1")),
            Some(json!("ApprovedAnnotation"))
        );
        assert_eq!(reason(Some("nope")), Some(json!("InvalidAnnotation")));
        assert_eq!(
            crd_api_approval_condition(&crd("example.com", None), now),
            None
        );
    }

    #[test]
    fn owner_references_should_need_every_identifying_field_and_one_controller() {
        let object = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "controller": true},
        ]}});
        assert_eq!(
            owner_references(&object),
            vec![(
                "metadata.ownerReferences.uid".to_owned(),
                "Invalid value: \"\": must not be empty".to_owned()
            )]
        );
        let two = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "1", "controller": true},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "b", "uid": "2", "controller": true},
        ]}});
        let causes = owner_references(&two);
        assert_eq!(causes.len(), 1);
        assert!(causes[0].1.contains("Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/a and ReplicaSet/b"), "{causes:?}");
        let event = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "1"},
        ]}});
        assert!(
            owner_references(&event)[0]
                .1
                .ends_with("/v1, Kind=Event is disallowed from being an owner")
        );
    }
}
