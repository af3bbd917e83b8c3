//! Services: `SetDefaults_Service`, a cluster IP and node ports for a new Service as
//! kube-apiserver's allocators give them, and `printService`'s row.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::defaults::{each, set};
use crate::printers::{AGE, Column, NAME, Row, map_text};
use crate::registry::Strategy;
use krec_core::error::Cause;
use krec_core::json::Pointer;

/// The Service strategy.
pub struct ServiceStrategy;

/// The Service strategy.
pub static STRATEGY: ServiceStrategy = ServiceStrategy;

impl Strategy for ServiceStrategy {
    /// `SetDefaults_Service` (ports' protocol and target port, session affinity, type, traffic
    /// policies, IP families).
    fn default(&self, object: &mut Value) {
        let Some(spec) = object.get_mut("spec") else {
            return;
        };
        if !spec.is_object() {
            return;
        }
        set(spec, "type", json!("ClusterIP"));
        set(spec, "sessionAffinity", json!("None"));
        let kind = spec["type"].as_str().unwrap_or("ClusterIP").to_owned();
        for port in each(spec, "ports") {
            set(port, "protocol", json!("TCP"));
            if let Some(number) = port.get("port").cloned() {
                set(port, "targetPort", number);
            }
        }
        if kind != "ExternalName" {
            set(spec, "internalTrafficPolicy", json!("Cluster"));
            set(spec, "ipFamilyPolicy", json!("SingleStack"));
            set(spec, "ipFamilies", json!(["IPv4"]));
        }
        if matches!(kind.as_str(), "NodePort" | "LoadBalancer") {
            set(spec, "externalTrafficPolicy", json!("Cluster"));
        }
    }

    fn prepare_for_create(&self, object: &mut Value, siblings: &mut dyn Iterator<Item = &Value>) {
        allocate_addresses(object, siblings);
    }

    /// Part of kube's `ValidateService`: ports (present, named when several, in range, with a
    /// known protocol) and the type.
    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let Some(spec) = object.get("spec") else {
            return causes;
        };
        let kind = spec
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP");
        let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
        let ports = spec.get("ports").and_then(Value::as_array);
        let ports = ports.map_or(&[][..], Vec::as_slice);
        if ports.is_empty() && !headless && kind != "ExternalName" {
            causes.push(("spec.ports".into(), "Required value".into()));
        }
        for (i, port) in ports.iter().enumerate() {
            let at = |field: &str| format!("spec.ports[{i}].{field}");
            if ports.len() > 1
                && port
                    .get("name")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            {
                causes.push((at("name"), "Required value".into()));
            }
            let number = port.get("port").and_then(Value::as_i64).unwrap_or(0);
            if !(1..=65535).contains(&number) {
                causes.push((
                    at("port"),
                    format!("Invalid value: {number}: must be between 1 and 65535, inclusive"),
                ));
            }
            match port.get("protocol").and_then(Value::as_str) {
                None | Some("TCP" | "UDP" | "SCTP") => {}
                Some(other) => causes.push((
                    at("protocol"),
                    format!(
                        "Unsupported value: {other:?}: supported values: \"SCTP\", \"TCP\", \"UDP\""
                    ),
                )),
            }
        }
        if !matches!(
            kind,
            "ClusterIP" | "ExternalName" | "LoadBalancer" | "NodePort"
        ) {
            causes.push((
                "spec.type".into(),
                format!("Unsupported value: {kind:?}: supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""),
            ));
        }
        causes
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[
            NAME,
            Column::text("Type"),
            Column::text("Cluster-IP"),
            Column::text("External-IP"),
            Column::text("Port(s)"),
            AGE,
            Column::text("Selector").wide(),
        ];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        cells(row)
    }
}

/// The service IP range (kube-apiserver's default `--service-cluster-ip-range`).
const SERVICE_CIDR_BASE: u32 = u32::from_be_bytes([10, 96, 0, 0]);
/// Addresses in the range (a /12).
const SERVICE_CIDR_SIZE: u32 = 1 << 20;
/// kube-apiserver's default `--service-node-port-range`.
const NODE_PORTS: std::ops::RangeInclusive<i64> = 30000..=32767;

