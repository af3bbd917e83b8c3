//! Endpoints: `printEndpoints`'s row (the first three addresses with their ports).

use serde_json::{Value, json};

use crate::printers::{AGE, Column, NAME, Row, first_three};
use crate::registry::Strategy;

/// The Endpoints strategy.
pub struct EndpointsStrategy;

/// The Endpoints strategy.
pub static STRATEGY: EndpointsStrategy = EndpointsStrategy;

impl Strategy for EndpointsStrategy {
    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[NAME, Column::text("Endpoints"), AGE];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        let mut list = Vec::new();
        for subset in row.object["subsets"].as_array().into_iter().flatten() {
            let ports: Vec<String> = subset["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| p["port"].to_string())
                .collect();
            for address in subset["addresses"].as_array().into_iter().flatten() {
                let ip = address["ip"].as_str().unwrap_or_default();
                if ports.is_empty() {
                    list.push(ip.to_owned());
                }
                list.extend(ports.iter().map(|p| format!("{ip}:{p}")));
            }
        }
        vec![row.name(), json!(first_three(&list)), row.age()]
    }
}
