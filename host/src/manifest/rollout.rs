//! `spec.rollout`: a candidate module beside the running one, how it is tried and when it is
//! promoted.

use std::path::PathBuf;

use serde::Deserialize;

/// `spec.rollout`: a candidate module and how it is tried.
#[derive(Clone, Debug, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RolloutSpec {
    /// Path of the candidate's `.wasm` component, resolved as `module` is.
    #[schemars(with = "String")]
    pub candidate: PathBuf,
    /// `shadow` (dry runs beside the live version) or `canary` (a share of the keys for real).
    #[serde(default)]
    pub mode: RolloutMode,
    /// Canary: the percentage of keys (1–100, by a stable hash of namespace/name) the
    /// candidate reconciles instead of the live version.
    #[serde(default = "default_canary_share")]
    pub share: u8,
    /// The candidate's `config` (default: `spec.config`), checked against `configSchema`.
    #[serde(default)]
    #[schemars(schema_with = "crate::manifest::schema::any_value")]
    pub config: Option<serde_json::Value>,
    /// Shadow: the most of one core the candidate's shadow reconciles may use, in percent
    /// (1–100); requests it cannot keep up with are skipped (counted `skipped`).
    #[serde(default = "default_shadow_cpu")]
    pub shadow_cpu: u8,
    /// When to promote the candidate on its own; without it, only by hand.
    #[serde(default)]
    pub promote: Option<PromotePolicy>,
    /// Field paths (e.g. `spec.replicas`) whose divergence rolls the candidate back at once.
    #[serde(default)]
    pub critical: Vec<String>,
    /// Compared reconciles before the error rates of the two versions are weighed (a trap
    /// beyond the live version's rolls back at once).
    #[serde(default = "default_min_reconciles")]
    pub min_reconciles: u32,
}

/// How a candidate is tried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutMode {
    /// Beside the live version on every request, writes as dry runs, compared.
    #[default]
    Shadow,
    /// For real, on `share` percent of the keys.
    Canary,
}

/// When a candidate is promoted.
#[derive(Clone, Debug, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PromotePolicy {
    /// Compared (shadow) or reconciled (canary) requests before promotion.
    pub after_reconciles: u32,
    /// The most divergent reconciles allowed, in percent of those compared.
    #[serde(default)]
    pub max_divergence_percent: f64,
}

fn default_canary_share() -> u8 {
    10
}

fn default_shadow_cpu() -> u8 {
    25
}

fn default_min_reconciles() -> u32 {
    20
}
