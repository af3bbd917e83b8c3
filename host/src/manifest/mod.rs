//! The `Reconciler` manifest: which module a guest runs, what it watches, its limits and
//! permissions. One YAML file per guest; a directory of them is the set of guests.
//!
//! Parsing is strict — unknown fields are errors — and every error names the file, the field and
//! the problem, e.g. `manifests/foo.yaml: spec.limits.memory: invalid quantity "64Xi"`.
//!
//! By job: [`types`] (what a manifest says, defaults and bounds), `units` (durations and
//! quantities), `load` (reading files and directories) and `validate` (every rule).

pub mod files;
mod load;
pub mod module_ref;
pub mod objects;
mod rollout;
mod schema;
pub mod tenancy;
pub mod types;
mod units;
mod validate;

use std::path::{Path, PathBuf};

pub use rollout::{PromotePolicy, RolloutMode, RolloutSpec};
pub use types::*;
pub use units::{UnitError, parse_cpu, parse_duration, parse_quantity};
pub use validate::{cluster_scoped_namespaces, is_builtin_cluster_scoped};

/// The manifest's `apiVersion`.
pub const API_VERSION: &str = "krec.dev/v1alpha1";
/// The manifest's `kind`.
pub const KIND: &str = "Reconciler";
/// The cluster-scoped kind a manifest may also be (the same spec, for cluster administrators).
pub const CLUSTER_KIND: &str = "ClusterReconciler";

/// A manifest that could not be read or is invalid.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("{path}: {error}")]
    Read {
        /// The manifest file.
        path: PathBuf,
        /// The I/O error (in the message, so not also a `source`: a chain would say it twice).
        error: std::io::Error,
    },
    /// The YAML does not describe a valid manifest.
    #[error("{path}: {field}{sep}{problem}", sep = if field.is_empty() { "" } else { ": " })]
    Invalid {
        /// The manifest file.
        path: PathBuf,
        /// Dotted path of the offending field, e.g. `spec.limits.memory`; empty for the whole file.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// The module named in a registry could not be resolved or pulled.
    #[error("{path}: {field}: {problem}")]
    Pull {
        /// The manifest file or object.
        path: PathBuf,
        /// `spec.module`, or `spec.pullSecret` when the credentials are at fault.
        field: &'static str,
        /// What went wrong, naming the reference.
        problem: String,
    },
    /// The module named in a registry is still being pulled (a slow registry): not an error
    /// yet — the running version, if any, stays, and the pull's end reloads.
    #[error("{path}: {field}: {reference} is still being pulled")]
    Pulling {
        /// The manifest file or object.
        path: PathBuf,
        /// `spec.module` or `spec.rollout.candidate`.
        field: &'static str,
        /// The reference.
        reference: String,
    },
    /// A tenant's guest would take its namespace over its quota.
    #[error("{path}: {problem}")]
    OverQuota {
        /// The object.
        path: PathBuf,
        /// By how much.
        problem: String,
    },
    /// Two manifests in one directory name the same guest.
    #[error("{path}: guest {name:?} is already defined by {first}")]
    Duplicate {
        /// The later manifest.
        path: PathBuf,
        /// The guest name.
        name: String,
        /// The manifest that defined it first.
        first: PathBuf,
    },
}

