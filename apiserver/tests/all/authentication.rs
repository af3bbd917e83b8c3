//! Who may talk to the server: the kubeconfig's bearer token, nobody else — 401 `Unauthorized`
//! as kube-apiserver answers with anonymous requests off — except for health checks and
//! `/version`.

use krec_apiserver::Server;
use kube::Api;
use kube::api::ListParams;
use serde_json::Value;

use crate::support::kubectl::{self, Kubectl};
use crate::support::raw::{client_for, exchange};

fn get(path: &str, authorization: Option<&str>) -> String {
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_kubeconfigs_token_should_be_let_in() {
    let cluster = Server::builder().start().await.expect("start");
    for authorization in [None, Some("Bearer wrong"), Some("Basic a3JlYzprcmVj")] {
        let (code, body) = exchange(&cluster, &get("/api/v1/namespaces", authorization)).await;
        assert_eq!(code, 401, "{authorization:?}: {body}");
        let status: Value = serde_json::from_str(body.trim()).expect("a Status");
        assert_eq!(
            status,
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized",
                "code": 401}),
            "{authorization:?}"
        );
    }
    let admin = format!("Bearer {}", cluster.token());
    let (code, body) = exchange(&cluster, &get("/api/v1/namespaces", Some(&admin))).await;
    assert_eq!(code, 200, "{body}");
    // Health checks and the version answer everyone, as kube-apiserver's default RBAC lets
    // `system:unauthenticated` read them.
    for path in ["/healthz", "/livez", "/readyz", "/version"] {
        assert_eq!(exchange(&cluster, &get(path, None)).await.0, 200, "{path}");
        // Wrong credentials are refused even there, as kube-apiserver refuses them.
        assert_eq!(
            exchange(&cluster, &get(path, Some("Bearer wrong"))).await.0,
            401,
            "{path}"
        );
    }
    // The kubeconfig carries the token: a kube client from it is let in.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> =
        Api::all(client_for(&cluster).await);
    assert!(
        !namespaces
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_with_another_token_should_be_told_to_log_in() {
    let (cluster, _dir, kubectl): (Server, _, Kubectl) = kubectl::start().await;
    kubectl.ok(&["get", "namespaces"]);
    let out = kubectl.run(&["--token", "not-the-token", "get", "pods"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error: You must be logged in to the server (Unauthorized)"),
        "{stderr}"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_should_keep_its_token_in_its_data_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = Server::builder()
        .data_dir(dir.path())
        .start()
        .await
        .expect("start");
    let token = first.token().to_owned();
    assert_eq!(token.len(), 64);
    first.shutdown().await;
    let again = Server::builder()
        .data_dir(dir.path())
        .start()
        .await
        .expect("restart");
    assert_eq!(
        again.token(),
        token,
        "kubeconfigs written before still work"
    );
    again.shutdown().await;
    let other = Server::builder().start().await.expect("start");
    assert_ne!(
        other.token(),
        token,
        "each server without a data directory has its own"
    );
    other.shutdown().await;
}

/// What a user types: `kubectl --as` a ServiceAccount, refused with kube's 403 until a
/// RoleBinding allows it, and only where it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_as_a_service_account_should_be_refused_until_a_role_binding_allows_it() {
    let (cluster, dir, kubectl): (Server, _, Kubectl) = kubectl::start().await;
    kubectl.ok(&["create", "namespace", "other"]);
    let reader = "--as=system:serviceaccount:demo:reader";
    let out = kubectl.run(&[reader, "get", "pods", "-n", "other"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"Error from server (Forbidden): pods is forbidden: User "system:serviceaccount:demo:reader" cannot list resource "pods" in API group "" in the namespace "other""#),
        "{stderr}"
    );
    let binding = dir.path().join("reader.yaml");
    std::fs::write(
        &binding,
        "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader, namespace: other}
rules:
- apiGroups: [\"\"]
  resources: [pods]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader, namespace: other}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
- {kind: ServiceAccount, name: reader, namespace: demo}
",
    )
    .expect("write");
    kubectl.ok(&["apply", "-f", &binding.display().to_string()]);
    let out = kubectl.run(&[reader, "get", "pods", "-n", "other"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No resources found in other namespace.")
    );
    // Only what the Role names, only where it is bound.
    for args in [
        vec![reader, "get", "pods", "-n", "default"],
        vec![reader, "delete", "pod", "web", "-n", "other"],
        vec![reader, "get", "configmaps", "-n", "other"],
    ] {
        let out = kubectl.run(&args);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Error from server (Forbidden)"),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A group given with --as-group counts too.
    let out = kubectl.run(&["--as=alice", "--as-group=readers", "get", "nodes"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            r#"nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope"#
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.shutdown().await;
}

/// Impersonation headers the server does not act on are refused, never skipped (a skipped
/// one would leave the request the caller's); an empty `Impersonate-User` impersonates no one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_headers_should_be_acted_on_or_refused() {
    let cluster = Server::builder().start().await.expect("start");
    let admin = format!("Authorization: Bearer {}", cluster.token());
    let request = |extra: &str| {
        format!(
            "GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\n{admin}\r\n{extra}Connection: close\r\n\r\n"
        )
    };
    for (extra, code) in [
        ("Impersonate-User: alice\r\nImpersonate-Uid: 1\r\n", 400),
        (
            "Impersonate-User: alice\r\nImpersonate-Extra-Scopes: x\r\n",
            400,
        ),
        ("Impersonate-User: j\u{f6}e\r\n", 400),
        ("Impersonate-Group: readers\r\n", 500),
        ("Impersonate-User: \r\n", 200),
        ("Impersonate-User: alice\r\n", 403),
        // Not a ServiceAccount (three parts): the user of that name, refused all the same.
        ("Impersonate-User: system:serviceaccount:a:b:c\r\n", 403),
    ] {
        let (got, body) = exchange(&cluster, &request(extra)).await;
        assert_eq!(got, code, "{extra:?}: {body}");
    }
    cluster.shutdown().await;
}

/// `kubectl create token`: a ServiceAccount's token from the TokenRequest API, the user it
/// names allowed what its bindings allow, and nothing once the ServiceAccount is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_accounts_token_should_stand_for_it_while_it_exists() {
    let (cluster, _dir, kubectl): (Server, _, Kubectl) = kubectl::start().await;
    kubectl.ok(&["create", "namespace", "demo"]);
    let missing = kubectl.run(&["create", "token", "reader", "-n", "demo"]);
    assert!(!missing.status.success());
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr).trim(),
        r#"error: failed to create token: serviceaccounts "reader" not found"#
    );
    kubectl.ok(&["create", "serviceaccount", "reader", "-n", "demo"]);
    let short = kubectl.run(&["create", "token", "reader", "-n", "demo", "--duration=5m"]);
    assert!(
        String::from_utf8_lossy(&short.stderr).contains(
            "spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes"
        ),
        "{}",
        String::from_utf8_lossy(&short.stderr)
    );
    let token = kubectl
        .ok(&["create", "token", "reader", "-n", "demo"])
        .trim()
        .to_owned();
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    let as_reader = |args: &[&str]| kubectl.run(&[&["--token", token.as_str()], args].concat());

    let out = as_reader(&["get", "pods", "-n", "demo"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        r#"Error from server (Forbidden): pods is forbidden: User "system:serviceaccount:demo:reader" cannot list resource "pods" in API group "" in the namespace "demo""#
    );
    kubectl.ok(&[
        "create",
        "rolebinding",
        "reader",
        "-n",
        "demo",
        "--clusterrole=view",
        "--serviceaccount=demo:reader",
    ]);
    let out = as_reader(&["get", "pods", "-n", "demo"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let whoami = as_reader(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&whoami.stdout),
        "system:serviceaccount:demo:reader",
        "{}",
        String::from_utf8_lossy(&whoami.stderr)
    );

    // Deleting the ServiceAccount revokes its tokens; a new one of the same name does not
    // bring them back (another uid).
    kubectl.ok(&["delete", "serviceaccount", "reader", "-n", "demo"]);
    kubectl.ok(&["create", "serviceaccount", "reader", "-n", "demo"]);
    let out = as_reader(&["get", "pods", "-n", "demo"]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("error: You must be logged in to the server (Unauthorized)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.shutdown().await;
}

/// `--service-account-max-token-expiration`: a token asked for longer (a hundred years) is
/// issued for the longest allowed, and kubectl shows kube's warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_asked_for_longer_than_allowed_should_be_shortened_with_a_warning() {
    let (cluster, _dir, kubectl): (Server, _, Kubectl) = kubectl::start_with(
        Server::builder().max_token_expiration(Some(std::time::Duration::from_secs(86_400))),
    )
    .await;
    kubectl.ok(&["create", "serviceaccount", "long", "-n", "default"]);
    let out = kubectl.run(&[
        "create",
        "token",
        "long",
        "-n",
        "default",
        "--duration=876000h",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "Warning: requested expiration of 3153600000 seconds shortened to 86400 seconds"
    );
    let token = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let claims = token.split('.').nth(1).expect("a JWT's claims");
    use base64::Engine as _;
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(claims)
            .expect("base64url"),
    )
    .expect("JSON claims");
    let lifetime = claims["exp"].as_i64().unwrap_or(0) - claims["iat"].as_i64().unwrap_or(0);
    assert_eq!(lifetime, 86_400, "{claims}");
    cluster.shutdown().await;
}

/// `--anonymous-auth`: a request without a token is `system:anonymous`'s, which kube's default
/// policy lets read health and version only — a 403, not a 401, for the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_requests_should_be_judged_by_rbac_when_allowed() {
    let cluster = Server::builder()
        .anonymous_auth(true)
        .start()
        .await
        .expect("start");
    let (code, body) = exchange(&cluster, &get("/api/v1/namespaces", None)).await;
    assert_eq!(code, 403, "{body}");
    let status: Value = serde_json::from_str(body.trim()).expect("a Status");
    assert_eq!(
        status["message"],
        r#"namespaces is forbidden: User "system:anonymous" cannot list resource "namespaces" in API group "" at the cluster scope"#
    );
    let (code, body) = exchange(&cluster, &get("/api", None)).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(r#"forbidden: User \"system:anonymous\" cannot get path \"/api\""#),
        "{body}"
    );
    assert_eq!(exchange(&cluster, &get("/healthz", None)).await.0, 200);
    assert_eq!(
        exchange(&cluster, &get("/api", Some("Bearer wrong")))
            .await
            .0,
        401,
        "wrong credentials are still refused"
    );
    cluster.shutdown().await;
}

/// A test CA: its certificate (PEM) and what issues under it.
struct TestCa {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    fn new(name: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let pem = params.self_signed(&key).expect("CA").pem();
        TestCa {
            pem,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A client certificate for `user` in `group` (PEM certificate and key), valid now — or
    /// expired in 2021.
    fn client(&self, user: &str, group: &str, expired: bool) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, user);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, group);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("client certificate");
        (cert.pem(), key.serialize_pem())
    }
}

/// `cluster`'s kubeconfig with a client certificate in place of the token, as kind's and
/// kubeadm's are written: `client-certificate-data` and `client-key-data`.
fn certificate_kubeconfig(cluster: &Server, (cert, key): (String, String)) -> String {
    use base64::Engine as _;
    let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    cluster.kubeconfig().replace(
        &format!("token: {}", cluster.token()),
        &format!(
            "client-certificate-data: {}\n    client-key-data: {}",
            encode(&cert),
            encode(&key)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_with_a_client_certificate_should_be_its_cn_in_its_o_groups() {
    let ca = TestCa::new("test-client-ca");
    let (cluster, dir, kubectl) =
        kubectl::start_with(Server::builder().client_ca(ca.pem.clone())).await;
    let as_cert = |name: &str, client: (String, String)| {
        let path = dir.path().join(name);
        std::fs::write(&path, certificate_kubeconfig(&cluster, client)).expect("kubeconfig");
        kubectl.with_kubeconfig(path)
    };

    // CN the user, each O a group, the certificate's fingerprint its credential id.
    let jane = as_cert("jane", ca.client("jane", "dev", false));
    let review: Value =
        serde_json::from_str(&jane.ok(&["auth", "whoami", "-o", "json"])).expect("JSON");
    let user = &review["status"]["userInfo"];
    assert_eq!(user["username"], "jane", "{review}");
    assert_eq!(
        user["groups"],
        serde_json::json!(["dev", "system:authenticated"]),
        "{review}"
    );
    let id = user["extra"]["authentication.kubernetes.io/credential-id"][0]
        .as_str()
        .unwrap_or_default();
    assert!(
        id.starts_with("X509SHA256=") && id.len() == 11 + 64,
        "{review}"
    );
    // RBAC judges her as any other user.
    let out = jane.run(&["get", "namespaces"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"User "jane" cannot list resource "namespaces""#),
        "{stderr}"
    );
    // O=system:masters is cluster admin, as kind's and kubeadm's admin certificates are.
    let admin = as_cert(
        "admin",
        ca.client("kubernetes-admin", "system:masters", false),
    );
    assert!(admin.ok(&["get", "namespaces"]).contains("kube-system"));

    // A certificate of another CA, or an expired one, is no one: kube-apiserver's 401.
    let stranger = as_cert(
        "stranger",
        TestCa::new("other-ca").client("mallory", "system:masters", false),
    );
    let expired = as_cert("expired", ca.client("jane", "system:masters", true));
    for kubectl in [&stranger, &expired] {
        let out = kubectl.run(&["get", "namespaces"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("error: You must be logged in to the server (Unauthorized)"),
            "{stderr}"
        );
    }
    // A refused certificate beside a valid token: the token decides, as kube's union of
    // authenticators does.
    let path = dir.path().join("both");
    let both = certificate_kubeconfig(
        &cluster,
        TestCa::new("other-ca").client("mallory", "dev", false),
    )
    .replace(
        "    client-key-data:",
        &format!("    token: {}\n    client-key-data:", cluster.token()),
    );
    std::fs::write(&path, both).expect("kubeconfig");
    assert!(
        kubectl
            .with_kubeconfig(path)
            .ok(&["get", "namespaces"])
            .contains("kube-system")
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_client_certificate_should_not_fall_back_to_anonymous() {
    let ca = TestCa::new("test-client-ca");
    let (cluster, dir, kubectl) = kubectl::start_with(
        Server::builder()
            .client_ca(ca.pem.clone())
            .anonymous_auth(true),
    )
    .await;
    let path = dir.path().join("stranger");
    std::fs::write(
        &path,
        certificate_kubeconfig(
            &cluster,
            TestCa::new("other-ca").client("mallory", "dev", false),
        ),
    )
    .expect("kubeconfig");
    let stranger = kubectl.with_kubeconfig(path);
    // kube-apiserver's anonymous fallback runs only when no credential failed: a 401, even
    // where anonymous requests are answered.
    for args in [
        &["get", "namespaces"][..],
        &["get", "--raw", "/healthz"][..],
    ] {
        let out = stranger.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(unauthorized(&stderr), "{args:?}: {stderr}");
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_client_ca_no_client_certificate_should_be_taken() {
    // As kube-apiserver without --client-ca-file: a certificate is not even asked for, so the
    // request has no credentials.
    let ca = TestCa::new("test-client-ca");
    let (cluster, dir, kubectl) = kubectl::start_with(Server::builder()).await;
    let path = dir.path().join("admin");
    std::fs::write(
        &path,
        certificate_kubeconfig(
            &cluster,
            ca.client("kubernetes-admin", "system:masters", false),
        ),
    )
    .expect("kubeconfig");
    let out = kubectl.with_kubeconfig(path).run(&["get", "namespaces"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(unauthorized(&stderr), "{stderr}");
    cluster.shutdown().await;
}

/// Whether kubectl's `stderr` tells of a 401 (its discovery words it as the server asking for
/// credentials; a request as `Unauthorized`).
fn unauthorized(stderr: &str) -> bool {
    stderr.contains("(Unauthorized)")
        || stderr.contains("the server has asked for the client to provide credentials")
}
