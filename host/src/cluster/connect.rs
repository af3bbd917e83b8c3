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
    if config.proxy_url.is_some() {
        // kube's own stack knows proxies; it reads at most 100 response headers. Its requests
        // too run on the host's runtime (see `HomeService`).
        return Ok(kube::client::ClientBuilder::try_from(config)
            .context("creating the Kubernetes client")?
            .with_layer(&crate::process::threads::HomeLayer)
            .with_layer(&AnsweredLayer)
            .build());
    }
    build_client(config).context("creating the Kubernetes client")
}

/// Most response headers read. kube-apiserver sends a `Warning` header per distinct warning of
/// a write (up to about 4 KiB of text in all, as many as 4 096 headers of one character): a
/// client that stops at hyper's default of 100 would report a write the server made as failed,
/// inviting a duplicate on retry.
pub const MAX_RESPONSE_HEADERS: usize = 8_192;

/// How long an idle connection stays in the client's pool.
const POOL_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(55);

/// kube's client stack as `kube::Client::try_from` builds it — base URI, retries of 429/503/504,
/// authentication, extra headers, connect and read timeouts — over a hyper client that reads
/// up to [`MAX_RESPONSE_HEADERS`] headers.
fn build_client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    use kube::client::ConfigExt as _;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http1_max_headers(MAX_RESPONSE_HEADERS)
        // Below the server's 90 s idle timeout (kube-apiserver's, and the embedded one's), so
        // a pooled connection is not reused just as the server closes it.
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .build::<_, kube::client::Body>(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        // A request made on a guest's threads runs on the host's runtime, where the pooled
        // connections every guest shares are made and driven.
        .service(Answered(crate::process::threads::HomeService::new(client)));
    Ok(kube::Client::new(service, config.default_namespace))
}

/// How long a request that is not a watch waits for its answer. kube's client sets no read
/// timeout, so a server or connection that never answers would hold a list — and the cache
/// waiting on it — forever, saying nothing; kube-apiserver ends such a request after 60 s
/// (`--request-timeout`), so a little longer here only ends what the server never will.
pub const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(70);

/// Fails a request that is not a watch when no answer comes within [`ANSWER_TIMEOUT`]: an
/// error the caller sees (an informer logs it and lists again), never a silent hang.
#[derive(Clone, Debug)]
struct Answered<S>(S);

/// [`Answered`] as a layer, for kube's own stack.
#[derive(Clone, Copy, Debug)]
struct AnsweredLayer;

impl<S> tower::Layer<S> for AnsweredLayer {
    type Service = Answered<S>;

    fn layer(&self, inner: S) -> Answered<S> {
        Answered(inner)
    }
}

/// Whether `uri` asks for a watch (`watch=true` or `watch=1`), which may last as long as it
/// is wanted.
fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1" | "watch=True"))
    })
}

impl<S, B> tower::Service<http::Request<B>> for Answered<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
    S::Error: Into<tower::BoxError>,
{
    type Response = S::Response;
    type Error = tower::BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<S::Response, tower::BoxError>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let watch = is_watch(request.uri());
        let what = format!("{} {}", request.method(), request.uri().path());
        let call = self.0.call(request);
        Box::pin(async move {
            if watch {
                return call.await.map_err(Into::into);
            }
            match tokio::time::timeout(ANSWER_TIMEOUT, call).await {
                Ok(answer) => answer.map_err(Into::into),
                Err(_) => Err(format!(
                    "{what}: no answer from the API server within {ANSWER_TIMEOUT:?}"
                )
                .into()),
            }
        })
    }
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
    fn only_watches_should_wait_for_their_answer_unbounded() {
        let uri = |u: &str| u.parse::<http::Uri>().expect("uri");
        assert!(is_watch(&uri(
            "https://h/api/v1/pods?watch=true&resourceVersion=5"
        )));
        assert!(is_watch(&uri(
            "https://h/api/v1/pods?allowWatchBookmarks=true&watch=1"
        )));
        assert!(!is_watch(&uri("https://h/api/v1/pods?limit=500")));
        assert!(!is_watch(&uri(
            "https://h/api/v1/pods?allowWatchBookmarks=true"
        )));
        assert!(!is_watch(&uri("https://h/api/v1/namespaces/watch")));
    }

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
