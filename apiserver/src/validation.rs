//! kube-apiserver's validation rules, as pure functions of the object (and, for updates, the
//! stored object): each returns the causes of a 422 Invalid as `(field, message)`, with the
//! field paths and messages kube-apiserver gives.

use serde_json::{Value, json};

/// One cause of a 422: the field path and the message (`Required value: …`, `Invalid value: …`).
pub type Cause = (String, String);

/// The annotation kube-apiserver requires on CRDs of protected groups.
pub const API_APPROVED_ANNOTATION: &str = "api-approved.kubernetes.io";

/// Where the API approval policy is explained (quoted in kube-apiserver's messages).
const API_APPROVAL_POLICY: &str = "https://github.com/kubernetes/enhancements/pull/1111";

/// `metadata.ownerReferences`, as apimachinery's `ValidateOwnerReferences`: each reference names
/// an apiVersion with a version, a kind, a name and a uid; an Event cannot own; at most one
/// reference is the controller (each further one is a cause).
pub fn owner_references(object: &Value) -> Vec<Cause> {
    let Some(references) = object
        .pointer("/metadata/ownerReferences")
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
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !is_protected_community_group(group) {
        return Vec::new();
    }
    let annotations = crd.pointer("/metadata/annotations");
    let (state, reason) = api_approval_state(annotations);
    if old.is_some_and(|old| api_approval_state(old.pointer("/metadata/annotations")).0 == state) {
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
    let group = crd.pointer("/spec/group").and_then(Value::as_str)?;
    if !is_protected_community_group(group) {
        return None;
    }
    let (state, message) = api_approval_state(crd.pointer("/metadata/annotations"));
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

#[cfg(test)]
mod tests {
    use super::*;

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
