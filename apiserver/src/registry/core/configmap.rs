//! ConfigMaps: `data` and `binaryData` are maps of strings.

use crate::registry::Strategy;

/// The ConfigMap strategy.
pub struct ConfigMapStrategy;

/// The ConfigMap strategy.
pub static STRATEGY: ConfigMapStrategy = ConfigMapStrategy;

impl Strategy for ConfigMapStrategy {
    fn string_maps(&self) -> &'static [&'static str] {
        &["data", "binaryData"]
    }
}
