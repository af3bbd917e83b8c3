//! Connecting to an API server: kube clients from a kubeconfig (a file, its text, or the
//! inferred configuration), their requests carrying krec's `User-Agent`.

use std::path::Path;

use anyhow::Context as _;

/// The `User-Agent` krec's requests carry: `krec/<version>`, and with an `identity` (a replica
/// in leader election or sharding) `krec/<version> (<identity>)`, so that the API server's
/// audit log tells replicas apart.
pub fn user_agent(identity: Option<&str>) -> String {
    let version = env!("CARGO_PKG_VERSION");
    match identity {
        Some(identity) => format!("krec/{version} ({identity})"),
        None => format!("krec/{version}"),
    }
}

/// A kube client for `config`, its requests carrying [`user_agent`]`(identity)`.
///
/// # Errors
///
/// When the client cannot be created (TLS set-up) or the identity is not a valid header value.
pub fn client_from_config(
    mut config: kube::Config,
    identity: Option<&str>,
) -> anyhow::Result<kube::Client> {
    let agent = http::HeaderValue::from_str(&user_agent(identity))
        .with_context(|| format!("the identity {identity:?} cannot be sent as a User-Agent"))?;
    config.headers.push((http::header::USER_AGENT, agent));
    kube::Client::try_from(config).context("creating the Kubernetes client")
}

/// A kube client for the kubeconfig text `yaml`.
///
/// # Errors
///
/// When the kubeconfig is invalid.
pub async fn client_from_kubeconfig(yaml: &str) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(yaml).context("parsing the kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .context("loading the kubeconfig")?;
    client_from_config(config, None)
}

/// The configuration of the kubeconfig file `path`, or without one the inferred configuration
/// (`KUBECONFIG`, `~/.kube/config`, in-cluster), as kubectl finds it.
///
/// # Errors
///
/// When the file cannot be read or parsed, or no configuration can be inferred; the message
/// names the file.
pub async fn load_config(path: Option<&Path>) -> anyhow::Result<kube::Config> {
    match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            let parsed = kube::config::Kubeconfig::from_yaml(&text)
                .with_context(|| format!("parsing the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(parsed, &Default::default())
                .await
                .with_context(|| format!("loading the kubeconfig {}", path.display()))
        }
        None => kube::Config::infer()
            .await
            .context("no cluster configuration (KUBECONFIG, ~/.kube/config or in-cluster)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agent_names_the_replica() {
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(user_agent(None), format!("krec/{version}"));
        assert_eq!(user_agent(Some("r-1")), format!("krec/{version} (r-1)"));
    }

    #[tokio::test]
    async fn a_missing_kubeconfig_is_named() {
        let err = load_config(Some(Path::new("/nonexistent/kubeconfig")))
            .await
            .expect_err("no such file");
        assert!(
            format!("{err:#}").contains("/nonexistent/kubeconfig"),
            "{err:#}"
        );
    }
}
