//! Registering the admission server with an API server: the webhook configurations for the
//! guests' `validate` and `mutate` exports, a CRD's conversion webhook, and how the API server
//! reaches the server ([`Reach`]).

use base64::Engine as _;
use serde_json::{Value, json};

use crate::manifest::{Manifest, WebhookType};

/// How the API server reaches the admission server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// At a URL, `https://host:port` (`krec dev`, or a host outside the cluster).
    Url(String),
    /// Through a Service in the cluster (the host deployed with `deploy/`).
    Service {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
        /// The Service's port.
        port: u16,
    },
}

/// A Service reference that is not `NAMESPACE/NAME[:PORT]`.
#[derive(Debug, thiserror::Error)]
#[error("{text:?}: {problem}")]
pub struct BadService {
    /// The text given.
    pub text: String,
    /// What is wrong with it.
    pub problem: String,
}

impl Reach {
    /// The Service `NAMESPACE/NAME[:PORT]` (port 443 unless given).
    ///
    /// # Errors
    ///
    /// Text that is not of that form, naming it.
    pub fn service(text: &str) -> Result<Reach, BadService> {
        let bad = |problem: String| BadService {
            text: text.to_owned(),
            problem,
        };
        let (namespace, rest) = text
            .split_once('/')
            .ok_or_else(|| bad("not NAMESPACE/NAME[:PORT]".into()))?;
        let (name, port) = match rest.split_once(':') {
            Some((name, port)) => (
                name,
                port.parse()
                    .map_err(|_| bad(format!("bad port {port:?}")))?,
            ),
            None => (rest, 443),
        };
        if namespace.is_empty() || name.is_empty() {
            return Err(bad("not NAMESPACE/NAME[:PORT]".into()));
        }
        Ok(Reach::Service {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            port,
        })
    }

    /// The namespace of the Service the API server sends reviews through, if it does.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Reach::Url(_) => None,
            Reach::Service { namespace, .. } => Some(namespace),
        }
    }

    /// The `clientConfig` of a webhook at `path` (e.g. `/validate/foo-validator`), trusting
    /// the PEM `ca_pem`.
    pub fn client_config(&self, path: &str, ca_pem: &str) -> Value {
        let bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
        match self {
            Reach::Url(base) => json!({"url": format!("{base}{path}"), "caBundle": bundle}),
            Reach::Service {
                namespace,
                name,
                port,
            } => json!({"service": {"namespace": namespace, "name": name, "port": port,
                "path": path}, "caBundle": bundle}),
        }
    }
}

/// The `spec.conversion` of the CRD `manifest`'s guest converts (named by
/// `spec.conversion.crd`), sending its reviews to the guest's `convert` export: `(CRD name,
/// conversion)`.
pub fn conversion(manifest: &Manifest, reach: &Reach, ca_pem: &str) -> Option<(String, Value)> {
    let spec = manifest.spec.conversion.as_ref()?;
    let client_config = reach.client_config(&format!("/convert/{}", manifest.name), ca_pem);
    Some((
        spec.crd.clone(),
        json!({"strategy": "Webhook", "webhook": {"clientConfig": client_config,
            "conversionReviewVersions": ["v1"]}}),
    ))
}

/// The field manager of the registrations the host makes: server-side apply under it takes
/// the fields it sets and leaves everyone else's (a CRD's own `spec` stays `kubectl apply`'s).
pub const FIELD_MANAGER: &str = "krec";

/// Point the CRD `crd` at a conversion webhook (`conversion`, from [`conversion`]), or back to
/// `strategy: None` when `conversion` is `None`: a server-side apply of `spec.conversion` alone
/// as [`FIELD_MANAGER`], forced (the defaulted `strategy: None` belongs to whoever created the
/// CRD).
///
/// # Errors
///
/// The API server's refusal; `NotFound` when there is no such CRD (nothing is created).
pub async fn set_conversion(
    api: &crate::cluster::client::ApiClient,
    crd: &str,
    conversion: Option<Value>,
) -> Result<(), krec_core::CallError> {
    set_conversion_with(api, crd, conversion, None).await
}

