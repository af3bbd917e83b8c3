//! ServiceAccount tokens, as kube-apiserver's TokenRequest API issues them and its
//! ServiceAccount authenticator checks them (`pkg/serviceaccount`): a JWT signed with the
//! server's key (ES256), naming the ServiceAccount (and the Pod it is bound to, if any) by name
//! and uid, valid for the audiences asked for until it expires — and only while the objects it
//! names still exist with those uids, so deleting a ServiceAccount revokes its tokens.
//!
//! The signing key is made on first start and kept in the data directory
//! (`service-account-key`, readable by its owner only), so tokens outlive a restart as the
//! admin's does.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _,
    UnparsedPublicKey,
};
use serde::{Deserialize, Serialize};

use super::UserInfo;
use crate::store::Store;
use krec_core::json::Pointer as _;

/// The file in a data directory that holds the key tokens are signed with (PKCS#8).
pub const SIGNING_KEY_FILE: &str = "service-account-key";

/// The issuer tokens name (`iss`), kube-apiserver's usual `--service-account-issuer`; also the
/// audience the API server accepts (its default `--api-audiences`).
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The extra a token's user carries naming the token (`JTI=<id>`), as kube 1.30+ sets it.
pub const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// Signs and checks ServiceAccount tokens.
pub struct Signer {
    key: EcdsaKeyPair,
    /// The key's id (`kid`): the base64url SHA-256 of its public key.
    key_id: String,
    random: SystemRandom,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

/// What a token says of whom it stands for: the ServiceAccount and, when bound to one, the Pod
/// or Secret (its `kubernetes.io` claim; fields in the order kube writes them, by name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The Pod the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Reference>,
    /// The Secret the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<Reference>,
    /// The ServiceAccount.
    pub serviceaccount: Reference,
}

/// An object a token names: name and uid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reference {
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
}

#[derive(Serialize, Deserialize)]
struct Claims {
    aud: Vec<String>,
    exp: i64,
    iat: i64,
    iss: String,
    jti: String,
    #[serde(rename = "kubernetes.io")]
    kubernetes: Subject,
    nbf: i64,
    sub: String,
}

/// A token checked: whom it names, until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The objects it names (to be found still existing).
    pub subject: Subject,
    /// Its id.
    pub id: String,
    /// The audiences asked for that it is meant for.
    pub audiences: Vec<String>,
}

impl Verified {
    /// The user the token stands for (`system:serviceaccount:<ns>:<name>`), as kube names it.
    pub fn user(&self) -> UserInfo {
        let Subject {
            namespace,
            serviceaccount,
            pod,
            ..
        } = &self.subject;
        let mut extra = std::collections::BTreeMap::from([(
            CREDENTIAL_ID.to_owned(),
            vec![format!("JTI={}", self.id)],
        )]);
        if let Some(pod) = pod {
            extra.insert(
                "authentication.kubernetes.io/pod-name".into(),
                vec![pod.name.clone()],
            );
            extra.insert(
                "authentication.kubernetes.io/pod-uid".into(),
                vec![pod.uid.clone()],
            );
        }
        UserInfo {
            username: format!("system:serviceaccount:{namespace}:{}", serviceaccount.name),
            uid: serviceaccount.uid.clone(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
            extra,
        }
    }
}

impl Signer {
    /// A signer with a new key (for a server without a data directory).
    ///
    /// # Errors
    ///
    /// When the system's random generator fails.
    pub fn generate() -> std::io::Result<Self> {
        let random = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &random)
            .map_err(|_| std::io::Error::other("cannot make a signing key"))?;
        Self::from_pkcs8(pkcs8.as_ref(), random)
    }

