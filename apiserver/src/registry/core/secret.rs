//! Secrets: `data` and `stringData` are maps of strings.

use crate::registry::Strategy;

/// The Secret strategy.
pub struct SecretStrategy;

/// The Secret strategy.
pub static STRATEGY: SecretStrategy = SecretStrategy;

impl Strategy for SecretStrategy {
    fn string_maps(&self) -> &'static [&'static str] {
        &["data", "stringData"]
    }
}
