//! RoleBindings and ClusterRoleBindings: `SetDefaults_Subject` and `printRoleBinding`'s row.

use serde_json::{Value, json};

use crate::defaults::{each, set};
use crate::printers::{AGE, Column, NAME, Row};
use crate::registry::{Names, Strategy};

/// The strategy of RoleBindings and ClusterRoleBindings.
pub struct RoleBindingStrategy;

/// The strategy of RoleBindings and ClusterRoleBindings.
pub static STRATEGY: RoleBindingStrategy = RoleBindingStrategy;

impl Strategy for RoleBindingStrategy {
    fn names(&self) -> Names {
        Names::PathSegment
    }

    /// `SetDefaults_Subject`: users and groups are in RBAC's group (a ServiceAccount's is the
    /// core group, `""`, which Go's JSON omits).
    fn default(&self, object: &mut Value) {
        for subject in each(object, "subjects") {
            if matches!(subject["kind"].as_str(), Some("User" | "Group")) {
                set(subject, "apiGroup", json!("rbac.authorization.k8s.io"));
            }
        }
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[
            NAME,
            Column::text("Role"),
            AGE,
            Column::text("Users").wide(),
            Column::text("Groups").wide(),
            Column::text("ServiceAccounts").wide(),
        ];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        let subjects = |kind: &str| {
            row.object
                .get("subjects")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|s| s["kind"] == kind)
                .map(|s| match (kind, s["namespace"].as_str()) {
                    ("ServiceAccount", Some(ns)) => {
                        format!("{ns}/{}", s["name"].as_str().unwrap_or_default())
                    }
                    _ => s["name"].as_str().unwrap_or_default().to_owned(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        vec![
            row.name(),
            json!(format!(
                "{}/{}",
                row.str("/roleRef/kind"),
                row.str("/roleRef/name")
            )),
            row.age(),
            json!(subjects("User")),
            json!(subjects("Group")),
            json!(subjects("ServiceAccount")),
        ]
    }
}
