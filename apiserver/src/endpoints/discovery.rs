//! Discovery: `/version`, `/api`, `/apis`, a group and a group-version's resources.

use super::*;

/// A discovery document, answered to GET only.
pub(super) fn get_only(
    method: &Method,
    path: &str,
    document: impl FnOnce() -> Value,
) -> Result<Response, ApiError> {
    if method == Method::GET {
        Ok(respond(200, &document()))
    } else {
        Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on {path}"
        )))
    }
}

/// `/version`, `/api`, `/apis`, `/apis/{group}` and a group-version's resource list.
pub(super) fn serve(
    server: &ApiServer,
    method: &Method,
    path: &str,
    route: Route<'_>,
) -> Result<Response, ApiError> {
    let registry = server.store.registry();
    match route {
        Route::Version => get_only(method, path, || {
            let (major, minor) = KUBERNETES_VERSION;
            json!({"major": major, "minor": minor, "gitVersion": version_string(),
                "gitCommit": "krec", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "n/a", "compiler": "rustc", "platform": "linux/amd64"})
        }),
        Route::CoreVersions => get_only(method, path, || {
            json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server.address}]})
        }),
        Route::Groups => get_only(method, path, || registry.group_list()),
        Route::Group(group) => {
            let list = registry.group_list();
            let found = list["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|g| g["name"] == *group)
                .cloned();
            match found {
                Some(mut g) => {
                    g["kind"] = json!("APIGroup");
                    g["apiVersion"] = json!("v1");
                    get_only(method, path, || g)
                }
                None => Ok(page_not_found()),
            }
        }
        Route::Resources { group, version } => {
            if !registry.serves_group_version(group, version) {
                return Ok(page_not_found());
            }
            get_only(method, path, || registry.resource_list(group, version))
        }
        _ => Err(ApiError::no_route(path)),
    }
}
