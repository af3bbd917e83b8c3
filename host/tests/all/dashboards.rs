//! The shipped Grafana dashboard and Prometheus alert rules (`deploy/`) against a running host:
//! every series they name is one `krec dev` exports, Prometheus (Debian's package, unpacked by
//! `make tools`) scrapes the admin port with the rules loaded and evaluates every rule and every
//! panel's query without an error, and the series a healthy host fills have data.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use krec_testkit::http::{encoded, get};
use serde_json::Value;

use crate::common::{self, repo, stop, until};

/// The families krec exports are named with these prefixes.
const PREFIXES: [&str; 4] = [
    "krec_",
    "controller_runtime_",
    "workqueue_",
    "leader_election_",
];

/// Series of roles `krec dev` on the samples does not play — a sharded replica's Leases, a
/// rollout's shadow reconciles: declared by the host, without series. Every other series the
/// dashboard and rules name has data, those counting failures at zero.
const OTHER_ROLES: [&str; 2] = [
    "krec_shadow_reconciles_total",
    "krec_shard_leases_lost_total",
];

/// The PromQL expressions of the dashboard's panels and of the alert rules.
fn shipped_queries() -> Vec<(String, String)> {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("deploy/grafana/krec-dashboard.json"))
            .expect("the dashboard"),
    )
    .expect("the dashboard is JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a target's expr");
            queries.push((format!("panel {:?}", panel["title"]), expr.to_owned()));
        }
    }
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating");
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let definition = variable["definition"].as_str().expect("definition");
        // label_values(SERIES, LABEL): the series is a query of its own.
        let series = definition
            .strip_prefix("label_values(")
            .and_then(|d| d.split(',').next())
            .expect("a label_values variable");
        queries.push((
            format!("variable {:?}", variable["name"]),
            series.to_owned(),
        ));
    }
    let rules = std::fs::read_to_string(repo().join("deploy/prometheus/krec-alerts.yaml"))
        .expect("the rules");
    let rules: Value = serde_yaml_ng::from_str(&rules).expect("the rules are YAML");
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let name = rule["alert"].as_str().expect("alert");
            let expr = rule["expr"].as_str().expect("expr");
            queries.push((format!("alert {name}"), expr.to_owned()));
        }
    }
    assert!(queries.len() > 20, "{queries:?}");
    queries
}

/// The series names a query mentions (those of krec's families).
fn series_named(expr: &str) -> BTreeSet<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|token| PREFIXES.iter().any(|p| token.starts_with(p)))
        .map(str::to_owned)
        .collect()
}

/// The families a host's exposition declares (`# TYPE name kind`), with their kinds.
fn families(exposition: &str) -> Vec<(String, String)> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
        .collect()
}

/// Whether a series `name` belongs to one of `families`: a counter's `_total`, a histogram's
/// `_bucket`, `_sum` and `_count`, or a gauge itself.
fn exported(name: &str, families: &[(String, String)]) -> bool {
    families.iter().any(|(family, kind)| {
        let Some(rest) = name.strip_prefix(family.as_str()) else {
            return false;
        };
        match kind.as_str() {
            "counter" => rest == "_total",
            "histogram" => ["_bucket", "_sum", "_count"].contains(&rest),
            _ => rest.is_empty(),
        }
    })
}

/// Prometheus' answer to `path`'s API call: its `data`, once it answers with success.
fn api(prometheus: SocketAddr, path: &str) -> Result<Value, String> {
    let answer = common::get_json(prometheus, path)?;
    if answer["status"] != "success" {
        return Err(format!("{path}: {answer}"));
    }
    Ok(answer["data"].clone())
}

/// Prometheus from `make tools`, scraping `target` every second with the shipped rules,
/// evaluated every second, on a free port of loopback; its storage in `dir`.
fn prometheus(dir: &std::path::Path, target: SocketAddr) -> (common::Stopped, SocketAddr) {
    let binary = krec_testkit::tool("prometheus/usr/bin/prometheus", "KREC_TEST_PROMETHEUS");
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [{rules:?}]\n\
             scrape_configs:\n  - job_name: krec\n    static_configs: [{{targets: [{target:?}]}}]\n",
            rules = repo().join("deploy/prometheus/krec-alerts.yaml").display().to_string(),
            target = target.to_string(),
        ),
    )
    .expect("write prometheus.yml");
    let port = SocketAddr::from(([127, 0, 0, 1], krec_testkit::free_port()));
    let child: Child = Command::new(&binary)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    (common::Stopped(child), port)
}

