//! Webhooks in unit tests: [`FakeCluster::validate`] and [`FakeCluster::mutate`] run a validator
//! or a mutator on a typed [`AdmissionRequest`] (built with [`AdmissionRequest::create`],
//! [`update`](AdmissionRequest::update) or [`delete`](AdmissionRequest::delete)) the way the
//! guest's export runs it in the host — the request crossing as JSON, reads served by the fake
//! cluster, writes refused as the host refuses them during a review — and return the typed
//! verdict and, for a mutator, the object it leaves and the JSON patch the API server gets.

use std::sync::Arc;

use kube_core::Resource;
use serde::Serialize;

use super::FakeCluster;
use crate::admission::{AdmissionRequest, Mutator, Operation, Validator, Verdict};
use crate::native::{
    self, Host, Level, ObjectReference, PatchType, Review, ReviewOperation, ReviewUserInfo,
    ReviewVerdict, WitGvk,
};
use crate::{Error, EventType, ListParams, Preconditions, Result};

/// What a mutator did to a request: its verdict, the object it leaves (`None` for a delete), and
/// the JSON patch (RFC 6902 operations) the host answers the API server with — empty when
/// nothing changed.
#[derive(Clone, Debug, PartialEq)]
pub struct Mutated<K> {
    /// Allowed or denied, and why.
    pub verdict: Verdict,
    /// The object as the API server would store it.
    pub object: Option<K>,
    /// The changes, as the host sends them.
    pub patch: Vec<serde_json::Value>,
}

impl FakeCluster {
    /// Run `validator` on `request`, its reads served by this cluster and its writes refused.
    ///
    /// # Panics
    ///
    /// When the validator panics (in the host the review traps and the webhook's
    /// `failurePolicy` decides), or an object of the request does not encode.
    pub fn validate<V: Validator>(
        &self,
        validator: &V,
        request: &AdmissionRequest<V::Object>,
    ) -> Verdict
    where
        V::Object: Serialize,
    {
        let verdict = native::validate_with(validator, self.reviewing(), review(request));
        typed(verdict)
    }

    /// Run `mutator` on `request`, its reads served by this cluster and its writes refused.
    ///
    /// # Panics
    ///
    /// As [`validate`](Self::validate); also when the mutated object does not decode as `K`.
    pub fn mutate<M: Mutator>(
        &self,
        mutator: &M,
        request: &AdmissionRequest<M::Object>,
    ) -> Mutated<M::Object> {
        let sent = review(request);
        let original: Option<serde_json::Value> = sent
            .object
            .as_deref()
            .map(|o| serde_json::from_str(o).expect("the request's object is JSON"));
        let mut verdict = native::mutate_with(mutator, self.reviewing(), sent);
        let (object, patch) = match (verdict.patched.take(), original) {
            (Some(patched), Some(original)) => {
                let patched: serde_json::Value =
                    serde_json::from_str(&patched).expect("the mutated object is JSON");
                let patch = json_patch::diff(&original, &patched);
                let ops = serde_json::to_value(&patch)
                    .ok()
                    .and_then(|v| v.as_array().cloned())
                    .unwrap_or_default();
                (Some(patched), ops)
            }
            (None, original) => (original, Vec::new()),
            (Some(_), None) => (None, Vec::new()),
        };
        Mutated {
            verdict: typed(verdict),
            object: object.map(|o| {
                crate::FromJson::from_json_text(o.to_string())
                    .expect("the mutated object decodes as the mutator's type")
            }),
            patch,
        }
    }

    /// This cluster as a webhook sees it during a review: reads only.
    fn reviewing(&self) -> Arc<dyn Host> {
        Arc::new(Reviewing(self.host()))
    }
}

/// A request as the host sends it to the guest's export.
fn review<K: Serialize>(request: &AdmissionRequest<K>) -> Review {
    let encode = |object: &Option<K>| {
        object
            .as_ref()
            .map(|o| serde_json::to_string(o).expect("the request's object encodes as JSON"))
    };
    Review {
        uid: request.uid.clone(),
        kind: WitGvk {
            group: request.kind.group.clone(),
            version: request.kind.version.clone(),
            kind: request.kind.kind.clone(),
        },
        resource: request.resource.clone(),
        sub_resource: request.sub_resource.clone(),
        name: request.name.clone(),
        namespace: request.namespace.clone(),
        operation: match request.operation {
            Operation::Create => ReviewOperation::Create,
            Operation::Update => ReviewOperation::Update,
            Operation::Delete => ReviewOperation::Delete,
            Operation::Connect => ReviewOperation::Connect,
        },
        user_info: ReviewUserInfo {
            username: request.user.username.clone(),
            groups: request.user.groups.clone(),
        },
        object: encode(&request.object),
        old_object: encode(&request.old_object),
        dry_run: request.dry_run,
    }
}