/// What kube-apiserver's service allocators give a new Service: a free cluster IP (unless it is
/// headless, `clusterIP: None`, or an `ExternalName`), and a free node port for each port of a
/// `NodePort` or `LoadBalancer` service that names none.
fn allocate_addresses(service: &mut Value, services: &mut dyn Iterator<Item = &Value>) {
    let mut used_ips = HashSet::new();
    let mut used_ports = HashSet::new();
    for other in services {
        if let Some(ip) = other.at("/spec/clusterIP").and_then(Value::as_str) {
            used_ips.insert(ip.to_owned());
        }
        for port in other
            .at("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(n) = port["nodePort"].as_i64() {
                used_ports.insert(n);
            }
        }
    }
    let kind = service
        .at("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_owned();
    let Some(spec) = service.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    let unset_ip = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    if kind != "ExternalName" && unset_ip {
        // 10.96.0.1 is the `kubernetes` service's; the rest are handed out in order.
        let free = (10..SERVICE_CIDR_SIZE - 1)
            .map(|n| std::net::Ipv4Addr::from(SERVICE_CIDR_BASE + n).to_string())
            .find(|ip| !used_ips.contains(ip));
        if let Some(ip) = free {
            spec["clusterIP"] = json!(ip);
            spec["clusterIPs"] = json!([ip]);
        }
    } else if let Some(ip) = spec
        .get("clusterIP")
        .cloned()
        .filter(|_| unset_ip_list(spec))
    {
        spec["clusterIPs"] = json!([ip]);
    }
    if matches!(kind.as_str(), "NodePort" | "LoadBalancer") {
        for port in spec
            .get_mut("ports")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if port
                .get("nodePort")
                .and_then(Value::as_i64)
                .is_none_or(|n| n == 0)
                && let Some(free) = NODE_PORTS.clone().find(|p| !used_ports.contains(p))
            {
                used_ports.insert(free);
                port["nodePort"] = json!(free);
            }
        }
    }
}

/// Whether a service spec has no `clusterIPs` yet.
fn unset_ip_list(spec: &Value) -> bool {
    spec.get("clusterIPs")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
}

/// TYPE, CLUSTER-IP, EXTERNAL-IP and PORT(S) of a service, as `printService`.
fn cells(row: &Row<'_>) -> Vec<Value> {
    let o = row.object;
    let kind = o
        .at("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    let cluster_ip = o
        .at("/spec/clusterIP")
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty())
        .unwrap_or("<none>");
    let external = match kind {
        "ExternalName" => o
            .at("/spec/externalName")
            .and_then(Value::as_str)
            .unwrap_or("<none>")
            .to_owned(),
        _ => o
            .at("/spec/externalIPs")
            .and_then(Value::as_array)
            .filter(|ips| !ips.is_empty())
            .map(|ips| {
                ips.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_else(|| {
                if kind == "LoadBalancer" {
                    "<pending>".into()
                } else {
                    "<none>".into()
                }
            }),
    };
    let ports: Vec<String> = o
        .at("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let protocol = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64().filter(|n| *n > 0) {
                Some(node) => format!("{}:{node}/{protocol}", p["port"]),
                None => format!("{}/{protocol}", p["port"]),
            }
        })
        .collect();
    let selector = map_text(o.at("/spec/selector"));
    vec![
        row.name(),
        json!(kind),
        json!(cluster_ip),
        json!(external),
        json!(if ports.is_empty() {
            "<none>".into()
        } else {
            ports.join(",")
        }),
        row.age(),
        json!(selector),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_should_be_defaulted_and_show_its_ports() {
        let mut svc = json!({"spec": {"ports": [{"port": 80}]}});
        STRATEGY.default(&mut svc);
        assert_eq!(
            svc["spec"]["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        assert_eq!(svc["spec"]["type"], "ClusterIP");
        assert_eq!(svc["spec"]["sessionAffinity"], "None");

        let svc = json!({"spec": {"type": "NodePort", "clusterIP": "10.96.0.10",
            "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}});
        let cells = STRATEGY.cells(&Row {
            object: &svc,
            now: jiff::Timestamp::now(),
        });
        assert_eq!(cells[1], "NodePort");
        assert_eq!(cells[2], "10.96.0.10");
        assert_eq!(cells[4], "80:30080/TCP,53/UDP");
    }
}