/// The dashboard and the rules name only series the host exports; Prometheus scraping `krec
/// dev` (the samples, a denied Foo and a defaulted Pod among their work) loads every rule,
/// evaluates it and each panel's query without error, and finds data for every series but
/// those of other roles.
#[test]
fn the_shipped_dashboard_and_alerts_should_name_only_series_a_running_host_exports() {
    let queries = shipped_queries();
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut running, admin, kubeconfig) = common::dev(
        dir.path(),
        &[
            "foo-controller",
            "pod-counter",
            "foo-validator",
            "pod-defaulter",
        ],
        |_| {},
    );

    // A Foo the validator denies: a verdict of each kind (the example Foo's Pods are defaulted).
    let kubectl = common::Kubectl::new(&kubeconfig, &dir.path().join("kubectl-cache"));
    kubectl.create_denied_foo(dir.path());

    // Every series named is one of the host's families.
    let exposition = until("the host's metrics", Duration::from_secs(30), || {
        get(admin, "/metrics").ok_or_else(|| "no answer".to_owned())
    });
    let families = families(&exposition);
    let mut named = BTreeSet::new();
    for (source, expr) in &queries {
        let series = series_named(expr);
        assert!(!series.is_empty(), "{source} names no krec series: {expr}");
        for name in series {
            assert!(
                exported(&name, &families),
                "{source} names {name}, which the host does not export: {expr}"
            );
            named.insert(name);
        }
    }

    // Prometheus scrapes the host with the rules loaded.
    let (mut prometheus, at) = prometheus(dir.path(), admin);
    until(
        "Prometheus scraping the host",
        Duration::from_secs(60),
        || {
            let targets = api(at, "/api/v1/targets")?;
            let up = targets["activeTargets"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| t["health"] == "up");
            up.then_some(()).ok_or_else(|| targets.to_string())
        },
    );
    // Every rule evaluated, without an error.
    until("every rule evaluated", Duration::from_secs(60), || {
        let groups = api(at, "/api/v1/rules")?;
        let rules: Vec<&Value> = groups["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .collect();
        if rules.len() != 10 {
            return Err(format!("{} rules loaded: {groups}", rules.len()));
        }
        let bad: Vec<&&Value> = rules
            .iter()
            .filter(|r| {
                r["health"] != "ok" || r["lastError"].as_str().is_some_and(|e| !e.is_empty())
            })
            .collect();
        if bad.is_empty() {
            Ok(())
        } else {
            Err(format!("rules not evaluated or failing: {bad:?}"))
        }
    });
    // Every panel's query evaluates (Grafana's variables as an import sets them).
    for (source, expr) in &queries {
        let query = expr
            .replace("$guest", ".*")
            .replace("$__rate_interval", "1m");
        api(at, &format!("/api/v1/query?query={}", encoded(&query)))
            .unwrap_or_else(|e| panic!("{source}: {e}"));
    }
    // And the series a healthy host fills have data.
    let expected: Vec<&String> = named
        .iter()
        .filter(|n| !OTHER_ROLES.contains(&n.as_str()))
        .collect();
    until("data for every series", Duration::from_secs(60), || {
        let empty: Vec<&&String> = expected
            .iter()
            .filter(|name| {
                let query = encoded(&format!("count({name})"));
                api(at, &format!("/api/v1/query?query={query}"))
                    .map(|data| data["result"].as_array().is_none_or(Vec::is_empty))
                    .unwrap_or(true)
            })
            .collect();
        empty
            .is_empty()
            .then_some(())
            .ok_or_else(|| format!("no data in Prometheus for {empty:?}"))
    });
    // The guests are ready, and the webhooks' verdicts of each kind counted.
    let ready = api(
        at,
        &format!("/api/v1/query?query={}", encoded("krec_guest_ready == 1")),
    )
    .expect("krec_guest_ready");
    assert_eq!(ready["result"].as_array().map(Vec::len), Some(4), "{ready}");
    until(
        "a denial and a patch counted",
        Duration::from_secs(30),
        || {
            let verdicts = api(
                at,
                &format!(
                    "/api/v1/query?query={}",
                    encoded("sum by (verdict) (krec_webhook_verdicts_total)")
                ),
            )?;
            let seen: BTreeSet<String> = verdicts["result"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["metric"]["verdict"].as_str().map(str::to_owned))
                .collect();
            (seen.contains("denied") && seen.contains("patched"))
                .then_some(())
                .ok_or_else(|| format!("{verdicts}"))
        },
    );
    let exit = stop(&mut prometheus.0, "-TERM");
    assert!(exit.success(), "prometheus: {exit:?}");
    let exit = stop(&mut running.0, "-INT");
    assert!(exit.success(), "{exit:?}");
}
