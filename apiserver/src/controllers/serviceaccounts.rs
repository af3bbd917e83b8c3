//! Every namespace's defaults, as kube-controller-manager's `serviceaccount` and
//! `root-ca-cert-publisher` controllers keep them: the `default` ServiceAccount, and the
//! `kube-root-ca.crt` ConfigMap holding the cluster's CA (what in-cluster clients trust),
//! recreated when deleted, left alone while the namespace terminates.

use super::*;

const ROOT_CA: &str = "kube-root-ca.crt";

pub(super) fn sync(engine: &mut Engine, name: &str) -> Result<Next, ApiError> {
    let Ok(namespace) = engine.store.get(&engine.types.namespaces, None, name) else {
        return Ok(Next::Done);
    };
    if is_deleting(&namespace) {
        return Ok(Next::Done);
    }
    let accounts = &engine.types.service_accounts;
    if !engine.store.contains(accounts, Some(name), "default") {
        let account = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": name}});
        ignore_exists(engine.create(accounts, name, account))?;
    }
    let configmaps = &engine.types.config_maps;
    if let Some(ca) = engine.config.root_ca.as_deref() {
        let data = json!({"ca.crt": ca});
        match engine.get(configmaps, name, ROOT_CA) {
            None => {
                let map = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": ROOT_CA, "namespace": name,
                        "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
                    "data": data});
                ignore_exists(engine.create(configmaps, name, map))?;
            }
            Some(existing) if existing.get("data") != Some(&data) => {
                let mut fixed = (*existing).clone();
                fixed["data"] = data;
                engine.update(configmaps, fixed)?;
            }
            Some(_) => {}
        }
    }
    Ok(Next::Done)
}

/// A create that finds the object already there has nothing left to do.
fn ignore_exists(result: Result<Arc<Value>, ApiError>) -> Result<(), ApiError> {
    match result {
        Err(err) if err.reason == "AlreadyExists" => Ok(()),
        Err(err) if err.code == 403 => Ok(()), // the namespace began terminating meanwhile
        Err(err) => Err(err),
        Ok(_) => Ok(()),
    }
}
