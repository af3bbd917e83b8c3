//! Calls to a running host's admin server, for `krec diff`, `krec record` and `krec top`.

use anyhow::Context as _;

/// Where the admin server is.
#[derive(clap::Args)]
pub(super) struct AdminArgs {
    /// The host's admin server (`krec run --admin-addr`, `krec dev`'s).
    #[arg(long, default_value = "http://127.0.0.1:8080", env = "KREC_ADMIN")]
    admin: String,
    /// Bearer token of an admin server bound beyond loopback.
    #[arg(long, env = "KREC_ADMIN_TOKEN")]
    admin_token: Option<String>,
}

/// A client of the admin server.
pub(super) struct Admin {
    base: String,
    token: Option<String>,
    client: reqwest::Client,
}

impl Admin {
    pub(super) fn new(args: &AdminArgs) -> Self {
        let base = args.admin.trim_end_matches('/');
        let base = if base.contains("://") {
            base.to_owned()
        } else {
            format!("http://{base}")
        };
        // reqwest's rustls comes without a crypto provider (an admin server beyond loopback
        // may be behind TLS).
        crate::guests::oci::install_crypto();
        Admin {
            base,
            token: args.admin_token.clone(),
            client: reqwest::Client::new(),
        }
    }

    /// The admin server's URL.
    pub(super) fn base(&self) -> &str {
        &self.base
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        path: &str,
    ) -> anyhow::Result<reqwest::Response> {
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach the admin server at {} (is the host running? give its address with --admin)", self.base))?;
        if !response.status().is_success() {
            let status = response.status();
            let body = response.text().await.unwrap_or_default();
            anyhow::bail!("{path}: {status}: {}", body.trim());
        }
        Ok(response)
    }

    /// `GET path`, answered 2xx.
    pub(super) async fn get(&self, path: &str) -> anyhow::Result<reqwest::Response> {
        self.send(self.client.get(format!("{}{path}", self.base)), path)
            .await
    }

    /// `POST path`, answered 2xx: the answer's text.
    pub(super) async fn post(&self, path: &str) -> anyhow::Result<String> {
        let response = self
            .send(self.client.post(format!("{}{path}", self.base)), path)
            .await?;
        Ok(response.text().await?)
    }
}
