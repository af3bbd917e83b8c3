//! The requests answered, not kept (`create` only): who am I (`SelfSubjectReview`, `kubectl
//! auth whoami`), whom does a token stand for (`TokenReview`), may I or may they
//! (`SelfSubjectAccessReview`, `SubjectAccessReview`, `LocalSubjectAccessReview`: `kubectl auth
//! can-i`), and what may I do in a namespace (`SelfSubjectRulesReview`: `kubectl auth can-i
//! --list`) — as kube-apiserver's `pkg/registry/authentication` and
//! `pkg/registry/authorization` answer them.

use std::collections::BTreeMap;

use super::*;
use crate::authentication::service_account::ISSUER;
use crate::authorization::Attributes;

/// `POST` of a review: its answer, 201.
pub(super) async fn create(
    server: &ApiServer,
    user: &UserInfo,
    target: &Target,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let rt = &target.rt;
    let (mut review, _) = decode_body(body, headers).await?;
    if let Some(kind) = review.get("kind").and_then(Value::as_str)
        && kind != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "{kind} cannot be handled as a {}",
            rt.kind
        )));
    }
    let api_version = format!("{}/{}", rt.group, rt.version);
    let status = match rt.kind.as_str() {
        "SelfSubjectReview" => json!({"userInfo": user.to_json()}),
        "TokenReview" => token_review(server, &review),
        "SelfSubjectRulesReview" => {
            let namespace = review
                .at("/spec/namespace")
                .and_then(Value::as_str)
                .filter(|ns| !ns.is_empty())
                .ok_or_else(|| ApiError::bad_request("no namespace on request"))?;
            let status = rules_review(&server.store, user, namespace);
            // A new object: only the status is answered.
            review = json!({"metadata": {}, "spec": {}});
            status
        }
        "LocalSubjectAccessReview" if target.namespace.is_none() => {
            return Err(ApiError::bad_request(
                "namespace is required on this type: ",
            ));
        }
        kind => {
            let subject = match kind {
                "SelfSubjectAccessReview" => user.clone(),
                _ => subject_of(&review)?,
            };
            access_review(
                &server.store,
                &subject,
                &review,
                target.namespace.as_deref(),
            )?
        }
    };
    review["kind"] = json!(rt.kind);
    review["apiVersion"] = json!(api_version);
    if review.get("metadata").is_none_or(|m| !m.is_object()) {
        review["metadata"] = json!({});
    }
    review["status"] = status;
    Ok(respond(201, &review))
}

