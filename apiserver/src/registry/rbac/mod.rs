//! `rbac.authorization.k8s.io`: Roles, ClusterRoles and their bindings.

pub mod role;
pub mod rolebinding;
