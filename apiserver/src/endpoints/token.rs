//! `POST …/serviceaccounts/{name}/token`: the TokenRequest API (`authentication.k8s.io/v1`), as
//! kube-apiserver's `pkg/registry/core/serviceaccount/storage/token.go` answers it — a signed
//! token for the ServiceAccount, for the audiences asked (the API server's by default), for
//! `expirationSeconds` (an hour by default, ten minutes at least), bound to a Pod or Secret if
//! asked. `kubectl create token SA` is this request.

use super::*;
use crate::authentication::service_account::{ISSUER, Reference, Subject};

/// The default lifetime of a token (`spec.expirationSeconds`).
const DEFAULT_SECONDS: i64 = 3600;
/// The shortest lifetime a client may ask for.
const MIN_SECONDS: i64 = 600;
/// The longest.
const MAX_SECONDS: i64 = 1 << 32;

/// `POST`: a new token for the ServiceAccount `target` names.
pub(super) async fn request(
    server: &ApiServer,
    target: &Target,
    method: &Method,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    if *method != Method::POST {
        return Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on serviceaccounts/token"
        )));
    }
    let namespace = target.namespace.as_deref().unwrap_or_default();
    let name = target.name.as_deref().unwrap_or_default();
    let (asked, _) = decode_body(body, headers).await?;
    if let Some(kind) = asked.get("kind").and_then(Value::as_str)
        && kind != "TokenRequest"
    {
        return Err(ApiError::bad_request(format!(
            "{kind} cannot be handled as a TokenRequest"
        )));
    }
    let invalid = |name: &str, field: &str, message: String| {
        ApiError::invalid(
            "TokenRequest",
            "authentication.k8s.io",
            name,
            vec![(field.to_owned(), message)],
        )
    };
    for (field, own, what) in [
        ("name", name, "name"),
        ("namespace", namespace, "namespace"),
    ] {
        if let Some(given) = asked
            .at(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
            .filter(|given| !given.is_empty() && *given != own)
        {
            return Err(invalid(
                name,
                &format!("metadata.{field}"),
                format!(
                    "Invalid value: {given:?}: must match the service account {what} if specified"
                ),
            ));
        }
    }
    let seconds = match asked.at("/spec/expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_SECONDS,
        Some(value) => value.as_i64().ok_or_else(|| {
            ApiError::bad_request(format!(
                "spec.expirationSeconds must be an integer, not {value}"
            ))
        })?,
    };
    let too = if seconds < MIN_SECONDS {
        Some("may not specify a duration less than 10 minutes")
    } else if seconds > MAX_SECONDS {
        Some("may not specify a duration larger than 2^32 seconds")
    } else {
        None
    };
    if let Some(detail) = too {
        // kube names no object here: the request is validated before it is named.
        return Err(invalid(
            "",
            "spec.expirationSeconds",
            format!("Invalid value: {seconds}: {detail}"),
        ));
    }
    // As kube's `--service-account-max-token-expiration`: shortened, and said so.
    let mut warnings = Vec::new();
    let seconds = match server.max_token_seconds {
        Some(longest) if seconds > longest => {
            warnings.push(format!(
                "requested expiration of {seconds} seconds shortened to {longest} seconds"
            ));
            longest
        }
        _ => seconds,
    };
    let audiences: Vec<String> = asked
        .at("/spec/audiences")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .filter(|list: &Vec<String>| !list.is_empty())
        .unwrap_or_else(|| vec![ISSUER.to_owned()]);

    let store = &server.store;
    let account = store.get(&target.rt, Some(namespace), name)?;
    let mut subject = Subject {
        namespace: namespace.to_owned(),
        serviceaccount: Reference {
            name: name.to_owned(),
            uid: uid_of(&account),
        },
        pod: None,
        secret: None,
    };
    let bound = asked.at("/spec/boundObjectRef").filter(|v| !v.is_null());
    if let Some(bound) = bound {
        let (reference, is_pod) = bound_object(store, &subject, bound)?;
        if is_pod {
            subject.pod = Some(reference);
        } else {
            subject.secret = Some(reference);
        }
    }
    let now = jiff::Timestamp::now().as_second();
    let subject_uid = subject.serviceaccount.uid.clone();
    let token = server
        .authenticator
        .signer
        .issue(subject, audiences.clone(), now, seconds)
        .map_err(|err| ApiError::internal(format!("failed to sign the token: {err}")))?;
    let expires = jiff::Timestamp::from_second(now + seconds)
        .map(crate::timestamp::rfc3339)
        .map_err(|err| ApiError::internal(err.to_string()))?;
    Ok(negotiation::with_warnings(
        respond(
            201,
            &json!({
                "kind": "TokenRequest",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": namespace,
                    "uid": subject_uid, "creationTimestamp": crate::timestamp::rfc3339(jiff::Timestamp::now())},
                "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": bound},
                "status": {"token": token, "expirationTimestamp": expires},
            }),
        ),
        &warnings,
    ))
}

fn uid_of(object: &Value) -> String {
    object
        .at("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The Pod or Secret a token is to be bound to (`true` for a Pod), found in the
/// ServiceAccount's namespace with the uid the reference gives (if it gives one), as kube checks
/// it.
fn bound_object(
    store: &Store,
    subject: &Subject,
    bound: &Value,
) -> Result<(Reference, bool), ApiError> {
    let text = |key: &str| bound.get(key).and_then(Value::as_str).unwrap_or_default();
    let (kind, api_version, name) = (text("kind"), text("apiVersion"), text("name"));
    let account = &subject.serviceaccount.name;
    let is_pod = match (api_version, kind) {
        ("v1", "Pod") => true,
        ("v1", "Secret") => false,
        _ => {
            let group_version = if api_version.contains('/') || api_version.is_empty() {
                api_version.to_owned()
            } else {
                format!("/{api_version}")
            };
            return Err(ApiError::bad_request(format!(
                "cannot bind token to object of type {group_version}, Kind={kind}"
            )));
        }
    };
    let rt = store
        .registry()
        .by_kind("", "v1", kind)
        .ok_or_else(|| ApiError::internal(format!("{kind} is not served")))?;
    let object = store.get(&rt, Some(&subject.namespace), name)?;
    let uid = uid_of(&object);
    let asked_uid = text("uid");
    if !asked_uid.is_empty() && asked_uid != uid {
        let mut error = ApiError::conflict(&rt.group, &rt.plural, name);
        error.message = format!(
            "Operation cannot be fulfilled on {kind} {name:?}: the UID in the bound object reference ({asked_uid}) does not match the UID in record. The object might have been deleted and then recreated"
        );
        return Err(error);
    }
    if is_pod
        && object
            .at("/spec/serviceAccountName")
            .and_then(Value::as_str)
            .is_some_and(|used| used != account)
    {
        return Err(ApiError::bad_request(format!(
            "cannot bind token for serviceaccount {account:?} to pod running with different serviceaccount name."
        )));
    }
    Ok((
        Reference {
            name: name.to_owned(),
            uid,
        },
        is_pod,
    ))
}