/// A `TokenReview`'s status: whether `spec.token` stands for a user, and which.
fn token_review(server: &ApiServer, review: &Value) -> Value {
    let token = review
        .at("/spec/token")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // The audiences asked about (the API server's when none are), and those it is meant for.
    let asked: Vec<&str> = review
        .at("/spec/audiences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .filter(|a: &Vec<&str>| !a.is_empty())
        .unwrap_or_else(|| vec![ISSUER]);
    match server.authenticator.review(token, &server.store, &asked) {
        Some((user, audiences)) => {
            json!({"authenticated": true, "user": user.to_json(), "audiences": audiences})
        }
        None => json!({"user": {}, "error": "[invalid bearer token, token lookup failed]"}),
    }
}

/// The user a `SubjectAccessReview` asks about (`spec.user`, `groups`, `uid`, `extra`).
fn subject_of(review: &Value) -> Result<UserInfo, ApiError> {
    let spec = review.get("spec").cloned().unwrap_or_default();
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let user = UserInfo {
        username: spec["user"].as_str().unwrap_or_default().to_owned(),
        uid: spec["uid"].as_str().unwrap_or_default().to_owned(),
        groups: strings(&spec["groups"]),
        extra: spec["extra"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(key, values)| (key.clone(), strings(values)))
            .collect::<BTreeMap<_, _>>(),
    };
    if user.username.is_empty() && user.groups.is_empty() {
        return Err(invalid(vec![(
            "spec.user".into(),
            "Invalid value: \"\": at least one of user or group must be specified".into(),
        )]));
    }
    Ok(user)
}

/// The 422 of an access review kube gives (the decoded review has no kind to name yet).
fn invalid(causes: Vec<(String, String)>) -> ApiError {
    ApiError::invalid("", "authorization.k8s.io", "", causes)
}

/// An access review's status: whether `user` may do what the review's attributes ask.
/// `namespace` is a `LocalSubjectAccessReview`'s (its path's).
fn access_review(
    store: &Store,
    user: &UserInfo,
    review: &Value,
    namespace: Option<&str>,
) -> Result<Value, ApiError> {
    let resource = review
        .at("/spec/resourceAttributes")
        .filter(|v| !v.is_null());
    let non_resource = review
        .at("/spec/nonResourceAttributes")
        .filter(|v| !v.is_null());
    let text = |value: Option<&Value>, key: &str| -> String {
        value
            .and_then(|v| v.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (verb, path, group, plural, subresource, name, asked_namespace) = match (
        resource,
        non_resource,
    ) {
        (Some(_), Some(other)) => {
            return Err(invalid(vec![(
                "spec.nonResourceAttributes".into(),
                format!(
                    "Invalid value: {other}: cannot be specified in combination with resourceAttributes"
                ),
            )]));
        }
        (None, None) => {
            return Err(invalid(vec![(
                    "spec.resourceAttributes".into(),
                    "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified".into(),
                )]));
        }
        (None, Some(_)) if namespace.is_some() => {
            return Err(invalid(vec![(
                "spec.nonResourceAttributes".into(),
                format!(
                    "Invalid value: {}: disallowed on this kind of request",
                    non_resource.map(Value::to_string).unwrap_or_default()
                ),
            )]));
        }
        (None, Some(attributes)) => (
            text(Some(attributes), "verb"),
            Some(text(Some(attributes), "path")),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        ),
        (Some(attributes), None) => (
            text(Some(attributes), "verb"),
            None,
            text(Some(attributes), "group"),
            text(Some(attributes), "resource"),
            text(Some(attributes), "subresource"),
            text(Some(attributes), "name"),
            text(Some(attributes), "namespace"),
        ),
    };
    if let Some(local) = namespace
        && asked_namespace != local
    {
        return Err(ApiError::bad_request(format!(
            "spec.resourceAttributes.namespace must match namespace: {local}"
        )));
    }
    let attributes = match &path {
        Some(path) => Attributes::non_resource(&verb, path),
        None => crate::authorization::attributes(
            &verb,
            (&group, &plural),
            &subresource,
            Some(asked_namespace.as_str()).filter(|ns| !ns.is_empty()),
            Some(name.as_str()).filter(|n| !n.is_empty()),
        ),
    };
    Ok(
        match crate::authorization::allowed_by(store, user, &attributes) {
            Some(reason) if reason.is_empty() => json!({"allowed": true}),
            Some(reason) => json!({"allowed": true, "reason": reason}),
            None => json!({"allowed": false}),
        },
    )
}

/// A `SelfSubjectRulesReview`'s status: every rule that applies to `user` in `namespace`, one
/// resource rule or non-resource rule per PolicyRule, as kube's RBAC rule resolver lists them.
fn rules_review(store: &Store, user: &UserInfo, namespace: &str) -> Value {
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in crate::authorization::rules_for(store, user, Some(namespace)) {
        let list = |key: &str| rule.get(key).filter(|v| v.is_array()).cloned();
        let verbs = list("verbs").unwrap_or_else(|| json!([]));
        if let Some(resources) = list("resources") {
            let mut out = json!({"verbs": verbs, "apiGroups": list("apiGroups").unwrap_or_else(|| json!([])),
                "resources": resources});
            if let Some(names) = list("resourceNames") {
                out["resourceNames"] = names;
            }
            resource_rules.push(out);
        }
        if let Some(urls) = list("nonResourceURLs") {
            non_resource_rules.push(json!({"verbs": verbs, "nonResourceURLs": urls}));
        }
    }
    json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules,
        "incomplete": false})
}