fn typed(verdict: ReviewVerdict) -> Verdict {
    Verdict {
        allowed: verdict.allowed,
        code: verdict.code,
        message: verdict.message,
        reason: verdict.reason,
        warnings: verdict.warnings,
        audit_annotations: verdict.audit_annotations,
    }
}

impl<K: Resource<DynamicType = ()> + Serialize> AdmissionRequest<K> {
    /// A request to create `object` (in its namespace), by user `tester`.
    pub fn create(object: K) -> Self {
        Self::about(Operation::Create, Some(object), None)
    }

    /// A request to change `old` into `new`.
    pub fn update(old: K, new: K) -> Self {
        Self::about(Operation::Update, Some(new), Some(old))
    }

    /// A request to delete `old`.
    pub fn delete(old: K) -> Self {
        Self::about(Operation::Delete, None, Some(old))
    }

    /// The same request, made by `username` in `groups`.
    pub fn by(mut self, username: &str, groups: &[&str]) -> Self {
        self.user.username = username.to_owned();
        self.user.groups = groups.iter().map(|g| (*g).to_owned()).collect();
        self
    }

    /// The same request, as a dry run (`kubectl apply --dry-run=server`).
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    fn about(operation: Operation, object: Option<K>, old_object: Option<K>) -> Self {
        let meta = object.as_ref().or(old_object.as_ref()).map(|o| o.meta());
        AdmissionRequest {
            uid: "00000000-0000-0000-0000-000000000000".to_owned(),
            kind: kube_core::GroupVersionKind::gvk(&K::group(&()), &K::version(&()), &K::kind(&())),
            resource: K::plural(&()).into_owned(),
            sub_resource: None,
            name: meta.and_then(|m| m.name.clone()),
            namespace: meta.and_then(|m| m.namespace.clone()),
            operation,
            user: crate::admission::UserInfo {
                username: "tester".to_owned(),
                groups: vec!["system:authenticated".to_owned()],
            },
            object,
            old_object,
            dry_run: false,
        }
    }
}

/// A host during a review: reads pass, writes are refused as krec's host refuses them.
struct Reviewing(Arc<dyn Host>);

fn refused<T>() -> Result<T> {
    Err(Error::Forbidden(
        "may not write while answering an admission review (webhooks read only)".into(),
    ))
}

