//! EndpointSlices: `printEndpointSlice`'s row.

use serde_json::{Value, json};

use crate::printers::{AGE, Column, NAME, Row, first_three};
use crate::registry::Strategy;

/// The EndpointSlice strategy.
pub struct EndpointSliceStrategy;

/// The EndpointSlice strategy.
pub static STRATEGY: EndpointSliceStrategy = EndpointSliceStrategy;

impl Strategy for EndpointSliceStrategy {
    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[
            NAME,
            Column::text("AddressType"),
            Column::text("Ports"),
            Column::text("Endpoints"),
            AGE,
        ];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        let ports: Vec<String> = row.object["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| match p["port"].as_i64() {
                Some(port) => port.to_string(),
                None => "<unset>".to_owned(),
            })
            .collect();
        let addresses: Vec<String> = row.object["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|e| e["addresses"].as_array().into_iter().flatten())
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect();
        let ports = if ports.is_empty() {
            "<unset>".to_owned()
        } else {
            ports.join(",")
        };
        vec![
            row.name(),
            json!(row.str("/addressType")),
            json!(ports),
            json!(first_three(&addresses)),
            row.age(),
        ]
    }
}
