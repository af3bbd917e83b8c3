//! Who a request is from, as kube-apiserver's authentication filter answers it
//! (`k8s.io/apiserver/pkg/authentication`): the user a known bearer token stands for, or nobody —
//! and nobody is refused with 401 `Unauthorized` before the request is read further, as
//! kube-apiserver does with `--anonymous-auth=false`. Health checks (`/healthz`, `/livez`,
//! `/readyz`) and `/version` answer everyone, as kube-apiserver's default RBAC lets
//! `system:unauthenticated` read them.
//!
//! The static token the server knows is the admin's, written into the kubeconfig it hands out:
//! a random token (244 random bits) per server, kept in the data directory (`admin-token`,
//! readable by its owner only) when there is one, so kubeconfigs stay valid across restarts.
//! ServiceAccount tokens from the TokenRequest API are the other kind ([`service_account`]).

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::Path;

use axum::http::{HeaderMap, header};
use krec_net::client_certs::{ClientCas, PeerCertificates};

use crate::store::Store;

pub mod service_account;

pub use service_account::Signer;

/// The file in a data directory that holds the admin's token.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// A user as authentication names it (`user.Info`): what admission webhooks see in a review's
/// `userInfo` and the audit log records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// `username`.
    pub username: String,
    /// `uid` (a ServiceAccount's), or empty.
    pub uid: String,
    /// `groups`.
    pub groups: Vec<String>,
    /// `extra`: what the authenticator adds (a ServiceAccount token's id and Pod).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The user of the embedded server's kubeconfig: a member of `system:masters`.
    pub fn admin() -> Self {
        UserInfo {
            username: "krec".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            ..Default::default()
        }
    }

    /// As an admission review's `userInfo` (`authentication.k8s.io/v1` `UserInfo`) writes it:
    /// `uid` and `extra` only when there are.
    pub fn to_json(&self) -> serde_json::Value {
        let mut user = serde_json::json!({"username": self.username, "groups": self.groups});
        if !self.uid.is_empty() {
            user["uid"] = self.uid.clone().into();
        }
        if !self.extra.is_empty() {
            user["extra"] = serde_json::json!(self.extra);
        }
        user
    }

    /// Who a request without credentials is, where one is answered (`/healthz`, `/version`).
    pub fn anonymous() -> Self {
        UserInfo {
            username: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..Default::default()
        }
    }

    /// The identity a built-in component writes as (its field manager's name):
    /// `kube-controller-manager`, `kube-scheduler`, the kubelet.
    pub fn component(manager: &str) -> Self {
        let (username, group) = match manager {
            "kubelet" => ("system:node:krec-node".to_owned(), "system:nodes"),
            other => (format!("system:{other}"), "system:authenticated"),
        };
        UserInfo {
            username,
            groups: vec![group.into(), "system:authenticated".into()],
            ..Default::default()
        }
    }
}

/// The server's authenticator: the client CAs it takes certificates of, the static tokens it
/// knows and whom each stands for, and the key ServiceAccount tokens are signed with.
#[derive(Debug)]
pub struct Authenticator {
    /// The CAs whose client certificates name users (`--client-ca-file`).
    client_cas: Option<ClientCas>,
    tokens: HashMap<String, UserInfo>,
    /// Signs the TokenRequest API's tokens and checks them.
    pub signer: Signer,
    /// Requests without credentials are the admin's: the in-process server, whose only
    /// callers are in the same process.
    trusting: bool,
    /// Requests without credentials are `system:anonymous`'s (`--anonymous-auth`).
    anonymous: bool,
}

impl Authenticator {
    /// An authenticator knowing `admin_token` as the admin's and ServiceAccount tokens signed
    /// by `signer`.
    pub fn new(admin_token: &str, signer: Signer) -> Self {
        Authenticator {
            client_cas: None,
            tokens: HashMap::from([(admin_token.to_owned(), UserInfo::admin())]),
            signer,
            trusting: false,
            anonymous: false,
        }
    }

    /// This authenticator taking requests without credentials as `system:anonymous`'s.
    pub fn anonymous(mut self, allowed: bool) -> Self {
        self.anonymous = allowed;
        self
    }

    /// The in-process server's: a request without credentials is the admin's.
    pub fn trusting(signer: Signer) -> Self {
        Authenticator {
            client_cas: None,
            tokens: HashMap::new(),
            signer,
            trusting: true,
            anonymous: false,
        }
    }

