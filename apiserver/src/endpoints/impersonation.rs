//! Impersonation (`kubectl --as`, `--as-group`), as kube-apiserver's impersonation filter does
//! it: the `Impersonate-User` and `Impersonate-Group` headers make the request another user's,
//! if the authenticated user may `impersonate` that user (or ServiceAccount) and each group.

use super::*;
use crate::authorization::{self, Attributes};

/// The user the request acts as: `user` itself, or the one its `Impersonate-*` headers name.
///
/// # Errors
///
/// 403 when `user` may not impersonate them (kube's message); 500 for groups without a user,
/// as kube-apiserver answers.
pub(super) fn impersonated(
    server: &ApiServer,
    user: &UserInfo,
    headers: &HeaderMap,
) -> Result<UserInfo, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect()
    };
    let groups = values("impersonate-group");
    let Some(username) = values("impersonate-user").into_iter().next() else {
        if groups.is_empty() {
            return Ok(user.clone());
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
        };
        if authorization::allows(&server.store, user, &attributes) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "{resource} {name:?} is forbidden: User {:?} cannot impersonate resource {resource:?} in API group \"\"{}",
                user.username,
                namespace.map_or(" at the cluster scope".to_owned(), |ns| format!(
                    " in the namespace {ns:?}"
                ))
            )))
        }
    };
    let mut impersonated = UserInfo {
        username: username.clone(),
        groups: Vec::new(),
    };
    match username
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
    {
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
    if username != "system:anonymous"
        && !impersonated
            .groups
            .iter()
            .any(|g| g == "system:authenticated")
    {
        impersonated.groups.push("system:authenticated".into());
    }
    Ok(impersonated)
}
