//! ConfigMaps: `data` and `binaryData` are maps of strings with a size limit, kept as they are
//! once the ConfigMap is `immutable`.

use serde_json::{Map, Value, json};

use crate::printers::{AGE, Column, NAME, Row};
use crate::registry::Strategy;
use krec_core::error::Cause;

/// The ConfigMap strategy.
pub struct ConfigMapStrategy;

/// The ConfigMap strategy.
pub static STRATEGY: ConfigMapStrategy = ConfigMapStrategy;

impl Strategy for ConfigMapStrategy {
    fn string_maps(&self) -> &'static [&'static str] {
        &["data", "binaryData"]
    }

    fn bytes_maps(&self) -> &'static [&'static str] {
        &["binaryData"]
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        validate_data("[]", object, old)
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[NAME, Column::int("Data"), AGE];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        let count = |p: &str| {
            row.object
                .get(p)
                .and_then(Value::as_object)
                .map_or(0, Map::len)
        };
        vec![
            row.name(),
            json!(count("data") + count("binaryData")),
            row.age(),
        ]
    }
}

/// Most bytes a ConfigMap's or Secret's data may hold (`data` and `binaryData` together).
pub(crate) const MAX_DATA_BYTES: usize = 1 << 20;

/// The rules ConfigMaps and Secrets share: their data has a size limit (reported on `field`),
/// and once `immutable`, they keep their data and stay immutable.
pub(crate) fn validate_data(field: &str, object: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let keys = |f: &str| {
        object
            .get(f)
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.keys())
    };
    for map in ["data", "binaryData"] {
        for key in keys(map) {
            for problem in crate::validation::config_map_key_problems(key) {
                causes.push((
                    format!("{map}[{key}]"),
                    format!("Invalid value: {key:?}: {problem}"),
                ));
            }
        }
    }
    let binary: Vec<&String> = keys("binaryData").collect();
    for key in keys("data").filter(|k| binary.contains(k)) {
        causes.push((
            format!("data[{key}]"),
            format!("Invalid value: {key:?}: duplicate of key present in binaryData"),
        ));
    }
    let size: usize = ["data", "binaryData", "stringData"]
        .iter()
        .filter_map(|f| object.get(*f).and_then(Value::as_object))
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if size > MAX_DATA_BYTES {
        causes.push((
            field.into(),
            format!("Too long: must have at most {MAX_DATA_BYTES} bytes"),
        ));
    }
    if let Some(old) = old.filter(|o| o.get("immutable") == Some(&Value::Bool(true))) {
        if object.get("immutable") != Some(&Value::Bool(true)) {
            causes.push((
                "immutable".into(),
                "Forbidden: field is immutable when `immutable` is set".into(),
            ));
        }
        for field in ["data", "binaryData"] {
            let empty =
                |v: Option<&Value>| v.and_then(Value::as_object).is_none_or(|m| m.is_empty());
            let (was, is) = (old.get(field), object.get(field));
            if was != is && !(empty(was) && empty(is)) {
                causes.push((
                    field.into(),
                    "Forbidden: field is immutable when `immutable` is set".into(),
                ));
            }
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_immutable_config_map_should_keep_its_data_and_data_should_be_limited() {
        let old = json!({"immutable": true, "data": {"a": "b"}});
        let new = json!({"immutable": true, "data": {"a": "c"}});
        assert_eq!(
            STRATEGY.validate(&new, Some(&old)),
            vec![(
                "data".to_owned(),
                "Forbidden: field is immutable when `immutable` is set".to_owned()
            )]
        );
        let big = json!({"data": {"a": "x".repeat(MAX_DATA_BYTES + 1)}});
        assert!(STRATEGY.validate(&big, None)[0].1.starts_with("Too long"));
    }
}