    /// The signer whose key is kept in `data_dir` (made there, private to its owner, the first
    /// time); a new key without a data directory.
    ///
    /// # Errors
    ///
    /// When the key file cannot be read, written or parsed.
    pub fn in_data_dir(data_dir: Option<&Path>) -> std::io::Result<Self> {
        let Some(dir) = data_dir else {
            return Self::generate();
        };
        let path = dir.join(SIGNING_KEY_FILE);
        let pkcs8 = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                let random = SystemRandom::new();
                let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &random)
                    .map_err(|_| std::io::Error::other("cannot make a signing key"))?;
                super::create_private(&path, pkcs8.as_ref())?;
                std::fs::read(&path)?
            }
            Err(err) => return Err(err),
        };
        Self::from_pkcs8(&pkcs8, SystemRandom::new())
            .map_err(|err| std::io::Error::new(err.kind(), format!("{}: {err}", path.display())))
    }

    fn from_pkcs8(pkcs8: &[u8], random: SystemRandom) -> std::io::Result<Self> {
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8, &random)
            .map_err(|err| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("not a P-256 PKCS#8 key: {err}"),
                )
            })?;
        let digest = ring::digest::digest(&ring::digest::SHA256, key.public_key().as_ref());
        Ok(Signer {
            key_id: URL_SAFE_NO_PAD.encode(digest.as_ref()),
            key,
            random,
        })
    }

    /// A token for `subject`, valid for `audiences` from `now` for `seconds`.
    ///
    /// # Errors
    ///
    /// When signing fails (the system's random generator).
    pub fn issue(
        &self,
        subject: Subject,
        audiences: Vec<String>,
        now: i64,
        seconds: i64,
    ) -> std::io::Result<String> {
        let header = serde_json::json!({"alg": "ES256", "kid": self.key_id});
        let claims = Claims {
            aud: audiences,
            exp: now + seconds,
            iat: now,
            iss: ISSUER.into(),
            jti: uuid::Uuid::new_v4().to_string(),
            sub: format!(
                "system:serviceaccount:{}:{}",
                subject.namespace, subject.serviceaccount.name
            ),
            kubernetes: subject,
            nbf: now,
        };
        let encode = |value: &serde_json::Value| URL_SAFE_NO_PAD.encode(value.to_string());
        let claims = serde_json::to_value(&claims).map_err(std::io::Error::other)?;
        let signed = format!("{}.{}", encode(&header), encode(&claims));
        let signature = self
            .key
            .sign(&self.random, signed.as_bytes())
            .map_err(|_| std::io::Error::other("cannot sign a token"))?;
        Ok(format!(
            "{signed}.{}",
            URL_SAFE_NO_PAD.encode(signature.as_ref())
        ))
    }

    /// The token's subject, if this server signed it, it is valid at `now` and meant for one of
    /// `audiences` (the API server's is [`ISSUER`]); `None` otherwise. Whether the objects it
    /// names still exist is the caller's to check.
    pub fn verify(&self, token: &str, now: i64, audiences: &[&str]) -> Option<Verified> {
        let mut parts = token.split('.');
        let (header, claims, signature) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()?;
        if header["alg"] != "ES256" {
            return None;
        }
        let signed = &token[..token.rfind('.')?];
        let signature = URL_SAFE_NO_PAD.decode(signature).ok()?;
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, self.key.public_key().as_ref())
            .verify(signed.as_bytes(), &signature)
            .ok()?;
        let claims: Claims = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).ok()?).ok()?;
        // kube's validator allows a minute of clock skew on `nbf` and `exp`.
        const LEEWAY: i64 = 60;
        let fresh = claims.nbf <= now + LEEWAY && now < claims.exp + LEEWAY;
        let meant: Vec<String> = claims
            .aud
            .iter()
            .filter(|a| audiences.contains(&a.as_str()))
            .cloned()
            .collect();
        (fresh && claims.iss == ISSUER && !meant.is_empty()).then_some(Verified {
            subject: claims.kubernetes,
            id: claims.jti,
            audiences: meant,
        })
    }
}

