//! Validating a parsed manifest: every rule, each error naming its field.

use std::time::Duration;

use krec_core::Gvk;
use krec_core::selector::{LabelSelector, is_dns_label, is_dns_subdomain};

use super::types::*;

/// A field of a manifest's spec that is wrong (its path, e.g. `spec.limits.timeout`) and
/// why; the manifest file is named when it becomes a [`super::ManifestError`].
#[derive(Debug)]
pub(super) struct FieldProblem(pub(super) String, pub(super) String);

pub(super) fn validate_kind(field: &str, kind: &KindRef) -> Result<(), FieldProblem> {
    validate_api_version(field, &kind.api_version)?;
    if kind.kind.is_empty()
        || !kind
            .kind
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_uppercase())
    {
        return Err(FieldProblem(
            format!("{field}.kind"),
            format!("{:?} is not a CamelCase kind", kind.kind),
        ));
    }
    Ok(())
}

pub(super) fn validate_api_version(field: &str, api_version: &str) -> Result<(), FieldProblem> {
    let ok = match api_version.split_once('/') {
        Some((group, version)) => is_dns_subdomain(group) && is_dns_label(version),
        None => is_dns_label(api_version),
    };
    if ok {
        Ok(())
    } else {
        Err(FieldProblem(
            format!("{field}.apiVersion"),
            format!("{api_version:?} is not of the form `v1` or `group/version`"),
        ))
    }
}

/// The webhooks' fields, with the values kube-apiserver would accept in the configuration
/// the host registers for them (so a mistake is reported here, naming the manifest's field).
pub(super) fn validate_webhooks(webhooks: &[WebhookSpec]) -> Result<(), FieldProblem> {
    let one_of = |field: String, value: &Option<String>, allowed: &[&str]| match value {
        Some(v) if !allowed.contains(&v.as_str()) => Err(FieldProblem(
            field,
            format!("{v:?} is not one of {}", allowed.join(", ")),
        )),
        _ => Ok(()),
    };
    let mut names = std::collections::HashSet::new();
    for (i, hook) in webhooks.iter().enumerate() {
        let field = format!("spec.webhooks[{i}]");
        if let Some(name) = &hook.name
            && (!is_dns_subdomain(name) || name.split('.').count() < 3)
        {
            return Err(FieldProblem(
                format!("{field}.name"),
                format!(
                    "{name:?} must be a domain of at least three labels, e.g. `foo.example.com`"
                ),
            ));
        }
        // Unnamed webhooks are named after their type and guest: two of a type need names.
        if !names.insert(hook.name_for("GUEST")) {
            return Err(FieldProblem(
                format!("{field}.name"),
                match &hook.name {
                    Some(name) => format!("{name:?} is used twice"),
                    None => "two webhooks of this type: give each a `name`".into(),
                },
            ));
        }
        if hook.rules.is_empty() {
            return Err(FieldProblem(
                format!("{field}.rules"),
                "at least one rule is required (apiGroups, apiVersions, resources, operations)"
                    .into(),
            ));
        }
        for (j, rule) in hook.rules.iter().enumerate() {
            let rule_field = format!("{field}.rules[{j}]");
            for (key, values) in [
                ("apiGroups", &rule.api_groups),
                ("apiVersions", &rule.api_versions),
                ("resources", &rule.resources),
                ("operations", &rule.operations),
            ] {
                if values.is_empty() {
                    return Err(FieldProblem(
                        format!("{rule_field}.{key}"),
                        "must not be empty".into(),
                    ));
                }
            }
            for op in &rule.operations {
                if !["*", "CREATE", "UPDATE", "DELETE", "CONNECT"].contains(&op.as_str()) {
                    return Err(FieldProblem(
                        format!("{rule_field}.operations"),
                        format!("{op:?} is not one of CREATE, UPDATE, DELETE, CONNECT, *"),
                    ));
                }
            }
            one_of(
                format!("{rule_field}.scope"),
                &rule.scope,
                &["*", "Cluster", "Namespaced"],
            )?;
        }
        one_of(
            format!("{field}.failurePolicy"),
            &hook.failure_policy,
            &["Fail", "Ignore"],
        )?;
        one_of(
            format!("{field}.sideEffects"),
            &hook.side_effects,
            &["None", "NoneOnDryRun"],
        )?;
        one_of(
            format!("{field}.matchPolicy"),
            &hook.match_policy,
            &["Equivalent", "Exact"],
        )?;
        one_of(
            format!("{field}.reinvocationPolicy"),
            &hook.reinvocation_policy,
            &["Never", "IfNeeded"],
        )?;
        if hook.reinvocation_policy.is_some() && hook.kind == WebhookType::Validating {
            return Err(FieldProblem(
                format!("{field}.reinvocationPolicy"),
                "only mutating webhooks are reinvoked".into(),
            ));
        }
        if let Some(timeout) = hook.timeout_seconds
            && !(1..=30).contains(&timeout)
        {
            return Err(FieldProblem(
                format!("{field}.timeoutSeconds"),
                format!("{timeout} is not between 1 and 30"),
            ));
        }
        for (key, selector) in [
            ("namespaceSelector", &hook.namespace_selector),
            ("objectSelector", &hook.object_selector),
        ] {
            if let Some(selector) = selector
                && !selector.is_object()
            {
                return Err(FieldProblem(
                    format!("{field}.{key}"),
                    "must be a label selector (matchLabels, matchExpressions)".into(),
                ));
            }
        }
    }
    Ok(())
}

