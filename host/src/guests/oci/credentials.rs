//! A registry's credentials: a `kubernetes.io/dockerconfigjson` Secret (a guest's
//! `spec.pullSecret`, as a Pod's `imagePullSecrets`), read from the API server at each pull and
//! matched to the registry as the kubelet matches them.

use std::collections::HashMap;

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;

use super::error::OciError;
use crate::cluster::client::ApiClient;
use crate::manifest::SecretRef;
use krec_core::Gvk;

/// The credentials `secret` holds for `registry` (`host[:port]`, as a reference names it), read
/// from the API server (never cached); anonymous without a Secret.
///
/// # Errors
///
/// When the Secret names no namespace, cannot be read, or holds no Docker config.
pub async fn pull_secret_auth(
    api: &ApiClient,
    secret: Option<&SecretRef>,
    registry: &str,
) -> Result<RegistryAuth, OciError> {
    let Some(secret) = secret else {
        return Ok(RegistryAuth::Anonymous);
    };
    let Some(namespace) = &secret.namespace else {
        return Err(OciError::Credentials {
            secret: String::new(),
            problem: "namespace: required (only a Reconciler's defaults to its own namespace)"
                .into(),
        });
    };
    let refused = |problem: String| OciError::Credentials {
        secret: format!("Secret {namespace}/{}: ", secret.name),
        problem,
    };
    let object = api
        .get(&Gvk::new("", "v1", "Secret"), Some(namespace), &secret.name)
        .await
        .map_err(|err| OciError::Credentials {
            secret: String::new(),
            problem: format!("reading Secret {namespace}/{}: {err}", secret.name),
        })?;
    let data = object["data"][".dockerconfigjson"]
        .as_str()
        .ok_or_else(|| {
            refused(
                "has no .dockerconfigjson (is it of type kubernetes.io/dockerconfigjson?)".into(),
            )
        })?;
    let config = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|err| refused(err.to_string()))?;
    auth_from_docker_config(&config, registry).map_err(|err| match err {
        OciError::Credentials { problem, .. } => refused(problem),
        other => other,
    })
}

/// The credentials for `registry` (`host[:port]`, as a reference names it) in a Docker config
/// (a `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson`), matched as the kubelet
/// matches them: by host (and port), `https://` and `/v1/`, `/v2/` paths aside; an `auth`
/// (base64 `user:password`) wins over `username` and `password`. `Anonymous` when none matches.
///
/// # Errors
///
/// When the text is not a Docker config.
pub fn auth_from_docker_config(config: &[u8], registry: &str) -> Result<RegistryAuth, OciError> {
    #[derive(serde::Deserialize)]
    struct DockerConfig {
        #[serde(default)]
        auths: HashMap<String, Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(default)]
        username: String,
        #[serde(default)]
        password: String,
        #[serde(default)]
        auth: String,
    }
    let refused = |problem: String| OciError::Credentials {
        secret: String::new(),
        problem,
    };
    let config: DockerConfig = serde_json::from_slice(config)
        .map_err(|err| refused(format!("not a Docker config (.dockerconfigjson): {err}")))?;
    let host_of = |key: &str| {
        let key = key
            .strip_prefix("https://")
            .or_else(|| key.strip_prefix("http://"))
            .unwrap_or(key);
        key.split('/').next().unwrap_or_default().to_owned()
    };
    let Some(entry) = config
        .auths
        .iter()
        .find(|(key, _)| host_of(key) == registry)
        .map(|(_, entry)| entry)
    else {
        return Ok(RegistryAuth::Anonymous);
    };
    if !entry.auth.is_empty() {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(entry.auth.trim())
            .map_err(|err| refused(format!("auths[{registry:?}].auth is not base64: {err}")))?;
        let text = String::from_utf8_lossy(&decoded);
        let (user, password) = text
            .split_once(':')
            .ok_or_else(|| refused(format!("auths[{registry:?}].auth is not user:password")))?;
        return Ok(RegistryAuth::Basic(user.to_owned(), password.to_owned()));
    }
    Ok(RegistryAuth::Basic(
        entry.username.clone(),
        entry.password.clone(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_credentials_should_match_the_registry_as_the_kubelet_does() {
        let config = br#"{"auths": {
            "https://ghcr.io/v2/": {"auth": "dTE6cDE6eA=="},
            "127.0.0.1:5000": {"username": "u2", "password": "p2"},
            "https://index.docker.io/v1/": {"username": "hub", "password": "h"}}}"#;
        let shown = |registry: &str| match auth_from_docker_config(config, registry) {
            Ok(RegistryAuth::Basic(u, p)) => format!("{u}:{p}"),
            Ok(RegistryAuth::Anonymous) => "anonymous".into(),
            other => format!("{other:?}"),
        };
        assert_eq!(shown("ghcr.io"), "u1:p1:x", "split at the first colon");
        assert_eq!(shown("127.0.0.1:5000"), "u2:p2");
        assert_eq!(shown("index.docker.io"), "hub:h");
        assert_eq!(shown("127.0.0.1:5001"), "anonymous");
        assert!(auth_from_docker_config(b"not json", "x").is_err());
    }
}