impl Host for Reviewing {
    fn get(
        &self,
        gvk: &kube_core::GroupVersionKind,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<String> {
        self.0.get(gvk, namespace, name)
    }

    fn list(&self, gvk: &kube_core::GroupVersionKind, params: &ListParams) -> Result<Vec<String>> {
        self.0.list(gvk, params)
    }

    fn create(&self, _: &str) -> Result<String> {
        refused()
    }

    fn update(&self, _: &str, _: bool) -> Result<String> {
        refused()
    }

    fn patch(
        &self,
        _: &kube_core::GroupVersionKind,
        _: Option<&str>,
        _: &str,
        _: PatchType,
        _: &str,
        _: bool,
    ) -> Result<String> {
        refused()
    }

    fn delete(
        &self,
        _: &kube_core::GroupVersionKind,
        _: Option<&str>,
        _: &str,
        _: Option<&Preconditions>,
    ) -> Result<()> {
        refused()
    }

    fn record_event(&self, _: &ObjectReference, _: EventType, _: &str, _: &str) -> Result<()> {
        refused()
    }

    fn log(&self, level: Level, message: &str) {
        self.0.log(level, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Context;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};

    /// Denies a ConfigMap with a `password`, and one whose name another ConfigMap's `owner`
    /// entry names (a read), and tries to write while reviewing.
    #[derive(Default)]
    struct Judge;

    impl Validator for Judge {
        type Object = ConfigMap;

        fn validate(&self, req: &AdmissionRequest<ConfigMap>, ctx: &Context) -> Verdict {
            let Some(map) = &req.object else {
                return Verdict::allow().with_warning(format!("{} deleted it", req.user.username));
            };
            if map
                .data
                .as_ref()
                .is_some_and(|d| d.contains_key("password"))
            {
                return Verdict::invalid("data.password: use a Secret");
            }
            if map.data.as_ref().is_some_and(|d| d.contains_key("write")) {
                let written = ctx.create(&ConfigMap::default());
                return Verdict::deny(format!("{written:?}"));
            }
            let taken = ctx
                .get_opt::<ConfigMap>(Some("default"), "owners")
                .ok()
                .flatten()
                .and_then(|o| o.data)
                .is_some_and(|d| d.values().any(|v| Some(v) == map.metadata.name.as_ref()));
            if taken && !req.dry_run {
                Verdict::deny("taken")
            } else {
                Verdict::allow()
            }
        }
    }

    fn map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
        let mut map = ConfigMap::default();
        map.metadata.name = Some(name.into());
        map.metadata.namespace = Some("default".into());
        map.data = Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        map
    }

    #[test]
    fn a_validator_should_judge_typed_requests_with_the_clusters_reads_and_no_writes() {
        let cluster = FakeCluster::new().with(&map("owners", &[("a", "mine")]));
        let verdict = cluster.validate(
            &Judge,
            &AdmissionRequest::create(map("x", &[("password", "p")])),
        );
        assert!(!verdict.allowed);
        assert_eq!(verdict.code, Some(422));
        assert_eq!(
            verdict.message.as_deref(),
            Some("data.password: use a Secret")
        );
        // A read of the cluster decides.
        let request = AdmissionRequest::create(map("mine", &[]));
        assert_eq!(request.name.as_deref(), Some("mine"));
        assert_eq!(request.namespace.as_deref(), Some("default"));
        assert_eq!(request.resource, "configmaps");
        assert!(!cluster.validate(&Judge, &request).allowed);
        assert!(cluster.validate(&Judge, &request.dry_run()).allowed);
        // Updates and deletes, by a given user.
        let update = AdmissionRequest::update(map("y", &[]), map("y", &[("k", "v")]));
        assert!(update.old_object.is_some() && update.operation == Operation::Update);
        assert!(cluster.validate(&Judge, &update).allowed);
        let delete = AdmissionRequest::delete(map("y", &[])).by("alice", &["team-a"]);
        let verdict = cluster.validate(&Judge, &delete);
        assert_eq!(verdict.warnings, ["alice deleted it"]);
        // Writes are refused, as in the host.
        let verdict = cluster.validate(
            &Judge,
            &AdmissionRequest::create(map("w", &[("write", "")])),
        );
        assert!(
            verdict
                .message
                .as_deref()
                .is_some_and(|m| m.contains("Forbidden")
                    && m.contains("may not write while answering an admission review")),
            "{verdict:?}"
        );
        assert!(cluster.writes().is_empty());
    }

    /// Labels every Pod `defaulted=yes`.
    #[derive(Default)]
    struct Labeler;

    impl Mutator for Labeler {
        type Object = Pod;

        fn mutate(&self, _: &AdmissionRequest<Pod>, pod: &mut Pod, _: &Context) -> Verdict {
            pod.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert("defaulted".into(), "yes".into());
            Verdict::allow()
        }
    }

    #[test]
    fn a_mutator_should_return_the_object_it_leaves_and_the_patch() {
        let cluster = FakeCluster::new();
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("default".into());
        let mutated = cluster.mutate(&Labeler, &AdmissionRequest::create(pod.clone()));
        assert!(mutated.verdict.allowed);
        let labels = mutated
            .object
            .expect("object")
            .metadata
            .labels
            .expect("labels");
        assert_eq!(labels["defaulted"], "yes");
        assert_eq!(
            mutated.patch,
            [
                serde_json::json!({"op": "add", "path": "/metadata/labels", "value": {"defaulted": "yes"}})
            ]
        );
        // Nothing to change: no patch; a delete: no object.
        let again = cluster.mutate(
            &Labeler,
            &AdmissionRequest::create(
                cluster
                    .mutate(&Labeler, &AdmissionRequest::create(pod.clone()))
                    .object
                    .expect("pod"),
            ),
        );
        assert!(again.patch.is_empty());
        let deleted = cluster.mutate(&Labeler, &AdmissionRequest::delete(pod));
        assert!(deleted.verdict.allowed && deleted.object.is_none());
    }
}