    /// This authenticator taking client certificates issued by `cas`.
    pub fn client_cas(mut self, cas: Option<ClientCas>) -> Self {
        self.client_cas = cas;
        self
    }

    /// The user whose credentials the request carries — its connection's client certificate
    /// (`peer`), else its bearer token in `headers` — as kube-apiserver's authenticators are
    /// tried, x509 first; `None` for no credentials or unknown ones. A certificate the client
    /// CAs do not vouch for is logged and leaves the token to decide. A ServiceAccount token
    /// names its user only while the ServiceAccount (and the Pod it is bound to) exists in
    /// `store` with the uid the token names.
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: Option<&PeerCertificates>,
        store: &Store,
    ) -> Option<UserInfo> {
        let certificate = self.certificate_user(peer);
        if let Ok(Some(user)) = certificate {
            return Some(user);
        }
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(bearer);
        match token {
            Some(token) => self.user_of(token, store),
            // A certificate that was refused is a credential that failed: kube-apiserver's
            // anonymous fallback runs only when no authenticator failed.
            None if certificate.is_err() => None,
            None if self.trusting => Some(UserInfo::admin()),
            None if self.anonymous => Some(UserInfo::anonymous()),
            None => None,
        }
    }

    /// Whether the request's client certificate was refused (not issued by the client CAs,
    /// expired, not for client authentication): such a request is a 401 even where requests
    /// without credentials are answered.
    pub fn refuses_certificate(&self, peer: Option<&PeerCertificates>) -> bool {
        self.certificate_user(peer).is_err()
    }

    /// The user a client certificate names, as kube-apiserver's x509 authenticator
    /// (`CommonNameUserConversion`) names it: CN the user, each O a group, its fingerprint the
    /// credential id. A certificate without a CN names no one.
    /// `Ok(None)` when no certificate was presented (or no client CA is configured), or the
    /// certificate has no CN; `Err` when it was refused.
    fn certificate_user(&self, peer: Option<&PeerCertificates>) -> Result<Option<UserInfo>, ()> {
        let (Some(cas), Some(peer)) = (self.client_cas.as_ref(), peer) else {
            return Ok(None);
        };
        let subject = match cas.verify(&peer.0) {
            Ok(subject) => subject,
            Err(why) => {
                tracing::info!("a client certificate was not taken: {why}");
                return Err(());
            }
        };
        if subject.common_name.is_empty() {
            return Ok(None);
        }
        // kube's group adder: `system:authenticated` once, and not for a user who claims to
        // be anonymous.
        let mut groups = subject.organizations;
        let claimed = groups
            .iter()
            .any(|g| g == "system:authenticated" || g == "system:unauthenticated");
        if !claimed && subject.common_name != "system:anonymous" {
            groups.push("system:authenticated".into());
        }
        Ok(Some(UserInfo {
            username: subject.common_name,
            groups,
            extra: BTreeMap::from([(
                "authentication.kubernetes.io/credential-id".to_owned(),
                vec![format!("X509SHA256={}", subject.fingerprint)],
            )]),
            ..Default::default()
        }))
    }

    /// The user `token` stands for at the API server, if any.
    pub fn user_of(&self, token: &str, store: &Store) -> Option<UserInfo> {
        self.review(token, store, &[service_account::ISSUER])
            .map(|(user, _)| user)
    }

    /// The user `token` stands for and which of `audiences` it is meant for (what a
    /// `TokenReview` asks); `None` when it stands for no one or is meant for none of them. The
    /// admin's token is the API server's only.
    pub fn review(
        &self,
        token: &str,
        store: &Store,
        audiences: &[&str],
    ) -> Option<(UserInfo, Vec<String>)> {
        if service_account::looks_like_jwt(token) {
            let verified =
                self.signer
                    .verify(token, jiff::Timestamp::now().as_second(), audiences)?;
            return service_account::still_valid(&verified.subject, store)
                .then(|| (verified.user(), verified.audiences.clone()));
        }
        if !audiences.contains(&service_account::ISSUER) {
            return None;
        }
        // Compared in constant time, so the answer's timing tells nothing of the token.
        self.tokens
            .iter()
            .fold(None, |found, (known, user)| {
                if constant_time_eq(known.as_bytes(), token.as_bytes()) {
                    Some(user)
                } else {
                    found
                }
            })
            .map(|user| (user.clone(), vec![service_account::ISSUER.to_owned()]))
    }
}