/// Check `spec.config` against `spec.configSchema`, filling in the schema's defaults (an absent
/// config becomes `{}` with its defaults).
pub(super) fn configure(spec: &mut ReconcilerSpec) -> Result<(), FieldProblem> {
    let Some(schema) = &spec.config_schema else {
        return Ok(());
    };
    if !schema.is_object() {
        return Err(FieldProblem(
            "spec.configSchema".into(),
            "must be an OpenAPI v3 schema (an object, e.g. {type: object, properties: …})".into(),
        ));
    }
    let config = spec
        .config
        .get_or_insert_with(|| serde_json::Value::Object(Default::default()));
    check_config(schema, config, "spec.config")?;
    if let Some(config) = spec.rollout.as_mut().and_then(|r| r.config.as_mut()) {
        check_config(schema, config, "spec.rollout.config")?;
    }
    Ok(())
}

/// Fill in `schema`'s defaults in `config` (at `field`) and check it against the schema.
fn check_config(
    schema: &serde_json::Value,
    config: &mut serde_json::Value,
    field: &str,
) -> Result<(), FieldProblem> {
    krec_core::schema::apply_defaults(schema, config);
    let at = |path: &str| {
        if path.is_empty() {
            field.to_owned()
        } else {
            format!("{field}.{path}")
        }
    };
    if let Some(path) = undeclared(schema, config, String::new()) {
        return Err(FieldProblem(
            at(&path),
            "unknown field: spec.configSchema does not declare it".into(),
        ));
    }
    if let Some((path, message)) = krec_core::schema::validate(schema, config)
        .into_iter()
        .next()
    {
        let path = if path == "<root>" {
            String::new()
        } else {
            path
        };
        return Err(FieldProblem(
            at(&path),
            format!("{message} (spec.configSchema)"),
        ));
    }
    Ok(())
}

/// Check `spec.rollout`'s bounds.
fn validate_rollout(rollout: &super::RolloutSpec) -> Result<(), FieldProblem> {
    let problem =
        |field: &str, p: &str| Err(FieldProblem(format!("spec.rollout.{field}"), p.into()));
    if rollout.candidate.as_os_str().is_empty() {
        return problem("candidate", "must name the candidate's .wasm component");
    }
    if !(1..=100).contains(&rollout.share) {
        return problem("share", "must be a percentage of the keys, 1 to 100");
    }
    if !(1..=100).contains(&rollout.shadow_cpu) {
        return problem("shadowCpu", "must be a percentage of one core, 1 to 100");
    }
    if let Some(promote) = &rollout.promote {
        if promote.after_reconciles == 0 {
            return problem("promote.afterReconciles", "must be at least 1");
        }
        if !(0.0..=100.0).contains(&promote.max_divergence_percent) {
            return problem("promote.maxDivergencePercent", "must be 0 to 100");
        }
    }
    for (i, path) in rollout.critical.iter().enumerate() {
        if path.is_empty() || path.starts_with('.') || path.ends_with('.') {
            return problem(
                &format!("critical[{i}]"),
                "must be a field path such as spec.replicas",
            );
        }
    }
    Ok(())
}