/// [`set_conversion`], the CRD annotated `cert-manager.io/inject-ca-from: inject_ca_from` when
/// given (cert-manager's CA injector fills the conversion's `caBundle`).
///
/// # Errors
///
/// As [`set_conversion`].
pub async fn set_conversion_with(
    api: &crate::cluster::client::ApiClient,
    crd: &str,
    conversion: Option<Value>,
    inject_ca_from: Option<&str>,
) -> Result<(), krec_core::CallError> {
    let gvk =
        krec_core::Gvk::from_api_version("apiextensions.k8s.io/v1", "CustomResourceDefinition");
    // An apply would create a CRD that is not there (and fail on its missing spec).
    api.get(&gvk, None, crd).await?;
    let Some(conversion) = conversion else {
        // Back to no conversion: the webhook removed outright (a merge patch), whoever else
        // has ever touched it — a `webhook` left beside `strategy: None` is invalid.
        return api
            .patch(
                &gvk,
                None,
                crd,
                krec_core::PatchType::Merge,
                &json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}}),
                false,
                FIELD_MANAGER,
            )
            .await
            .map(drop);
    };
    let annotated = inject_ca_from.is_some();
    let mut body = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": crd}, "spec": {"conversion": conversion}});
    if let (true, Some(from)) = (annotated, inject_ca_from) {
        body["metadata"]["annotations"] = json!({INJECT_CA_FROM: from});
    }
    api.patch(
        &gvk,
        None,
        crd,
        krec_core::PatchType::Apply,
        &body,
        false,
        FIELD_MANAGER,
    )
    .await
    .map(drop)
}

/// cert-manager's annotation asking its CA injector to fill an object's `caBundle`s with the CA
/// of the named Certificate (`namespace/name`).
pub const INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";

/// `registration` (a webhook configuration, or a CRD conversion) left to cert-manager: no
/// `caBundle` of its own (the injector's stays), and for a configuration the annotation naming
/// the Certificate.
pub fn inject_ca_from(registration: &mut Value, certificate: &str) {
    if let Some(webhooks) = registration["webhooks"].as_array_mut() {
        for webhook in webhooks {
            if let Some(config) = webhook["clientConfig"].as_object_mut() {
                config.remove("caBundle");
            }
        }
        registration["metadata"]["annotations"] = json!({INJECT_CA_FROM: certificate});
    }
    if let Some(config) = registration
        .pointer_mut("/webhook/clientConfig")
        .and_then(Value::as_object_mut)
    {
        config.remove("caBundle");
    }
}

/// The namespaces every webhook registered by krec leaves out unless its manifest's
/// `namespaceSelector` names them: the control plane's, so that a webhook that cannot answer
/// (its host stopped, its module broken) with `failurePolicy: Fail` never stops the cluster
/// from running its own Pods and Leases — Kubernetes' own advice for webhooks.
pub const CONTROL_PLANE_NAMESPACES: [&str; 2] = ["kube-system", "kube-node-lease"];

/// The label every namespace carries with its own name (kube-apiserver sets it).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The namespaces krec's webhooks leave out: the control plane's and the host's own
/// (`host_namespace`, where its Pods run: a webhook must not stop its own host from starting).
pub fn protected_namespaces(host_namespace: Option<&str>) -> Vec<String> {
    let mut protected: Vec<String> = CONTROL_PLANE_NAMESPACES
        .iter()
        .map(|n| (*n).to_owned())
        .collect();
    if let Some(ns) = host_namespace
        && !protected.iter().any(|p| p == ns)
    {
        protected.push(ns.to_owned());
    }
    protected
}

/// The `namespaceSelector` of a webhook whose manifest gives `given` (or none): `given`, with
/// the `protected` namespaces it does not name explicitly (by their
/// `kubernetes.io/metadata.name` label, in `matchLabels` or an `In` expression) left out.
fn namespace_selector(given: Option<&Value>, protected: &[String]) -> Option<Value> {
    let mut named: Vec<&str> = Vec::new();
    if let Some(given) = given {
        if let Some(name) = given["matchLabels"][NAMESPACE_NAME_LABEL].as_str() {
            named.push(name);
        }
        for expression in given["matchExpressions"].as_array().into_iter().flatten() {
            if expression["key"] == NAMESPACE_NAME_LABEL && expression["operator"] == "In" {
                named.extend(
                    expression["values"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str),
                );
            }
        }
    }
    let excluded: Vec<&String> = protected
        .iter()
        .filter(|p| !named.contains(&p.as_str()))
        .collect();
    if excluded.is_empty() {
        return given.cloned();
    }
    let mut selector = given.cloned().unwrap_or_else(|| json!({}));
    let exclusion = json!({"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": excluded});
    match selector["matchExpressions"].as_array_mut() {
        Some(expressions) => expressions.push(exclusion),
        None => selector["matchExpressions"] = json!([exclusion]),
    }
    Some(selector)
}