/// The token of an `Authorization: Bearer <token>` header, read as kube-apiserver's bearer
/// token authenticator reads it: trimmed, the scheme in any case, the token up to the next
/// space; `None` for another scheme or an empty token.
fn bearer(value: &str) -> Option<&str> {
    let mut parts = value.trim().splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// A new random token: 64 hex digits, 244 of its bits random.
fn new_token() -> String {
    // Two v4 UUIDs, from the operating system's generator.
    let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    format!("{}{}", a.simple(), b.simple())
}

/// The admin's token: the one kept in `data_dir` (made there, readable by its owner only, the
/// first time), or a new one for a server without a data directory.
///
/// # Errors
///
/// When the token file cannot be read or written.
pub fn admin_token(data_dir: Option<&Path>) -> std::io::Result<String> {
    let Some(dir) = data_dir else {
        return Ok(new_token());
    };
    let path = dir.join(ADMIN_TOKEN_FILE);
    match read_token(&path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            create_private(&path, new_token().as_bytes())?;
            read_token(&path)
        }
        found => found,
    }
}

/// Make a file at `path` holding `bytes`, readable by its owner only — unless one is there
/// already. Written whole to a private file, then linked into place: a server starting on the
/// same directory at the same time reads one complete file, never a partial one.
fn create_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.{}", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    write_new_private(&temporary, bytes)?;
    let linked = std::fs::hard_link(&temporary, path);
    let _ = std::fs::remove_file(&temporary);
    match linked {
        Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => Err(err),
        _ => Ok(()),
    }
}

/// The token kept at `path`: one line of token characters.
fn read_token(path: &Path) -> std::io::Result<String> {
    let invalid = |why: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} {why}", path.display()),
        )
    };
    let token = std::fs::read_to_string(path)?.trim().to_owned();
    if token.is_empty() {
        return Err(invalid("is empty"));
    }
    if !token
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(invalid("holds characters a token has not"));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(path)?.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(
                "{} is readable by others (mode {:o}): whoever reads it is cluster admin",
                path.display(),
                mode & 0o777
            );
        }
    }
    Ok(token)
}

/// Write `bytes` to a new file at `path` that only its owner can read.
fn write_new_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Write `bytes` to `path` (replacing it) through a new private file renamed over it: the
/// content is never readable by others, and a symlink at `path` is replaced, not followed.
///
/// # Errors
///
/// When the directory cannot be written.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    write_new_private(&temporary, bytes)?;
    std::fs::rename(&temporary, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn signer() -> Signer {
        Signer::generate().expect("key")
    }

    fn store() -> Store {
        Store::new(std::sync::Arc::new(crate::resources::ResourceTypes::new()))
    }

    fn with(authorization: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_str(authorization) {
            headers.insert(header::AUTHORIZATION, value);
        }
        headers
    }

    #[test]
    fn only_the_known_token_should_name_a_user() {
        let authenticator = Authenticator::new("s3cret", signer());
        let store = store();
        let authenticate = |headers| authenticator.authenticate(&headers, None, &store);
        assert_eq!(authenticate(with("Bearer s3cret")), Some(UserInfo::admin()));
        assert_eq!(
            authenticate(with(" bearer s3cret trailing")),
            Some(UserInfo::admin()),
            "the token ends at the next space, as kube reads it"
        );
        for refused in [
            "",
            "Bearer",
            "Bearer s3cre",
            "Bearer s3cretX",
            "Basic s3cret",
            "Bearer  s3cret",
        ] {
            assert_eq!(authenticate(with(refused)), None, "{refused:?}");
        }
        assert_eq!(
            Authenticator::trusting(signer()).authenticate(&HeaderMap::new(), None, &store),
            Some(UserInfo::admin())
        );
        assert_eq!(
            Authenticator::trusting(signer()).authenticate(&with("Bearer unknown"), None, &store),
            None,
            "credentials are checked even when none are needed"
        );
    }

    #[test]
    fn the_token_should_be_kept_in_the_data_directory_for_its_owner_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let token = admin_token(Some(dir.path())).expect("made");
        assert_eq!(token.len(), 64);
        assert_eq!(admin_token(Some(dir.path())).expect("read"), token);
        assert_ne!(admin_token(None).expect("new"), token);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.path().join(ADMIN_TOKEN_FILE))
                .expect("file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