/// The path of the first field of `value` that `schema` does not declare, where it declares
/// `properties` and allows nothing else.
pub(super) fn undeclared(
    schema: &serde_json::Value,
    value: &serde_json::Value,
    path: String,
) -> Option<String> {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match value {
        serde_json::Value::Object(map) => {
            let open = schema
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(serde_json::Value::as_bool)
                == Some(true);
            let properties = schema
                .get("properties")
                .and_then(serde_json::Value::as_object);
            let additional = schema.get("additionalProperties");
            for (key, child) in map {
                let child_schema = properties
                    .and_then(|p| p.get(key))
                    .or(additional.filter(|a| a.is_object()));
                match child_schema {
                    Some(child_schema) => {
                        if let Some(found) = undeclared(child_schema, child, join(key)) {
                            return Some(found);
                        }
                    }
                    None if open
                        || additional.and_then(serde_json::Value::as_bool) == Some(true) => {}
                    None if properties.is_none() && additional.is_none() => {}
                    None => return Some(join(key)),
                }
            }
            None
        }
        serde_json::Value::Array(items) => {
            let item_schema = schema.get("items")?;
            items
                .iter()
                .enumerate()
                .find_map(|(i, item)| undeclared(item_schema, item, format!("{path}[{i}]")))
        }
        _ => None,
    }
}