/// The `MutatingWebhookConfiguration` and `ValidatingWebhookConfiguration` (`krec-{guest}`) that
/// register `manifest`'s webhooks where `reach` says, trusting `ca_pem`, leaving the
/// `protected` namespaces out (see [`protected_namespaces`]).
pub fn configurations(
    manifest: &Manifest,
    reach: &Reach,
    ca_pem: &str,
    protected: &[String],
) -> Vec<Value> {
    let mut out = Vec::new();
    for (kind, config_kind) in [
        (WebhookType::Mutating, "MutatingWebhookConfiguration"),
        (WebhookType::Validating, "ValidatingWebhookConfiguration"),
    ] {
        let hooks: Vec<Value> = manifest
            .spec
            .webhooks
            .iter()
            .filter(|h| h.kind == kind)
            .map(|hook| {
                let mut webhook = json!({
                    "name": hook.name_for(&manifest.name),
                    "clientConfig": reach.client_config(
                        &format!("/{}/{}", kind.export(), manifest.name),
                        ca_pem,
                    ),
                    "rules": hook.rules,
                    "failurePolicy": hook.failure_policy.as_deref().unwrap_or("Fail"),
                    "sideEffects": hook.side_effects.as_deref().unwrap_or("None"),
                    "timeoutSeconds": hook.timeout_seconds.unwrap_or(10),
                    "admissionReviewVersions": ["v1"],
                    "matchPolicy": hook.match_policy.as_deref().unwrap_or("Equivalent"),
                });
                if let Some(selector) =
                    namespace_selector(hook.namespace_selector.as_ref(), protected)
                {
                    webhook["namespaceSelector"] = selector;
                }
                if let Some(selector) = &hook.object_selector {
                    webhook["objectSelector"] = selector.clone();
                }
                if kind == WebhookType::Mutating {
                    webhook["reinvocationPolicy"] =
                        json!(hook.reinvocation_policy.as_deref().unwrap_or("Never"));
                }
                webhook
            })
            .collect();
        if !hooks.is_empty() {
            out.push(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": config_kind,
                "metadata": {"name": format!("krec-{}", manifest.name),
                    "labels": {"app.kubernetes.io/managed-by": "krec"}},
                "webhooks": hooks,
            }));
        }
    }
    out
}

/// The YAML documents registering `manifests`' webhooks where `reach` says, trusting `ca_pem`
/// (`krec webhooks`): each guest's webhook configurations, whole objects to apply with
/// `kubectl apply --server-side -f -` again and again.
///
/// A CRD a guest converts belongs to whoever applies it: a document holding its
/// `spec.conversion` alone, server-side applied, would either conflict with the CRD's creator
/// (who owns the defaulted `strategy: None`) or, forced, have kubectl hand the applier every
/// field of a CRD made by client-side apply, which the next apply would then prune. So a comment
/// shows the conversion instead: as a block for the CRD's manifest, and as a `kubectl patch` to
/// run once (a host run with `--webhook-service` registers it itself).
///
/// # Errors
///
/// When a document cannot be written as YAML.
pub fn registration_yaml(
    manifests: &[Manifest],
    reach: &Reach,
    ca_pem: &str,
) -> anyhow::Result<String> {
    let protected = protected_namespaces(reach.namespace());
    let mut out = String::new();
    for manifest in manifests {
        for document in configurations(manifest, reach, ca_pem, &protected) {
            out.push_str(&format!(
                "---\n# {} of guest {} (kubectl apply --server-side -f -)\n",
                document["kind"].as_str().unwrap_or_default(),
                manifest.name
            ));
            out.push_str(&serde_yaml_ng::to_string(&document)?);
        }
        let Some((crd, conversion)) = conversion(manifest, reach, ca_pem) else {
            continue;
        };
        out.push_str(&format!(
            "---\n# The CRD {crd} is converted by guest {}. A host run with --webhook-service\n\
             # registers its conversion itself; else put this in the CRD's manifest:\n#   spec:\n",
            manifest.name
        ));
        let block = serde_yaml_ng::to_string(&json!({"conversion": conversion}))?;
        for line in block.lines() {
            out.push_str(&format!("#     {line}\n"));
        }
        out.push_str(&format!(
            "# or patch the CRD once:\n#   kubectl patch crd {crd} --type=merge -p '{}'\n",
            json!({"spec": {"conversion": conversion}})
        ));
    }
    Ok(out)
}

