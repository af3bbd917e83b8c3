//! The path grammar kube-apiserver serves: what a URL path names, before anything is looked up
//! ([`Route::of`]). Whether the group, version and resource are served is the caller's to ask
//! of the registry.

/// A subresource the server serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    /// The object itself.
    None,
    /// `/status`.
    Status,
    /// `/scale`.
    Scale,
    /// `/token`: a ServiceAccount's TokenRequest.
    Token,
}

impl Subresource {
    /// Its name in RBAC rules and discovery (`""` for the object itself).
    pub fn name(self) -> &'static str {
        match self {
            Subresource::None => "",
            Subresource::Status => "status",
            Subresource::Scale => "scale",
            Subresource::Token => "token",
        }
    }
}

/// What a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// `/version`.
    Version,
    /// `/metrics`.
    Metrics,
    /// `/healthz`, `/readyz`, `/livez` and anything under them.
    Health,
    /// `/api`: the core group's versions.
    CoreVersions,
    /// `/apis`: every group.
    Groups,
    /// `/apis/{group}`.
    Group(&'a str),
    /// `/openapi/v2`.
    OpenApiV2,
    /// `/openapi/v3`: the list of documents.
    OpenApiV3Root,
    /// `/openapi/v3/api/{version}` (group `""`) or `/openapi/v3/apis/{group}/{version}`.
    OpenApiV3 {
        /// API group, `""` for core.
        group: &'a str,
        /// Version.
        version: &'a str,
    },
    /// `/api/{version}` or `/apis/{group}/{version}`: the resources of a group version.
    Resources {
        /// API group, `""` for core.
        group: &'a str,
        /// Version.
        version: &'a str,
    },
    /// A collection or an object (or its subresource) of a resource.
    Resource(ResourcePath<'a>),
}

/// What a path to a resource names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourcePath<'a> {
    /// API group, `""` for core.
    pub group: &'a str,
    /// Version.
    pub version: &'a str,
    /// From `/namespaces/{namespace}/…`; `None` for a cluster-scoped path.
    pub namespace: Option<&'a str>,
    /// The resource, e.g. `deployments`.
    pub plural: &'a str,
    /// The object; `None` for the collection.
    pub name: Option<&'a str>,
    /// Which part of the object.
    pub subresource: Subresource,
}

