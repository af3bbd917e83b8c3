//! Services: a new Service gets a cluster IP and node ports, as kube-apiserver's allocators give
//! them.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::json::Pointer;
use crate::registry::Strategy;

/// The Service strategy.
pub struct ServiceStrategy;

/// The Service strategy.
pub static STRATEGY: ServiceStrategy = ServiceStrategy;

impl Strategy for ServiceStrategy {
    fn prepare_for_create(&self, object: &mut Value, siblings: &mut dyn Iterator<Item = &Value>) {
        allocate_addresses(object, siblings);
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