/// Whether the objects `subject` names exist with the uids it names and are not being deleted,
/// as kube's ServiceAccount authenticator asks before it names a token's user.
pub fn still_valid(subject: &Subject, store: &Store) -> bool {
    let registry = store.registry();
    let alive = |kind: &str, reference: &Reference| {
        registry.by_kind("", "v1", kind).is_some_and(|rt| {
            store
                .get(&rt, Some(&subject.namespace), &reference.name)
                .is_ok_and(|object| {
                    object
                        .at("/metadata/uid")
                        .and_then(serde_json::Value::as_str)
                        == Some(reference.uid.as_str())
                        && object.at("/metadata/deletionTimestamp").is_none()
                })
        })
    };
    alive("ServiceAccount", &subject.serviceaccount)
        && subject.pod.as_ref().is_none_or(|pod| alive("Pod", pod))
        && subject
            .secret
            .as_ref()
            .is_none_or(|secret| alive("Secret", secret))
}

/// Whether `token` has a JWT's shape (three dot-separated parts): the ServiceAccount
/// authenticator's to answer, not the static tokens'.
pub fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject() -> Subject {
        Subject {
            namespace: "demo".into(),
            serviceaccount: Reference {
                name: "reader".into(),
                uid: "u-1".into(),
            },
            pod: None,
            secret: None,
        }
    }

    #[test]
    fn a_token_should_be_good_for_its_lifetime_on_the_server_that_signed_it() {
        let signer = Signer::generate().expect("key");
        let token = signer
            .issue(subject(), vec![ISSUER.into()], 1_000, 600)
            .expect("signed");
        assert!(looks_like_jwt(&token));
        let verified = signer.verify(&token, 1_100, &[ISSUER]).expect("valid");
        assert_eq!(verified.subject, subject());
        let user = verified.user();
        assert_eq!(user.username, "system:serviceaccount:demo:reader");
        assert_eq!(user.uid, "u-1");
        assert_eq!(
            user.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:demo",
                "system:authenticated"
            ]
        );
        assert_eq!(user.extra[CREDENTIAL_ID], [format!("JTI={}", verified.id)]);

        assert_eq!(signer.verify(&token, 1_700, &[ISSUER]), None, "expired");
        assert_eq!(signer.verify(&token, 800, &[ISSUER]), None, "not yet valid");
        let other = Signer::generate().expect("key");
        assert_eq!(
            other.verify(&token, 1_100, &[ISSUER]),
            None,
            "another server's"
        );
        let tampered = {
            let (signed, signature) = token.rsplit_once('.').expect("parts");
            let (header, _) = signed.split_once('.').expect("parts");
            let mut claims: serde_json::Value = serde_json::from_slice(
                &URL_SAFE_NO_PAD
                    .decode(signed.split('.').nth(1).expect("claims"))
                    .expect("base64"),
            )
            .expect("json");
            claims["kubernetes.io"]["serviceaccount"]["name"] = "admin".into();
            format!(
                "{header}.{}.{signature}",
                URL_SAFE_NO_PAD.encode(claims.to_string())
            )
        };
        assert_eq!(
            signer.verify(&tampered, 1_100, &[ISSUER]),
            None,
            "claims changed"
        );
        let elsewhere = signer
            .issue(subject(), vec!["vault".into()], 1_000, 600)
            .expect("signed");
        assert_eq!(
            signer.verify(&elsewhere, 1_100, &[ISSUER]),
            None,
            "meant for another audience"
        );
        let vault = signer
            .verify(&elsewhere, 1_100, &["vault"])
            .expect("for vault");
        assert_eq!(vault.audiences, ["vault"]);
    }

    #[test]
    fn the_key_should_be_kept_in_the_data_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = Signer::in_data_dir(Some(dir.path())).expect("made");
        let token = first
            .issue(subject(), vec![ISSUER.into()], 1_000, 600)
            .expect("signed");
        let again = Signer::in_data_dir(Some(dir.path())).expect("read");
        assert!(again.verify(&token, 1_100, &[ISSUER]).is_some());
        std::fs::write(dir.path().join(SIGNING_KEY_FILE), b"garbage").expect("write");
        let err = Signer::in_data_dir(Some(dir.path())).expect_err("refused");
        assert!(err.to_string().contains(SIGNING_KEY_FILE), "{err}");
    }
}