impl ManifestError {
    /// What kind of problem, in one CamelCase word (a status condition's reason).
    pub fn code(&self) -> &'static str {
        match self {
            ManifestError::Read { .. } => "Unreadable",
            ManifestError::Invalid { .. } => "Invalid",
            ManifestError::Duplicate { .. } => "Duplicate",
            ManifestError::OverQuota { .. } => "QuotaExceeded",
            ManifestError::Pull { .. } => "PullFailed",
            ManifestError::Pulling { .. } => "Pulling",
        }
    }

    /// The manifest file at fault.
    pub fn path(&self) -> &Path {
        match self {
            ManifestError::Read { path, .. }
            | ManifestError::Invalid { path, .. }
            | ManifestError::Duplicate { path, .. }
            | ManifestError::OverQuota { path, .. }
            | ManifestError::Pull { path, .. }
            | ManifestError::Pulling { path, .. } => path,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use krec_core::Gvk;
    use serde_json::json;

    const GOOD: &str = r#"
apiVersion: krec.dev/v1alpha1
kind: Reconciler
metadata: { name: pod-counter }
spec:
  module: ../target/pod_counter.wasm
  for: { apiVersion: apps/v1, kind: ReplicaSet }
  owns: [ { apiVersion: v1, kind: Pod } ]
  watches:
    - { apiVersion: v1, kind: ConfigMap, mapTo: { namespace: bbb, name: abc } }
  predicates: [ GenerationChanged, { labelSelector: "app=web" }, { eventTypes: [create, update] } ]
  namespaces: [ default ]
  maxConcurrentReconciles: 2
  rateLimiter: { baseDelay: 5ms, maxDelay: 1000s, qps: 10, burst: 100 }
  resyncPeriod: 10m
  tickers: [ { every: 1m30s, request: { name: tick } } ]
  limits: { timeout: 5s, memory: 64Mi, cpu: 500m, writeQps: 20, writeBurst: 30 }
  isolation: per-reconcile
  permissions:
    - { apiVersion: v1, kind: Pod, verbs: [get, list] }
    - { apiVersion: apps/v1, kind: ReplicaSet, verbs: [get, list, update], namespaces: [default] }
"#;

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(Path::new("dir/m.yaml"), text)
    }

    #[test]
    fn a_cluster_reconciler_file_should_be_a_manifest_too() {
        let cluster = parse(&GOOD.replace("kind: Reconciler", "kind: ClusterReconciler"))
            .expect("a ClusterReconciler");
        assert_eq!(cluster, parse(GOOD).expect("a Reconciler"));
    }

    #[test]
    fn deeply_nested_yaml_should_be_refused_before_it_is_parsed() {
        // 600 KB of brackets: over a minute of libyaml's quadratic scan before the check.
        let text = format!(
            "{GOOD}  config: {}{}\n",
            "[".repeat(300_000),
            "]".repeat(300_000)
        );
        let err = parse(&text).expect_err("too deep");
        assert!(
            err.to_string().contains("exceeded max depth of 128"),
            "{err}"
        );
        assert!(!super::load::declares_other_kind(&text));
    }

    #[test]
    fn a_rollout_should_be_resolved_defaulted_and_checked() {
        let with = |rollout: &str| parse(&format!("{GOOD}  rollout: {rollout}\n"));
        let m = with("{candidate: v2.wasm}").expect("valid");
        let rollout = m.spec.rollout.expect("a rollout");
        assert_eq!(rollout.candidate, Path::new("dir/v2.wasm"));
        assert_eq!(rollout.mode, RolloutMode::Shadow);
        assert_eq!((rollout.share, rollout.shadow_cpu), (10, 25));
        let canary = with("{candidate: v2.wasm, mode: canary, share: 25, critical: [spec.replicas], promote: {afterReconciles: 100, maxDivergencePercent: 1}}")
            .expect("valid");
        let rollout = canary.spec.rollout.expect("a rollout");
        assert_eq!(rollout.mode, RolloutMode::Canary);
        let pulled = with("{candidate: \"oci://r.example/guests/g:v2\"}").expect("valid");
        assert_eq!(
            pulled.spec.rollout.expect("a rollout").candidate,
            Path::new("oci://r.example/guests/g:v2"),
            "pulled when the guest loads"
        );
        assert_eq!(rollout.promote.map(|p| p.after_reconciles), Some(100));
        for (rollout, field) in [
            ("{candidate: v2.wasm, share: 0}", "spec.rollout.share"),
            (
                "{candidate: v2.wasm, shadowCpu: 101}",
                "spec.rollout.shadowCpu",
            ),
            ("{candidate: \"\"}", "spec.rollout.candidate"),
            (
                "{candidate: v2.wasm, promote: {afterReconciles: 0}}",
                "spec.rollout.promote.afterReconciles",
            ),
            (
                "{candidate: v2.wasm, critical: [\"spec.\"]}",
                "spec.rollout.critical[0]",
            ),
            (
                "{candidate: \"oci://r.example/\"}",
                "spec.rollout.candidate",
            ),
        ] {
            let err = with(rollout).expect_err(rollout);
            assert!(err.to_string().contains(field), "{rollout}: {err}");
        }
    }

    #[test]
    fn total_memory_should_default_to_four_instances_and_be_checked() {
        let m = parse(GOOD).expect("valid manifest");
        // Four instances at 64Mi; two workers and eight review instances at 8 MiB are fewer.
        assert_eq!(m.spec.total_memory(), 256 << 20);
        let many = GOOD.replace("maxConcurrentReconciles: 2", "maxConcurrentReconciles: 200");
        assert_eq!(
            parse(&many).expect("valid").spec.total_memory(),
            208 * (8 << 20)
        );
        let set = GOOD.replace("memory: 64Mi,", "memory: 64Mi, totalMemory: 1Gi,");
        assert_eq!(parse(&set).expect("valid").spec.total_memory(), 1 << 30);
        let small = GOOD.replace("memory: 64Mi,", "memory: 64Mi, totalMemory: 32Mi,");
        let err = parse(&small).expect_err("below one instance");
        assert!(err.to_string().contains("spec.limits.totalMemory"), "{err}");
    }

    #[test]
    fn parse_should_accept_every_documented_field() {
        let m = parse(GOOD).expect("valid manifest");
        assert_eq!(m.name, "pod-counter");
        assert_eq!(m.spec.module, Path::new("dir/../target/pod_counter.wasm"));
        assert_eq!(m.spec.max_concurrent_reconciles.get(), 2);
        assert_eq!(m.spec.resync_period, Some(Duration::from_secs(600)));
        assert_eq!(m.spec.tickers[0].every, Duration::from_secs(90));
        assert_eq!(m.spec.limits.memory, 64 << 20);
        assert_eq!(m.spec.limits.cpu, 0.5);
        assert_eq!(m.spec.limits.write_qps, 20.0);
        assert_eq!(m.spec.limits.write_burst, 30);
        assert_eq!(m.spec.isolation, Isolation::PerReconcile);
        assert_eq!(m.spec.predicates.len(), 3);
        let rs = Gvk::new("apps", "v1", "ReplicaSet");
        assert!(m.allows(Verb::Update, &rs, Some("default")));
        assert!(!m.allows(Verb::Update, &rs, Some("other")));
        assert!(
            !m.allows(Verb::Update, &rs, None),
            "all-namespace access needs an unrestricted permission"
        );
        assert!(!m.allows(Verb::Delete, &rs, Some("default")));
        assert!(m.allows(Verb::List, &Gvk::new("", "v1", "Pod"), None));
    }

    #[test]
    fn errors_should_name_file_field_and_problem() {
        let cases = [
            (
                GOOD.replace("memory: 64Mi", "memory: 64Xi"),
                "dir/m.yaml: spec.limits.memory: invalid quantity \"64Xi\"",
            ),
            (
                GOOD.replace("timeout: 5s", "timeout: 5 parsecs"),
                "spec.limits.timeout: invalid duration",
            ),
            (
                GOOD.replace("maxConcurrentReconciles: 2", "maxConcurrentReconciles: 0"),
                "spec.maxConcurrentReconciles: must be between 1 and 256 (got 0)",
            ),
            // Every number has an upper bound: an absurd one is refused here, not by the
            // host aborting on an allocation (issue 18).
            (
                GOOD.replace(
                    "maxConcurrentReconciles: 2",
                    "maxConcurrentReconciles: 4000000000",
                ),
                "spec.maxConcurrentReconciles: must be between 1 and 256 (got 4000000000)",
            ),
            (
                GOOD.replace("memory: 64Mi", "memory: 1000000Gi"),
                "spec.limits.memory: must be between 1Mi and 4Gi",
            ),
            (
                GOOD.replace("cpu: 500m", "cpu: 1000"),
                "spec.limits.cpu: must be between 10m and 64 cores",
            ),
            (
                GOOD.replace("cpu: 500m", "cpu: lots"),
                "spec.limits.cpu: invalid CPU quantity \"lots\"",
            ),
            (
                GOOD.replace("writeQps: 20", "writeQps: 0"),
                "spec.limits.writeQps: must be a positive number, at most 100000",
            ),
            (
                GOOD.replace("timeout: 5s", "timeout: 600s"),
                "spec.limits.timeout: must be positive and at most 300s",
            ),
            (
                GOOD.replace("resyncPeriod: 10m", "resyncPeriod: 1ms"),
                "spec.resyncPeriod: must be between 1s and 720h",
            ),
            (
                GOOD.replace("every: 1m30s", "every: 100000000h"),
                "spec.tickers[0].every: must be between 100ms and 720h",
            ),
            (
                GOOD.replace("GenerationChanged,", "GenerationChnaged,"),
                "spec.predicates[0]: unknown predicate \"GenerationChnaged\"",
            ),
            (
                GOOD.replace("isolation: per-reconcile", "isolation: sometimes"),
                "spec.isolation",
            ),
            (
                GOOD.replace("resyncPeriod", "resyncPeriode"),
                "spec.resyncPeriode: unknown field `resyncPeriode`, expected one of",
            ),
            (
                GOOD.replace("name: pod-counter", "name: Pod_Counter"),
                "metadata.name: \"Pod_Counter\" is not a valid guest name",
            ),
            (
                GOOD.replace("kind: Reconciler", "kind: Reconciller"),
                "kind: expected \"Reconciler\" or \"ClusterReconciler\", found \"Reconciller\"",
            ),
            (
                GOOD.replace("verbs: [get, list]", "verbs: [get, lsit]"),
                "spec.permissions[0].verbs[1]: unknown variant `lsit`",
            ),
            (
                GOOD.replace(
                    "mapTo: { namespace: bbb, name: abc }",
                    "mapTo: { name: abc }, mapByLabel: { key: x }",
                ),
                "spec.watches[0]: needs exactly one of mapTo, mapByLabel, mapByAnnotation, mapToNamespace, mapToOwner or mapByGuest",
            ),
            (
                GOOD.replace("app=web", "app in (web"),
                "spec.predicates[1].labelSelector: invalid selector",
            ),
            ("not: [valid".to_owned(), "dir/m.yaml: "),
        ];
        for (text, expected) in cases {
            let err = parse(&text).expect_err(expected).to_string();
            assert!(err.contains(expected), "expected {expected:?} in {err:?}");
            assert!(err.starts_with("dir/m.yaml"), "{err}");
        }
    }

    #[test]
    fn a_manifest_should_need_a_trigger() {
        let text = "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: idle}\nspec: {module: x.wasm}\n";
        let err = parse(text).expect_err("no trigger").to_string();
        assert!(err.contains("nothing would call the guest"), "{err}");
    }

    #[test]
    fn config_should_get_its_schemas_defaults_and_be_checked_against_it() {
        let with = |config: &str| {
            parse(&format!(
                "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: t}}\nspec:\n  module: x.wasm\n  for: {{apiVersion: v1, kind: Namespace}}\n{config}  configSchema:\n    type: object\n    properties:\n      annotation: {{type: string, pattern: '^[a-z.]+/[a-z]+$'}}\n      period: {{type: integer, minimum: 1, default: 30}}\n      tiers: {{type: array, items: {{type: object, properties: {{name: {{type: string}}}}}}}}\n      extra: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n    required: [annotation]\n"
            ))
        };
        let manifest =
            with("  config: {annotation: example.com/x, extra: {any: [1]}}\n").expect("valid");
        assert_eq!(
            manifest.spec.config,
            Some(json!({"annotation": "example.com/x", "period": 30, "extra": {"any": [1]}}))
        );
        for (config, expected) in [
            ("", "spec.config.annotation: Required value"),
            ("  config: {annotation: nope}\n", "spec.config.annotation: "),
            (
                "  config: {annotation: a.b/c, period: 0}\n",
                "spec.config.period: ",
            ),
            (
                "  config: {annotation: a.b/c, period: x}\n",
                "spec.config.period: ",
            ),
            (
                "  config: {annotation: a.b/c, colour: red}\n",
                "spec.config.colour: unknown field",
            ),
            (
                "  config: {annotation: a.b/c, tiers: [{name: a, size: 1}]}\n",
                "spec.config.tiers[0].size: unknown field",
            ),
        ] {
            let err = with(config)
                .err()
                .unwrap_or_else(|| panic!("{config:?} should be refused"))
                .to_string();
            assert!(
                err.starts_with("dir/m.yaml: ") && err.contains(expected),
                "{config:?}: {err}"
            );
        }
        let err = with("  config: {annotation: a.b/c, period: 0}\n")
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains("spec.configSchema"),
            "names the rule's origin: {err}"
        );
    }

    #[test]
    fn a_label_selector_predicate_should_take_kubernetes_structured_form_too() {
        let with =
            |selector: &str| parse(&GOOD.replace(r#"{ labelSelector: "app=web" }"#, selector));
        let m = with(
            r#"{ labelSelector: { matchLabels: { app: web }, matchExpressions: [ { key: tier, operator: In, values: [a, b] }, { key: legacy, operator: DoesNotExist } ] } }"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            m.spec.predicates[1],
            Predicate::LabelSelector("app=web,tier in (a,b),!legacy".into())
        );
        let err = with(
            r#"{ labelSelector: { matchExpressions: [ { key: tier, operator: Near, values: [a] } ] } }"#,
        )
        .expect_err("bad operator")
        .to_string();
        assert!(err.contains("\"Near\" is not a valid operator"), "{err}");
        let err = with(
            r#"{ labelSelector: { matchExpressions: [ { key: tier, operator: In, values: [] } ] } }"#,
        )
        .expect_err("In needs values")
        .to_string();
        assert!(err.contains("tier In: values must be non-empty"), "{err}");
    }

    #[test]
    fn a_file_that_is_no_manifest_should_say_what_it_is() {
        let err = |text: &str| {
            Manifest::parse(Path::new("f.yaml"), text)
                .expect_err("not a manifest")
                .to_string()
        };
        assert_eq!(
            err("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n"),
            "f.yaml: not a krec manifest (it is a ConfigMap; a manifest is a Reconciler or \
             ClusterReconciler of krec.dev/v1alpha1)"
        );
        assert!(
            err("hello world\n").contains("not a krec manifest (it is not a YAML mapping;"),
            "{}",
            err("hello world\n")
        );
        // A manifest with a bad field is still judged field by field.
        assert!(
            err("apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: x}\nspec: {module: a.wasm, bogus: 1}\n")
                .starts_with("f.yaml: spec.bogus: unknown field `bogus`")
        );
    }

    #[test]
    fn webhooks_should_be_validated_naming_the_field() {
        let manifest = |webhooks: &str| {
            format!(
                "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: hooks}}\nspec:\n  module: x.wasm\n  webhooks: {webhooks}\n"
            )
        };
        let rule = "{apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [CREATE]}";
        let ok = parse(&manifest(&format!("[{{type: mutating, rules: [{rule}]}}]")))
            .expect("a webhook alone is a trigger");
        assert_eq!(
            ok.spec.webhooks[0].name_for("hooks"),
            "mutating.hooks.krec.dev"
        );
        let cases = [
            (
                format!("[{{type: validating, rules: [{rule}], failurePolicy: Sometimes}}]"),
                "spec.webhooks[0].failurePolicy",
            ),
            (
                format!("[{{type: validating, rules: [{rule}]}}, {{type: validating, rules: [{rule}]}}]"),
                "spec.webhooks[1].name: two webhooks of this type",
            ),
            ("[{type: validating, rules: []}]".to_owned(), "spec.webhooks[0].rules"),
            (
                format!("[{{type: validating, rules: [{rule}], timeoutSeconds: 31}}]"),
                "spec.webhooks[0].timeoutSeconds",
            ),
            (
                format!("[{{type: validating, name: short, rules: [{rule}]}}]"),
                "spec.webhooks[0].name",
            ),
            (
                "[{type: validating, rules: [{apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [GET]}]}]".to_owned(),
                "spec.webhooks[0].rules[0].operations",
            ),
        ];
        for (webhooks, expected) in cases {
            let err = parse(&manifest(&webhooks)).expect_err(expected).to_string();
            assert!(err.contains(expected), "expected {expected:?} in {err:?}");
        }
    }

    #[test]
    fn durations_and_quantities_should_parse_like_kubernetes() {
        assert_eq!(parse_duration("5ms"), Ok(Duration::from_millis(5)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("-5s").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(parse_quantity("64Mi"), Ok(64 << 20));
        assert_eq!(parse_quantity("500M"), Ok(500_000_000));
        assert_eq!(parse_quantity("1024"), Ok(1024));
        assert!(parse_quantity("64XB").is_err());
        assert!(parse_quantity("99999999999999Gi").is_err());
    }

    proptest::proptest! {
        /// Manifest text is untrusted input (a file dropped on a guest volume): any text, and
        /// any single-line change of a valid manifest, parses or fails with an error naming
        /// the file, and never panics.
        #[test]
        fn any_manifest_text_should_parse_or_be_refused(text in ".{0,300}") {
            if let Err(err) = Manifest::parse(Path::new("m.yaml"), &text) {
                proptest::prop_assert!(err.to_string().starts_with("m.yaml"));
            }
        }

        #[test]
        fn numbers_and_units_should_parse_or_be_refused(text in "[0-9.]{0,40}(ns|us|ms|s|m|h|Ki|Mi|Gi|k|M|G|x|)") {
            let _ = parse_duration(&text);
            let _ = parse_quantity(&text);
            let _ = parse_cpu(&text);
        }

        #[test]
        fn a_changed_line_of_a_valid_manifest_should_parse_or_be_refused(
            line in 0usize..40,
            replacement in "[ -~]{0,60}",
        ) {
            let mut lines: Vec<String> = GOOD.lines().map(str::to_owned).collect();
            if line < lines.len() {
                lines[line] = replacement;
            }
            let text = lines.join("\n");
            if let Err(err) = Manifest::parse(Path::new("dir/m.yaml"), &text) {
                proptest::prop_assert!(err.to_string().starts_with("dir/m.yaml"));
            }
        }
    }
}
