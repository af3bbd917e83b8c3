//! The API approval policy of CRDs in the Kubernetes community's protected groups
//! (apiextensions' `validateAPIApproval` and its API approval controller).

use serde_json::{Value, json};

use krec_core::error::Cause;
use krec_core::json::Pointer;

/// The annotation kube-apiserver requires on CRDs of protected groups.
pub const API_APPROVED_ANNOTATION: &str = "api-approved.kubernetes.io";

/// Where the API approval policy is explained (quoted in kube-apiserver's messages).
const API_APPROVAL_POLICY: &str = "https://github.com/kubernetes/enhancements/pull/1111";

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
pub fn validate(crd: &Value, old: Option<&Value>) -> Vec<Cause> {
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
pub fn condition(crd: &Value, now: &str) -> Option<Value> {
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
        let missing = validate(&crd("samplecontroller.k8s.io", None), None);
        assert_eq!(
            missing,
            vec![(
                "metadata.annotations[api-approved.kubernetes.io]".to_owned(),
                "Required value: protected groups must have approval annotation \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111".to_owned()
            )]
        );
        let invalid = validate(&crd("samplecontroller.k8s.io", Some("yes")), None);
        assert_eq!(
            invalid[0].1,
            "Invalid value: \"yes\": protected groups must have approval annotation \"api-approved.kubernetes.io\" with either a URL or a reason starting with \"unapproved\", see https://github.com/kubernetes/enhancements/pull/1111"
        );
        for ok in [
            "unapproved, experimental-only; please get an approval from Kubernetes API reviewers if you're trying to develop a CRD in the *.k8s.io or *.kubernetes.io groups",
            "https://github.com/kubernetes/kubernetes/pull/78458",
        ] {
            assert_eq!(validate(&crd("x.k8s.io", Some(ok)), None), vec![]);
        }
        assert_eq!(validate(&crd("example.com", None), None), vec![]);
    }

    #[test]
    fn an_update_should_only_be_checked_when_the_approval_state_changes() {
        let old = crd("x.k8s.io", None);
        assert_eq!(validate(&crd("x.k8s.io", None), Some(&old)), vec![]);
        assert_eq!(validate(&crd("x.k8s.io", Some("bad")), Some(&old)).len(), 1);
    }

    #[test]
    fn the_condition_should_record_the_approval_state() {
        let now = "2026-01-01T00:00:00Z";
        let reason = |a| condition(&crd("x.k8s.io", a), now).map(|c| c["reason"].clone());
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
        assert_eq!(condition(&crd("example.com", None), now), None);
    }
}
