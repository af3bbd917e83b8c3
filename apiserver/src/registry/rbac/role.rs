//! Roles and ClusterRoles: printed with their creation time.

use serde_json::Value;

use crate::printers::{Column, Row};
use crate::registry::apiextensions::crd::{CREATED_AT, created_at};
use crate::registry::{Names, Strategy};

/// The strategy of Roles and ClusterRoles.
pub struct RoleStrategy;

/// The strategy of Roles and ClusterRoles.
pub static STRATEGY: RoleStrategy = RoleStrategy;

impl Strategy for RoleStrategy {
    fn names(&self) -> Names {
        Names::PathSegment
    }

    fn columns(&self) -> &'static [Column] {
        CREATED_AT
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        created_at(row)
    }
}