/// Create or update a webhook configuration in the cluster: a server-side apply as
/// [`FIELD_MANAGER`], forced (the host owns its registrations).
///
/// # Errors
///
/// The API server's refusal.
pub async fn register(
    api: &crate::cluster::client::ApiClient,
    configuration: &Value,
) -> Result<(), krec_core::CallError> {
    let gvk = krec_core::Gvk::from_api_version(
        "admissionregistration.k8s.io/v1",
        configuration["kind"].as_str().unwrap_or_default(),
    );
    let name = configuration["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    api.patch(
        &gvk,
        None,
        name,
        krec_core::PatchType::Apply,
        configuration,
        false,
        FIELD_MANAGER,
    )
    .await
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhooks_should_leave_the_control_plane_and_the_hosts_namespace_out_unless_named() {
        let protected = protected_namespaces(Some("krec-system"));
        assert_eq!(protected, ["kube-system", "kube-node-lease", "krec-system"]);
        assert_eq!(protected_namespaces(Some("kube-system")).len(), 2);
        let not_in = |values: &[&str]| json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": values});
        // None given: all three left out.
        assert_eq!(
            namespace_selector(None, &protected),
            Some(
                json!({"matchExpressions": [not_in(&["kube-system", "kube-node-lease", "krec-system"])]})
            )
        );
        // A selector of the manifest's own is kept, the exclusion added to it.
        let given = json!({"matchLabels": {"team": "a"},
            "matchExpressions": [{"key": "env", "operator": "Exists"}]});
        assert_eq!(
            namespace_selector(Some(&given), &protected),
            Some(json!({"matchLabels": {"team": "a"}, "matchExpressions": [
                {"key": "env", "operator": "Exists"},
                not_in(&["kube-system", "kube-node-lease", "krec-system"])]}))
        );
        // Named explicitly, by label or by an `In` expression: asked for, so not left out.
        let named = json!({"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}});
        assert_eq!(
            namespace_selector(Some(&named), &protected),
            Some(
                json!({"matchLabels": {"kubernetes.io/metadata.name": "kube-system"},
                "matchExpressions": [not_in(&["kube-node-lease", "krec-system"])]})
            )
        );
        let all = json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
            "operator": "In", "values": ["kube-system", "kube-node-lease", "krec-system"]}]});
        assert_eq!(
            namespace_selector(Some(&all), &protected),
            Some(all.clone())
        );
        // `NotIn` names nothing it asks for.
        let not = json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
            "operator": "NotIn", "values": ["kube-system"]}]});
        let selector = namespace_selector(Some(&not), &protected).expect("selector");
        assert_eq!(
            selector["matchExpressions"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(namespace_selector(None, &[]), None);
    }

    #[test]
    fn a_service_should_parse_as_namespace_name_and_port() {
        assert_eq!(
            Reach::service("krec-system/krec-webhooks").ok(),
            Some(Reach::Service {
                namespace: "krec-system".into(),
                name: "krec-webhooks".into(),
                port: 443
            })
        );
        assert_eq!(
            Reach::service("ns/svc:9443")
                .ok()
                .map(|r| r.namespace().map(str::to_owned)),
            Some(Some("ns".to_owned()))
        );
        for bad in ["svc", "/svc", "ns/", "ns/svc:http"] {
            assert!(Reach::service(bad).is_err(), "{bad}");
        }
    }
}
