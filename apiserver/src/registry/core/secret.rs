//! Secrets: `type: Opaque` by default, `stringData` folded into `data`, `data` and `stringData`
//! maps of strings with the ConfigMap's size and immutability rules.

use serde_json::{Map, Value, json};

use super::configmap::validate_data;
use crate::defaults::{child, set};
use crate::printers::{AGE, Column, NAME, Row};
use crate::registry::Strategy;
use krec_core::error::Cause;
use krec_core::selector::FieldLabel;

/// The Secret strategy.
pub struct SecretStrategy;

/// The Secret strategy.
pub static STRATEGY: SecretStrategy = SecretStrategy;

impl Strategy for SecretStrategy {
    /// `SetDefaults_Secret` and the secret strategy: `type: Opaque`, and `stringData` folded
    /// into `data` (base64), winning over the same key in `data`.
    fn default(&self, object: &mut Value) {
        use base64::Engine as _;
        set(object, "type", json!("Opaque"));
        // Non-string values are left for validation to refuse, as kube-apiserver's decoder does.
        let all_strings = object
            .get("stringData")
            .and_then(Value::as_object)
            .is_some_and(|m| m.values().all(Value::is_string));
        if !all_strings {
            return;
        }
        let Some(Value::Object(strings)) =
            object.as_object_mut().and_then(|o| o.remove("stringData"))
        else {
            return;
        };
        let data = child(object, "data");
        for (key, value) in strings {
            if let Value::String(text) = value {
                data[key] = json!(base64::engine::general_purpose::STANDARD.encode(text));
            }
        }
    }

    fn string_maps(&self) -> &'static [&'static str] {
        &["data", "stringData"]
    }

    fn bytes_maps(&self) -> &'static [&'static str] {
        &["data"]
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        validate_data("data", object, old)
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[NAME, Column::text("Type"), Column::int("Data"), AGE];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        let data = row
            .object
            .get("data")
            .and_then(Value::as_object)
            .map_or(0, Map::len);
        vec![row.name(), json!(row.str("/type")), json!(data), row.age()]
    }

    fn field_labels(&self) -> &'static [FieldLabel] {
        &[("type", "/type", "")]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_data_should_be_folded_into_data() {
        let mut s = json!({"data": {"a": "eA=="}, "stringData": {"a": "y", "b": "z"}});
        STRATEGY.default(&mut s);
        assert_eq!(
            s,
            json!({"type": "Opaque", "data": {"a": "eQ==", "b": "eg=="}})
        );
    }
}