impl<'a> Route<'a> {
    /// What `path` names, or `None` when it names nothing the server serves (404).
    pub fn of(path: &'a str) -> Option<Self> {
        let segments: Vec<&str> = path
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .collect();
        let (group, version, rest) = match segments.as_slice() {
            ["version"] => return Some(Route::Version),
            ["metrics"] => return Some(Route::Metrics),
            ["healthz" | "readyz" | "livez", ..] => return Some(Route::Health),
            ["api"] => return Some(Route::CoreVersions),
            ["apis"] => return Some(Route::Groups),
            ["openapi", "v2"] => return Some(Route::OpenApiV2),
            ["openapi", "v3"] => return Some(Route::OpenApiV3Root),
            ["openapi", "v3", "api", version] => {
                return Some(Route::OpenApiV3 { group: "", version });
            }
            ["openapi", "v3", "apis", group, version] => {
                return Some(Route::OpenApiV3 { group, version });
            }
            ["apis", group] => return Some(Route::Group(group)),
            ["api", version, rest @ ..] => ("", *version, rest),
            ["apis", group, version, rest @ ..] => (*group, *version, rest),
            _ => return None,
        };
        // `/namespaces/{ns}/{plural}…` is a namespaced resource, except a Namespace's own
        // subresources (`/namespaces/{name}/status`, `/namespaces/{name}/finalize`).
        let (namespace, rest) = match rest {
            ["namespaces", ns, plural, rest @ ..]
                if *plural != "status" && *plural != "finalize" =>
            {
                (Some(*ns), [&[*plural][..], rest].concat())
            }
            [] => return Some(Route::Resources { group, version }),
            other => (None, other.to_vec()),
        };
        let (plural, name, subresource) = match rest.as_slice() {
            [plural] => (*plural, None, Subresource::None),
            [plural, name] => (*plural, Some(*name), Subresource::None),
            [plural, name, "status"] => (*plural, Some(*name), Subresource::Status),
            [plural, name, "scale"] => (*plural, Some(*name), Subresource::Scale),
            [plural, name, "token"] => (*plural, Some(*name), Subresource::Token),
            _ => return None,
        };
        Some(Route::Resource(ResourcePath {
            group,
            version,
            namespace,
            plural,
            name,
            subresource,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource<'a>(
        group: &'a str,
        version: &'a str,
        namespace: Option<&'a str>,
        plural: &'a str,
        name: Option<&'a str>,
        subresource: Subresource,
    ) -> Option<Route<'a>> {
        Some(Route::Resource(ResourcePath {
            group,
            version,
            namespace,
            plural,
            name,
            subresource,
        }))
    }

    #[test]
    fn every_path_shape_should_name_what_kube_apiserver_serves_there() {
        use Subresource::{None as Whole, Scale, Status};
        let table: &[(&str, Option<Route<'_>>)] = &[
            ("/version", Some(Route::Version)),
            ("/metrics", Some(Route::Metrics)),
            ("/healthz", Some(Route::Health)),
            ("/readyz/etcd", Some(Route::Health)),
            ("/livez", Some(Route::Health)),
            ("/api", Some(Route::CoreVersions)),
            ("/apis", Some(Route::Groups)),
            ("/apis/apps", Some(Route::Group("apps"))),
            ("/openapi/v2", Some(Route::OpenApiV2)),
            ("/openapi/v3", Some(Route::OpenApiV3Root)),
            (
                "/openapi/v3/api/v1",
                Some(Route::OpenApiV3 {
                    group: "",
                    version: "v1",
                }),
            ),
            (
                "/openapi/v3/apis/apps/v1",
                Some(Route::OpenApiV3 {
                    group: "apps",
                    version: "v1",
                }),
            ),
            (
                "/api/v1",
                Some(Route::Resources {
                    group: "",
                    version: "v1",
                }),
            ),
            (
                "/apis/apps/v1/",
                Some(Route::Resources {
                    group: "apps",
                    version: "v1",
                }),
            ),
            (
                "/api/v1/nodes",
                resource("", "v1", None, "nodes", None, Whole),
            ),
            (
                "/api/v1/nodes/n1",
                resource("", "v1", None, "nodes", Some("n1"), Whole),
            ),
            (
                "/api/v1/pods",
                resource("", "v1", None, "pods", None, Whole),
            ),
            (
                "/api/v1/namespaces/default/pods",
                resource("", "v1", Some("default"), "pods", None, Whole),
            ),
            (
                "/api/v1/namespaces/default/pods/web",
                resource("", "v1", Some("default"), "pods", Some("web"), Whole),
            ),
            (
                "/api/v1/namespaces/default/pods/web/status",
                resource("", "v1", Some("default"), "pods", Some("web"), Status),
            ),
            (
                "/apis/apps/v1/namespaces/default/deployments/web/scale",
                resource(
                    "apps",
                    "v1",
                    Some("default"),
                    "deployments",
                    Some("web"),
                    Scale,
                ),
            ),
            (
                "/api/v1/namespaces",
                resource("", "v1", None, "namespaces", None, Whole),
            ),
            (
                "/api/v1/namespaces/team-a",
                resource("", "v1", None, "namespaces", Some("team-a"), Whole),
            ),
            (
                "/api/v1/namespaces/team-a/status",
                resource("", "v1", None, "namespaces", Some("team-a"), Status),
            ),
            (
                "/apis/example.com/v1/foos",
                resource("example.com", "v1", None, "foos", None, Whole),
            ),
            // Not served: unknown roots, a Namespace's finalize, deeper paths, other
            // subresources.
            ("/", None),
            ("/logs", None),
            ("/api/v1/namespaces/team-a/finalize", None),
            ("/api/v1/namespaces/default/pods/web/log", None),
            ("/api/v1/namespaces/default/pods/web/status/extra", None),
            ("/openapi/v3/apis/apps", None),
        ];
        for (path, route) in table {
            assert_eq!(Route::of(path), *route, "{path}");
        }
    }
}
