//! Leases: `printLease`'s row (the holder).

use serde_json::{Value, json};

use crate::printers::{AGE, Column, NAME, Row};
use crate::registry::Strategy;
use krec_core::json::Pointer;

/// The Lease strategy.
pub struct LeaseStrategy;

/// The Lease strategy.
pub static STRATEGY: LeaseStrategy = LeaseStrategy;

impl Strategy for LeaseStrategy {
    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[NAME, Column::text("Holder"), AGE];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        let holder = row
            .object
            .at("/spec/holderIdentity")
            .and_then(Value::as_str)
            .unwrap_or("<unknown>");
        vec![row.name(), json!(holder), row.age()]
    }
}
