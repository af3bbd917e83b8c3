//! Validating and mutating webhook configurations: their defaults and validation
//! ([`crate::admissionregistration`], shared with the admission chain that reads them) and
//! `printValidatingWebhookConfiguration`'s row.

use serde_json::{Value, json};

use crate::admissionregistration::{self, HookKind};
use crate::error::Cause;
use crate::printers::{AGE, Column, NAME, Row};
use crate::registry::Strategy;

/// The strategy of one of the two webhook configuration kinds.
pub struct WebhookConfigurationStrategy(HookKind);

/// The ValidatingWebhookConfiguration strategy.
pub static VALIDATING: WebhookConfigurationStrategy =
    WebhookConfigurationStrategy(HookKind::Validating);

/// The MutatingWebhookConfiguration strategy.
pub static MUTATING: WebhookConfigurationStrategy =
    WebhookConfigurationStrategy(HookKind::Mutating);

impl Strategy for WebhookConfigurationStrategy {
    fn default(&self, object: &mut Value) {
        admissionregistration::apply_defaults(self.0, object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        admissionregistration::validate(self.0, object)
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[NAME, Column::int("Webhooks"), AGE];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        let webhooks = row
            .object
            .get("webhooks")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        vec![row.name(), json!(webhooks), row.age()]
    }
}