pub(super) fn validate_spec(spec: &ReconcilerSpec) -> Result<(), FieldProblem> {
    let problem = |field: &str, p: String| Err(FieldProblem(field.to_owned(), p));
    if spec.module.as_os_str().is_empty() {
        return problem(
            "spec.module",
            "must name the guest's .wasm component".into(),
        );
    }
    if let Some(k) = &spec.for_kind {
        validate_kind("spec.for", k)?;
    }
    if let Some(rollout) = &spec.rollout {
        validate_rollout(rollout)?;
    }
    for (i, k) in spec.owns.iter().enumerate() {
        validate_kind(&format!("spec.owns[{i}]"), k)?;
        if spec.for_kind.is_none() {
            return problem(
                &format!("spec.owns[{i}]"),
                "owned kinds map to their controller owner of the `for` kind, so `for` is required"
                    .into(),
            );
        }
    }
    for (i, w) in spec.watches.iter().enumerate() {
        let field = format!("spec.watches[{i}]");
        validate_kind(&field, &w.kind_ref())?;
        let mappings = [
            w.map_to.is_some(),
            w.map_by_label.is_some(),
            w.map_by_annotation.is_some(),
            w.map_to_namespace,
            w.map_to_owner.is_some(),
            w.map_by_guest,
        ];
        if mappings.iter().filter(|m| **m).count() != 1 {
            return problem(
                &field,
                "needs exactly one of mapTo, mapByLabel, mapByAnnotation, mapToNamespace, mapToOwner or mapByGuest".into(),
            );
        }
        if let Some(m) = &w.map_to {
            validate_request(&format!("{field}.mapTo"), m)?;
        }
        if let Some(owner) = &w.map_to_owner {
            validate_kind(&format!("{field}.mapToOwner"), owner)?;
            if owner.metadata_only {
                return problem(
                    &format!("{field}.mapToOwner.metadataOnly"),
                    "names the owners' kind, which is not watched: set metadataOnly on the watch itself".into(),
                );
            }
        }
        for (name, mapping) in [
            ("mapByLabel", &w.map_by_label),
            ("mapByAnnotation", &w.map_by_annotation),
        ] {
            if let Some(m) = mapping
                && m.key.is_empty()
            {
                return problem(&format!("{field}.{name}.key"), "must not be empty".into());
            }
            if let Some(m) = mapping
                && m.namespace_key.as_deref() == Some("")
            {
                return problem(
                    &format!("{field}.{name}.namespaceKey"),
                    "must not be empty".into(),
                );
            }
        }
    }
    for (i, p) in spec.predicates.iter().enumerate() {
        if let Predicate::LabelSelector(s) = p
            && let Err(e) = LabelSelector::parse(s)
        {
            return problem(
                &format!("spec.predicates[{i}].labelSelector"),
                e.to_string(),
            );
        }
    }
    for (i, ns) in spec.namespaces.iter().enumerate() {
        if !is_dns_label(ns) {
            return problem(
                &format!("spec.namespaces[{i}]"),
                format!("{ns:?} is not a valid namespace"),
            );
        }
    }
    let rl = &spec.rate_limiter;
    if rl.base_delay < Duration::from_millis(1) || rl.base_delay > rl.max_delay {
        return problem(
            "spec.rateLimiter.baseDelay",
            "must be at least 1ms and at most maxDelay".into(),
        );
    }
    if rl.max_delay > MAX_PERIOD {
        return problem(
            "spec.rateLimiter.maxDelay",
            format!("must be at most {}", show_duration(MAX_PERIOD)),
        );
    }
    if !(rl.qps.is_finite() && rl.qps > 0.0 && rl.qps <= MAX_QPS) {
        return problem(
            "spec.rateLimiter.qps",
            format!("must be a positive number, at most {MAX_QPS}"),
        );
    }
    if rl.burst == 0 || rl.burst > MAX_BURST {
        return problem(
            "spec.rateLimiter.burst",
            format!("must be between 1 and {MAX_BURST}"),
        );
    }
    if let Some(period) = spec.resync_period
        && !(MIN_PERIOD..=MAX_PERIOD).contains(&period)
    {
        return problem(
            "spec.resyncPeriod",
            format!(
                "must be between {} and {}",
                show_duration(MIN_PERIOD),
                show_duration(MAX_PERIOD)
            ),
        );
    }
    if spec.tickers.len() > MAX_TICKERS {
        return problem(
            "spec.tickers",
            format!("at most {MAX_TICKERS} tickers (got {})", spec.tickers.len()),
        );
    }
    for (i, t) in spec.tickers.iter().enumerate() {
        if !(MIN_TICKER..=MAX_PERIOD).contains(&t.every) {
            return problem(
                &format!("spec.tickers[{i}].every"),
                format!(
                    "must be between {} and {}",
                    show_duration(MIN_TICKER),
                    show_duration(MAX_PERIOD)
                ),
            );
        }
        validate_request(&format!("spec.tickers[{i}].request"), &t.request)?;
    }
    if spec.for_kind.is_none()
        && spec.watches.is_empty()
        && spec.tickers.is_empty()
        && spec.webhooks.is_empty()
        && spec.conversion.is_none()
    {
        return problem(
            "spec",
            "nothing would call the guest: set `for`, `watches`, `tickers`, `webhooks` or `conversion`"
                .into(),
        );
    }
    validate_webhooks(&spec.webhooks)?;
    if let Some(conversion) = &spec.conversion {
        let crd = &conversion.crd;
        let labels = crd.split('.').count();
        if labels < 3 || !is_dns_subdomain(crd) {
            return problem(
                "spec.conversion.crd",
                format!(
                    "{crd:?} is not a CRD name: {{plural}}.{{group}}, e.g. foos.samplecontroller.k8s.io"
                ),
            );
        }
    }
    if spec.limits.timeout.is_zero() || spec.limits.timeout > MAX_TIMEOUT {
        return problem(
            "spec.limits.timeout",
            format!(
                "must be positive and at most {}",
                show_duration(MAX_TIMEOUT)
            ),
        );
    }
    if !(MIN_MEMORY..=MAX_MEMORY).contains(&spec.limits.memory) {
        return problem(
            "spec.limits.memory",
            "must be between 1Mi and 4Gi (a wasm32 guest addresses at most 4Gi)".into(),
        );
    }
    if let Some(total) = spec.limits.total_memory
        && !(spec.limits.memory..=MAX_TOTAL_MEMORY).contains(&total)
    {
        return problem(
            "spec.limits.totalMemory",
            "must be at least spec.limits.memory (one instance's) and at most 64Gi".into(),
        );
    }
    if !(MIN_CPU..=MAX_CPU).contains(&spec.limits.cpu) {
        return problem(
            "spec.limits.cpu",
            format!("must be between 10m and {MAX_CPU} cores"),
        );
    }
    let max_rate = f64::from(MAX_WRITE_RATE);
    if !(spec.limits.write_qps.is_finite()
        && spec.limits.write_qps > 0.0
        && spec.limits.write_qps <= max_rate)
    {
        return problem(
            "spec.limits.writeQps",
            format!("must be a positive number, at most {MAX_WRITE_RATE}"),
        );
    }
    if spec.limits.write_burst == 0 || spec.limits.write_burst > MAX_WRITE_RATE {
        return problem(
            "spec.limits.writeBurst",
            format!("must be between 1 and {MAX_WRITE_RATE}"),
        );
    }
    for (i, k) in spec.uncached.iter().enumerate() {
        validate_kind(&format!("spec.uncached[{i}]"), k)?;
        if k.metadata_only {
            return problem(
                &format!("spec.uncached[{i}].metadataOnly"),
                "uncached reads go to the API server whole: metadataOnly is for `for`, `owns` and `watches`".into(),
            );
        }
    }
    for (i, p) in spec.permissions.iter().enumerate() {
        let field = format!("spec.permissions[{i}]");
        validate_kind(
            &field,
            &KindRef {
                api_version: p.api_version.clone(),
                kind: p.kind.clone(),
                metadata_only: false,
            },
        )?;
        if p.verbs.is_empty() {
            return problem(
                &format!("{field}.verbs"),
                "must list at least one verb".into(),
            );
        }
        let gvk = Gvk::from_api_version(&p.api_version, &p.kind);
        if !p.namespaces.is_empty() && is_builtin_cluster_scoped(&gvk) {
            return problem(
                &format!("{field}.namespaces"),
                cluster_scoped_namespaces(&gvk),
            );
        }
        for (j, ns) in p.namespaces.iter().enumerate() {
            if !is_dns_label(ns) {
                return problem(
                    &format!("{field}.namespaces[{j}]"),
                    format!("{ns:?} is not a valid namespace"),
                );
            }
        }
    }
    Ok(())
}

