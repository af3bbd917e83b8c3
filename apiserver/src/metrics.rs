//! The API server's `/metrics`, in the Prometheus text format, named and labelled as
//! kube-apiserver's: `apiserver_longrunning_requests` (the watches open now, by resource) — how
//! a benchmark or an operator sees how many watches its clients hold.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

/// What a long-running request is counted under: kube-apiserver's labels.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Labels {
    group: String,
    version: String,
    resource: String,
    /// `cluster` (across namespaces) or `namespace`.
    scope: &'static str,
}

/// The gauges of the server's long-running requests.
#[derive(Debug, Default)]
pub struct Metrics {
    watches: Mutex<BTreeMap<Labels, i64>>,
}

/// One open watch, counted until dropped.
#[derive(Debug)]
pub struct OpenWatch {
    metrics: Arc<Metrics>,
    labels: Labels,
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        let mut watches = self.metrics.lock();
        if let Some(count) = watches.get_mut(&self.labels) {
            *count -= 1;
        }
    }
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Labels, i64>> {
        // Counts only; a poisoned lock still holds usable numbers.
        self.watches.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count a watch of `group/version` `resource` (across namespaces unless `namespaced`)
    /// until the returned guard is dropped.
    pub fn watch_opened(
        self: &Arc<Self>,
        group: &str,
        version: &str,
        resource: &str,
        namespaced: bool,
    ) -> OpenWatch {
        let labels = Labels {
            group: group.to_owned(),
            version: version.to_owned(),
            resource: resource.to_owned(),
            scope: if namespaced { "namespace" } else { "cluster" },
        };
        *self.lock().entry(labels.clone()).or_default() += 1;
        OpenWatch {
            metrics: self.clone(),
            labels,
        }
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut text = String::from(
            "# HELP apiserver_longrunning_requests Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component.\n\
             # TYPE apiserver_longrunning_requests gauge\n",
        );
        for (labels, count) in self.lock().iter() {
            // Label values here are API names (DNS subdomains and lowercase words): nothing to
            // escape.
            let _ = writeln!(
                text,
                "apiserver_longrunning_requests{{component=\"apiserver\",group=\"{}\",resource=\"{}\",scope=\"{}\",subresource=\"\",verb=\"WATCH\",version=\"{}\"}} {count}",
                labels.group, labels.resource, labels.scope, labels.version
            );
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_watches_should_be_counted_until_their_guards_drop() {
        let metrics = Arc::new(Metrics::default());
        let a = metrics.watch_opened("", "v1", "pods", false);
        let b = metrics.watch_opened("", "v1", "pods", false);
        let c = metrics.watch_opened("apps", "v1", "deployments", true);
        let text = metrics.render();
        assert!(text.contains(
            "apiserver_longrunning_requests{component=\"apiserver\",group=\"\",resource=\"pods\",scope=\"cluster\",subresource=\"\",verb=\"WATCH\",version=\"v1\"} 2"
        ), "{text}");
        assert!(
            text.contains("resource=\"deployments\",scope=\"namespace\""),
            "{text}"
        );
        drop((a, c));
        let text = metrics.render();
        assert!(text.contains("resource=\"pods\",scope=\"cluster\",subresource=\"\",verb=\"WATCH\",version=\"v1\"} 1"), "{text}");
        assert!(text.contains("resource=\"deployments\",scope=\"namespace\",subresource=\"\",verb=\"WATCH\",version=\"v1\"} 0"), "{text}");
        drop(b);
        assert!(metrics.render().contains(
            "resource=\"pods\",scope=\"cluster\",subresource=\"\",verb=\"WATCH\",version=\"v1\"} 0"
        ));
    }
}
