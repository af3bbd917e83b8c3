//! Impersonation (`kubectl --as`, `--as-group`), as kube-apiserver's impersonation filter does
//! it: the `Impersonate-User` and `Impersonate-Group` headers make the request another user's,
//! if the authenticated user may `impersonate` that user (or ServiceAccount) and each group.

use super::*;
use crate::authorization::{self, Attributes};

/// The user the request acts as when its `Impersonate-*` headers name one; `None` when it acts
/// as `user` itself.
///
/// # Errors
///
/// 403 when `user` may not impersonate them (kube's message); 500 for groups without a user,
/// as kube-apiserver answers.
pub(super) fn impersonated(
    server: &ApiServer,
    user: &UserInfo,
    headers: &HeaderMap,
) -> Result<Option<UserInfo>, ApiError> {
    if headers.keys().any(|name| {
        name.as_str() == "impersonate-uid" || name.as_str().starts_with("impersonate-extra-")
    }) {
        return Err(ApiError::bad_request(
            "impersonating a uid or user extras is not supported by krec's embedded API server",
        ));
    }
    let values = |name: &str| -> Result<Vec<String>, ApiError> {
        headers
            .get_all(name)
            .iter()
            .map(|v| {
                // Refused rather than skipped: a skipped value would leave the caller's identity.
                v.to_str().map(str::to_owned).map_err(|_| {
                    ApiError::bad_request(format!("the {name} header is not ASCII text"))
                })
            })
            .collect()
    };
    let groups = values("impersonate-group")?;
    // An empty `Impersonate-User` impersonates no one, as kube-apiserver reads it.
    let Some(username) = values("impersonate-user")?
        .into_iter()
        .find(|u| !u.is_empty())
    else {
        if groups.is_empty() {
            return Ok(None);
        }
        return Err(ApiError::internal(format!(
            "requested {groups:?} without impersonating a user"
        )));
    };
    let may = |resource: &str, namespace: Option<&str>, name: &str| {
        let attributes = Attributes {
            verb: "impersonate",
            group: "",
            resource,
            subresource: "",
            namespace,
            name: Some(name),
            path: None,
        };
        if authorization::allows(&server.store, user, &attributes) {
            Ok(())
        } else {
            Err(authorization::forbidden(user, &attributes))
        }
    };
    let mut impersonated = UserInfo {
        username: username.clone(),
        ..Default::default()
    };
    // `system:serviceaccount:<namespace>:<name>`, both parts there and the name without a
    // colon (kube's `SplitUsername`); anything else is a user.
    let service_account = username
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains(':'));
    match service_account {
        Some((namespace, name)) => {
            may("serviceaccounts", Some(namespace), name)?;
            if groups.is_empty() {
                impersonated.groups = vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{namespace}"),
                ];
            }
        }
        None => may("users", None, &username)?,
    }
    for group in &groups {
        may("groups", None, group)?;
    }
    impersonated.groups.extend(groups);
    // kube-apiserver's rule: the anonymous user is unauthenticated, and anyone else authenticated
    // unless asked to be unauthenticated.
    let has = |group: &str| impersonated.groups.iter().any(|g| g == group);
    if username == "system:anonymous" {
        if !has("system:unauthenticated") {
            impersonated.groups.push("system:unauthenticated".into());
        }
    } else if !has("system:authenticated") && !has("system:unauthenticated") {
        impersonated.groups.push("system:authenticated".into());
    }
    Ok(Some(impersonated))
}