/// Whether `gvk` is one of Kubernetes' own cluster-scoped kinds ([`krec_core::kinds`]). A
/// permission's `namespaces` cannot restrict them; custom resources are checked against
/// discovery when the guest starts.
pub fn is_builtin_cluster_scoped(gvk: &Gvk) -> bool {
    krec_core::kinds::is_builtin_cluster_scoped(&gvk.group, &gvk.kind)
}

/// The problem with `namespaces` on a permission for the cluster-scoped kind `gvk`.
pub fn cluster_scoped_namespaces(gvk: &Gvk) -> String {
    format!(
        "{gvk} is cluster-scoped, so a namespace cannot restrict it: remove `namespaces` (the \
         permission then covers every {} in the cluster) or drop the permission",
        gvk.kind
    )
}

pub(super) fn validate_request(field: &str, r: &RequestSpec) -> Result<(), FieldProblem> {
    if !is_dns_subdomain(&r.name) {
        return Err(FieldProblem(
            format!("{field}.name"),
            format!("{:?} is not a valid object name", r.name),
        ));
    }
    if let Some(ns) = &r.namespace
        && !is_dns_label(ns)
    {
        return Err(FieldProblem(
            format!("{field}.namespace"),
            format!("{ns:?} is not a valid namespace"),
        ));
    }
    Ok(())
}
