//! Admission webhooks, called as kube-apiserver calls them: the `MutatingWebhookConfiguration`s
//! and `ValidatingWebhookConfiguration`s in the store say which webhooks see which requests;
//! a write runs mutating webhooks (in configuration-name order, reinvoking `IfNeeded` ones once
//! when a later webhook changed the object), then the server's own defaulting and validation,
//! then validating webhooks (concurrently), then is stored — for creates, updates, patches
//! (server-side apply included), status writes and deletes, dry-run requests too
//! (`dryRun: true` in the review), whether they come from a client or from the built-in
//! controllers (a Pod a ReplicaSet creates is admitted like one `kubectl` creates).
//!
//! The store keeps one lock and webhooks are slow, so an admitted write is optimistic, as
//! kube-apiserver's `GuaranteedUpdate`: the write is first run dry (defaults, validation,
//! `managedFields`), webhooks see that result, and it is stored only if the object did not
//! change meanwhile (a patch is then computed and admitted again, up to five times).

mod call;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::authorization::escalation;
use crate::resources::ResourceType;
use crate::store::{DeleteOptions, Propagation, Store, WriteOptions};
use krec_core::error::ApiError;
use krec_core::json::Pointer;
use krec_core::selector::{FieldSelector, LabelSelector, object_labels};

use crate::admissionregistration;

mod policy;

pub use crate::admissionregistration::{Hook, HookKind, Operation};

/// Times an admitted patch is computed again when the object changed while webhooks ran.
const MAX_ATTEMPTS: u32 = 5;

pub use crate::authentication::UserInfo;

/// A write that went through admission: what was stored (or would be, for a dry run) and the
/// webhooks' warnings, for the response's `Warning` headers.
#[derive(Debug)]
pub struct Admitted {
    /// The object as stored (a delete: as deleted or marked for deletion).
    pub object: Arc<Value>,
    /// `response.warnings` of every webhook that answered, and the policies' `Warn`s.
    pub warnings: Vec<String>,
    /// Annotations for the request's audit event (admission policies').
    pub annotations: Vec<(String, String)>,
}

impl Admitted {
    fn plain(object: Arc<Value>) -> Self {
        Admitted {
            object,
            warnings: Vec::new(),
            annotations: Vec::new(),
        }
    }
}

/// What admission made of a request it let through: its warnings and audit annotations.
#[derive(Debug, Default)]
struct Verdict {
    warnings: Vec<String>,
    annotations: Vec<(String, String)>,
}

/// The webhooks a request meets: mutating then validating, each in order; and whether
/// admission policies are bound (they are matched when they run).
#[derive(Default)]
struct Matched {
    mutating: Vec<Hook>,
    validating: Vec<Hook>,
    policies: bool,
}

impl Matched {
    fn is_empty(&self) -> bool {
        self.mutating.is_empty() && self.validating.is_empty() && !self.policies
    }
}

/// What a request is, beyond its objects: for reviews and error messages.
struct Attributes<'a> {
    rt: &'a ResourceType,
    subresource: &'a str,
    operation: Operation,
    namespace: Option<&'a str>,
    name: &'a str,
    dry_run: bool,
    user: &'a UserInfo,
    /// `CreateOptions`, `UpdateOptions`, `PatchOptions` or `DeleteOptions`.
    options: Value,
}

/// The admission chain of one embedded API server.
pub struct Admission {
    store: Arc<Store>,
    policies: policy::Policies,
    mutating: Option<ResourceType>,
    validating: Option<ResourceType>,
    namespaces: Option<ResourceType>,
    services: Option<ResourceType>,
}

impl Admission {
    /// Admission for the writes to `store`, configured by the webhook configurations in it.
    pub fn new(store: Arc<Store>) -> Self {
        let registry = store.registry().clone();
        let group = "admissionregistration.k8s.io";
        Admission {
            mutating: registry.by_kind(group, "v1", "MutatingWebhookConfiguration"),
            validating: registry.by_kind(group, "v1", "ValidatingWebhookConfiguration"),
            namespaces: registry.by_kind("", "v1", "Namespace"),
            services: registry.by_kind("", "v1", "Service"),
            policies: policy::Policies::new(&store),
            store,
        }
    }

    /// The store writes go to.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Whether any webhook configuration or admission policy binding exists (else every write
    /// goes straight to the store).
    pub fn configured(&self) -> bool {
        [&self.mutating, &self.validating]
            .into_iter()
            .flatten()
            .any(|rt| self.store.has_any(rt))
            || self.policies.configured(&self.store)
    }

    /// The webhooks that see a request.
    fn matching(
        &self,
        request: &admissionregistration::Request<'_>,
        namespace: Option<&str>,
    ) -> Matched {
        // Webhook configurations are never subject to webhooks (a broken webhook could
        // otherwise never be removed).
        if request.group == "admissionregistration.k8s.io" {
            return Matched::default();
        }
        let mut matched = Matched {
            policies: self.policies.configured(&self.store),
            ..Matched::default()
        };
        let mut namespace_labels: Option<BTreeMap<String, String>> = None;
        for (kind, rt) in [
            (HookKind::Mutating, &self.mutating),
            (HookKind::Validating, &self.validating),
        ] {
            let Some(rt) = rt else { continue };
            // Key order is name order: kube-apiserver sorts configurations by name.
            for configuration in self.store.objects(rt, None) {
                for mut hook in Hook::from_configuration(kind, &configuration) {
                    if !hook.matches(request) {
                        continue;
                    }
                    self.resolve_service(&mut hook.client);
                    if hook.has_namespace_selector() {
                        let labels = namespace_labels
                            .get_or_insert_with(|| self.namespace_labels(request, namespace));
                        // A request without a namespace other than of a Namespace always
                        // matches (kube-apiserver's `MatchNamespaceSelector`): a cluster-scoped
                        // object, or a collection request across all namespaces.
                        let scoped = (request.namespaced && namespace.is_some())
                            || (request.group.is_empty() && request.resource == "namespaces");
                        if scoped && !hook.selects_namespace(labels) {
                            continue;
                        }
                    }
                    match kind {
                        HookKind::Mutating => matched.mutating.push(hook),
                        HookKind::Validating => matched.validating.push(hook),
                    }
                }
            }
        }
        matched
    }

    /// The labels a namespace selector is matched against: a Namespace's own (new or old), else
    /// those of the object's namespace.
    /// Look up the Service a webhook is reached through, as kube-apiserver's service resolver
    /// does before dialing it.
    fn resolve_service(&self, client: &mut crate::webhook::ClientConfig) {
        use crate::webhook::{Endpoint, ServiceAddress};
        let (
            Endpoint::Service {
                namespace, name, ..
            },
            Some(rt),
        ) = (&client.endpoint, &self.services)
        else {
            return;
        };
        client.service = match self.store.get(rt, Some(namespace), name).ok() {
            Some(service) => match service["spec"]["clusterIP"].as_str() {
                Some(ip) if !ip.is_empty() && ip != "None" => {
                    ServiceAddress::ClusterIp(ip.to_owned())
                }
                _ => ServiceAddress::Unresolved,
            },
            None => ServiceAddress::Missing,
        };
    }

    fn namespace_labels(
        &self,
        request: &admissionregistration::Request<'_>,
        namespace: Option<&str>,
    ) -> BTreeMap<String, String> {
        if request.group.is_empty() && request.resource == "namespaces" {
            return request
                .object
                .or(request.old_object)
                .map(object_labels)
                .unwrap_or_default();
        }
        match (namespace, &self.namespaces) {
            (Some(ns), Some(rt)) => self
                .store
                .get(rt, None, ns)
                .map(|n| object_labels(&n))
                .unwrap_or_default(),
            _ => BTreeMap::new(),
        }
    }

    /// Create `object` in `namespace`, through the webhooks.
    pub async fn create(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        mut object: Value,
        options: WriteOptions,
        user: &UserInfo,
    ) -> Result<Admitted, ApiError> {
        escalation::check(&self.store, user, rt, namespace, &object, None)?;
        if !self.configured() {
            return self
                .store
                .create(rt, namespace, object, options)
                .map(Admitted::plain);
        }
        let name = object
            .at("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let namespace = namespace
            .or_else(|| object.at("/metadata/namespace").and_then(Value::as_str))
            .map(str::to_owned);
        let attributes = Attributes {
            rt,
            subresource: "",
            operation: Operation::Create,
            namespace: namespace.as_deref(),
            name: &name,
            dry_run: options.dry_run,
            user,
            options: write_options("CreateOptions", &options),
        };
        let hooks = self.matching(
            &match_request(&attributes, Some(&object), None),
            namespace.as_deref(),
        );
        if hooks.is_empty() {
            return self
                .store
                .create(rt, namespace.as_deref(), object, options)
                .map(Admitted::plain);
        }
        // Mutating webhooks see the decoded, defaulted body (no generated name or uid yet).
        Store::default_new(rt, &mut object);
        let dry = WriteOptions {
            dry_run: true,
            ..options.clone()
        };
        let (candidate, verdict) = self
            .admit(&attributes, &hooks, object, None, true, |mutated| {
                self.store
                    .create(rt, namespace.as_deref(), mutated, dry.clone())
                    .map(|o| (*o).clone())
            })
            .await?;
        if options.dry_run {
            return Ok(Admitted {
                object: Arc::new(candidate),
                warnings: verdict.warnings,
                annotations: verdict.annotations,
            });
        }
        let stored = self.store.create(
            rt,
            namespace.as_deref(),
            candidate,
            WriteOptions {
                prepared: true,
                ..options
            },
        )?;
        Ok(Admitted {
            object: stored,
            warnings: verdict.warnings,
            annotations: verdict.annotations,
        })
    }

    /// Replace an object (`status`: through the status subresource), through the webhooks.
    #[allow(clippy::too_many_arguments)]
    pub async fn update(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        object: Value,
        status: bool,
        options: WriteOptions,
        user: &UserInfo,
    ) -> Result<Admitted, ApiError> {
        if rt.group == escalation::GROUP {
            let old = self.store.get(rt, namespace, name).ok();
            escalation::check(&self.store, user, rt, namespace, &object, old.as_deref())?;
        }
        let given_rv = object
            .at("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|rv| !rv.is_empty());
        // Without webhooks, or where the store refuses the body outright (a custom resource
        // needs its resourceVersion), the store answers as it does.
        if !self.configured() || (!given_rv && rt.schema.is_some()) {
            return self
                .store
                .update(rt, namespace, name, object, status, options)
                .map(Admitted::plain);
        }
        let plural = rt.plural.clone();
        // An update that names no resourceVersion means "whatever is current": recomputed when
        // the object changes while the webhooks run, as kube-apiserver's GuaranteedUpdate does.
        self.patch_like(
            rt,
            namespace,
            name,
            status,
            options,
            user,
            "UpdateOptions",
            !given_rv,
            |current| match current {
                Some(_) => Ok(Some(object.clone())),
                None => Err(ApiError::not_found(&rt.group, &plural, name)),
            },
        )
        .await
    }

    /// Patch an object: `apply` computes the patched object from the current one (`None` when
    /// it does not exist, for server-side apply's create), through the webhooks.
    #[allow(clippy::too_many_arguments)]
    pub async fn patch<F>(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        status: bool,
        options: WriteOptions,
        user: &UserInfo,
        apply: F,
    ) -> Result<Admitted, ApiError>
    where
        F: FnMut(Option<&Value>) -> Result<Option<Value>, ApiError> + Send,
    {
        let store = &self.store;
        let mut apply = apply;
        let apply = |current: Option<&Value>| {
            let new = apply(current)?;
            if let Some(new) = &new {
                escalation::check(store, user, rt, namespace, new, current)?;
            }
            Ok(new)
        };
        if !self.configured() {
            return self
                .store
                .patch(rt, namespace, name, status, options, apply)
                .map(Admitted::plain);
        }
        self.patch_like(
            rt,
            namespace,
            name,
            status,
            options,
            user,
            "PatchOptions",
            true,
            apply,
        )
        .await
    }

    /// An update or a patch through the webhooks: run dry, admit the result, store it if the
    /// object is still the one it was computed from.
    #[allow(clippy::too_many_arguments)]
    async fn patch_like<F>(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        status: bool,
        options: WriteOptions,
        user: &UserInfo,
        options_kind: &str,
        retriable: bool,
        mut apply: F,
    ) -> Result<Admitted, ApiError>
    where
        F: FnMut(Option<&Value>) -> Result<Option<Value>, ApiError> + Send,
    {
        let dry = WriteOptions {
            dry_run: true,
            ..options.clone()
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let old = self.store.get(rt, namespace, name).ok();
            let candidate =
                self.store
                    .patch(rt, namespace, name, status, dry.clone(), &mut apply)?;
            let candidate = (*candidate).clone();
            let operation = if old.is_some() {
                Operation::Update
            } else {
                Operation::Create
            };
            let attributes = Attributes {
                rt,
                subresource: if status { "status" } else { "" },
                operation,
                namespace,
                name,
                dry_run: options.dry_run,
                user,
                options: write_options(options_kind, &options),
            };
            let hooks = self.matching(
                &match_request(&attributes, Some(&candidate), old.as_deref()),
                namespace,
            );
            let old_rv = old
                .as_deref()
                .and_then(|o| o.at("/metadata/resourceVersion"))
                .cloned();
            let (admitted, verdict) = if hooks.is_empty() {
                (candidate, Verdict::default())
            } else {
                self.admit(
                    &attributes,
                    &hooks,
                    candidate,
                    old.as_deref(),
                    false,
                    |mut mutated| match &old_rv {
                        Some(rv) => {
                            mutated["metadata"]["resourceVersion"] = rv.clone();
                            self.store
                                .update(rt, namespace, name, mutated, status, dry.clone())
                                .map(|o| (*o).clone())
                        }
                        None => self
                            .store
                            .create(rt, namespace, mutated, prepared(&dry))
                            .map(|o| (*o).clone()),
                    },
                )
                .await?
            };
            if options.dry_run {
                return Ok(Admitted {
                    object: Arc::new(admitted),
                    warnings: verdict.warnings,
                    annotations: verdict.annotations,
                });
            }
            let stored = match &old_rv {
                Some(rv) => {
                    let mut admitted = admitted;
                    admitted["metadata"]["resourceVersion"] = rv.clone();
                    self.store
                        .update(rt, namespace, name, admitted, status, options.clone())
                }
                None => self
                    .store
                    .create(rt, namespace, admitted, prepared(&options)),
            };
            match stored {
                // The object changed (or appeared) while the webhooks ran: compute it again.
                Err(err) if err.code == 409 && retriable && attempt < MAX_ATTEMPTS => continue,
                Err(err) => return Err(err),
                Ok(object) => {
                    return Ok(Admitted {
                        object,
                        warnings: verdict.warnings,
                        annotations: verdict.annotations,
                    });
                }
            }
        }
    }

    /// Delete an object, through the webhooks (they see it as `oldObject`).
    pub async fn delete(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
        user: &UserInfo,
    ) -> Result<Admitted, ApiError> {
        if !self.configured() {
            return self
                .store
                .delete(rt, namespace, name, options)
                .map(Admitted::plain);
        }
        let old = self.store.get(rt, namespace, name)?;
        let verdict = self
            .admit_delete(rt, namespace, name, options, user, &old)
            .await?;
        let object = self.store.delete(rt, namespace, name, options)?;
        Ok(Admitted {
            object,
            warnings: verdict.warnings,
            annotations: verdict.annotations,
        })
    }

    /// Delete the objects of `rt` in `namespace` (`None`: all) that the selectors match, each
    /// through the webhooks as kube-apiserver's `DeleteCollection` does: every item is admitted
    /// as a delete (with the item as `oldObject`, the request's namespace and no name) and then
    /// deleted with `options`; the first refusal ends the request with its error, the items
    /// deleted before it staying deleted. The deleted (or, held by finalizers, marked) objects
    /// and the webhooks' warnings.
    ///
    /// # Errors
    ///
    /// A bad selector's, a webhook's refusal, or a failed delete's.
    pub async fn delete_collection(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        selectors: (&LabelSelector, &FieldSelector),
        options: &DeleteOptions,
        user: &UserInfo,
    ) -> Result<(Vec<Arc<Value>>, Vec<String>), ApiError> {
        let (labels, fields) = selectors;
        let page = self.store.list(rt, namespace, labels, fields, None, None)?;
        let mut deleted = Vec::with_capacity(page.items.len());
        let mut warnings = Vec::new();
        for item in page.items {
            if self.configured() {
                warnings.extend(
                    self.admit_delete(rt, namespace, "", options, user, &item)
                        .await?
                        .warnings,
                );
            }
            let name = item
                .at("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let item_namespace = item.at("/metadata/namespace").and_then(Value::as_str);
            match self.store.delete(rt, item_namespace, name, options) {
                Ok(object) => deleted.push(object),
                // Gone meanwhile (a garbage collector, a finished Pod): nothing to delete.
                Err(err) if err.code == 404 => {}
                Err(err) => return Err(err),
            }
        }
        Ok((deleted, warnings))
    }

    /// The webhooks' and policies' verdict on deleting `old` (its `name` as the request names
    /// it).
    async fn admit_delete(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
        user: &UserInfo,
        old: &Value,
    ) -> Result<Verdict, ApiError> {
        let mut delete_options = json!({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions",
        "propagationPolicy": match options.propagation {
            Propagation::Orphan => "Orphan",
            Propagation::Foreground => "Foreground",
            Propagation::Background => "Background",
        }});
        if let Some(grace) = options.grace_period {
            delete_options["gracePeriodSeconds"] = json!(grace);
        }
        if options.dry_run {
            delete_options["dryRun"] = json!(["All"]);
        }
        let attributes = Attributes {
            rt,
            subresource: "",
            operation: Operation::Delete,
            namespace,
            name,
            dry_run: options.dry_run,
            user,
            options: delete_options,
        };
        let hooks = self.matching(&match_request(&attributes, None, Some(old)), namespace);
        let mut outcome = Verdict::default();
        if !hooks.is_empty() {
            // Mutating webhooks are called for deletes too; there is no object to patch.
            for hook in &hooks.mutating {
                let review = review(&attributes, None, Some(old));
                if let Some(verdict) = consult(hook, &review).await? {
                    outcome.warnings.extend(verdict.warnings);
                }
            }
            let policies = off_runtime(|| {
                self.policies
                    .admit(&self.store, &attributes, None, Some(old))
            })?;
            outcome.warnings.extend(policies.warnings);
            outcome.annotations.extend(policies.annotations);
            outcome
                .warnings
                .extend(validate(&attributes, &hooks.validating, None, Some(old)).await?);
        }
        Ok(outcome)
    }

    /// Mutating webhooks on `object`, then `revalidate` (the server's defaulting and
    /// validation, run dry) when they changed it or `always`, then validating webhooks.
    async fn admit(
        &self,
        attributes: &Attributes<'_>,
        hooks: &Matched,
        mut object: Value,
        old: Option<&Value>,
        always: bool,
        revalidate: impl FnOnce(Value) -> Result<Value, ApiError>,
    ) -> Result<(Value, Verdict), ApiError> {
        let mut warnings = Vec::new();
        let initial = object.clone();
        // Mutating admission policies come first, then the mutating webhooks.
        off_runtime(|| {
            self.policies.mutate(
                &self.store,
                attributes,
                &mut object,
                old,
                crate::managed::Schema::of(attributes.rt),
            )
        })?;
        // Each `IfNeeded` webhook with the object as it left it, for reinvocation.
        let mut left: Vec<(&Hook, Value)> = Vec::new();
        for hook in &hooks.mutating {
            // Matched again on the object as earlier webhooks left it (its object selector).
            if !hook.matches(&match_request(attributes, Some(&object), old)) {
                continue;
            }
            mutate(attributes, hook, &mut object, old, &mut warnings).await?;
            if hook.reinvoke {
                left.push((hook, object.clone()));
            }
        }
        // `reinvocationPolicy: IfNeeded`: once more when a later webhook changed the object.
        for (hook, after) in left {
            if after != object {
                mutate(attributes, hook, &mut object, old, &mut warnings).await?;
            }
        }
        let candidate = if always || object != initial {
            revalidate(object)?
        } else {
            object
        };
        // Validating webhooks are matched on the object as it will be stored.
        let validating: Vec<Hook> = if candidate == initial {
            hooks.validating.clone()
        } else {
            self.matching(
                &match_request(attributes, Some(&candidate), old),
                attributes.namespace,
            )
            .validating
        };
        // What mutation made of an RBAC object must not grant more than its writer holds.
        escalation::check(
            &self.store,
            attributes.user,
            attributes.rt,
            attributes.namespace,
            &candidate,
            old,
        )?;
        // Admission policies run between the mutating and the validating webhooks — off the
        // async workers: their expressions may run up to their cost budget.
        let policies = off_runtime(|| {
            self.policies
                .admit(&self.store, attributes, Some(&candidate), old)
        })?;
        warnings.extend(policies.warnings);
        warnings.extend(validate(attributes, &validating, Some(&candidate), old).await?);
        Ok((
            candidate,
            Verdict {
                warnings,
                annotations: policies.annotations,
            },
        ))
    }
}

/// What a request is, for matching webhooks and policies.
fn match_request<'a>(
    attributes: &'a Attributes<'a>,
    object: Option<&'a Value>,
    old_object: Option<&'a Value>,
) -> admissionregistration::Request<'a> {
    admissionregistration::Request {
        operation: attributes.operation,
        group: &attributes.rt.group,
        version: &attributes.rt.version,
        resource: &attributes.rt.plural,
        subresource: attributes.subresource,
        namespaced: attributes.rt.namespaced,
        object,
        old_object,
    }
}

/// A dry-run or real create of an object a dry run prepared (its uid kept).
fn prepared(options: &WriteOptions) -> WriteOptions {
    WriteOptions {
        prepared: true,
        ..options.clone()
    }
}

/// The `options` of a review: `CreateOptions`, `UpdateOptions` or `PatchOptions`.
fn write_options(kind: &str, options: &WriteOptions) -> Value {
    let mut value = json!({"apiVersion": "meta.k8s.io/v1", "kind": kind,
        "fieldManager": options.manager});
    if options.dry_run {
        value["dryRun"] = json!(["All"]);
    }
    if options.applied {
        value["force"] = json!(true);
    }
    value
}

/// The review kube-apiserver sends for a request.
fn review(
    attributes: &Attributes<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
) -> call::Review {
    let rt = attributes.rt;
    let kind = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let resource = json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
    let mut request = json!({
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "operation": attributes.operation.as_str(),
        "userInfo": attributes.user.to_json(),
        // Objects as clients see them (`fieldsV1` as JSON, not the stored text).
        "object": object.map(crate::managed::expanded),
        "oldObject": old.map(crate::managed::expanded),
        "dryRun": attributes.dry_run,
        "options": attributes.options,
    });
    if !attributes.name.is_empty() {
        request["name"] = json!(attributes.name);
    }
    if let Some(ns) = attributes.namespace.filter(|_| rt.namespaced) {
        request["namespace"] = json!(ns);
    }
    if !attributes.subresource.is_empty() {
        request["subResource"] = json!(attributes.subresource);
        request["requestSubResource"] = json!(attributes.subresource);
    }
    call::Review { request }
}

/// Call one webhook; a call that fails is the request's failure (`failurePolicy: Fail`) or is
/// logged and skipped (`Ignore`: `None`); a denial is the request's failure.
async fn consult(hook: &Hook, review: &call::Review) -> Result<Option<call::Verdict>, ApiError> {
    // A dry run may reach only webhooks that say they have no side effects on one, whatever
    // their failure policy (kube's `NewDryRunUnsupportedErr`).
    if review.request["dryRun"] == Value::Bool(true)
        && !matches!(hook.side_effects.as_str(), "None" | "NoneOnDryRun")
    {
        return Err(ApiError::bad_request(format!(
            "admission webhook {:?} does not support dry run",
            hook.name
        )));
    }
    match call::call(hook, review).await {
        Err(err) if hook.fail_closed => Err(ApiError::internal(format!(
            "Internal error occurred: failed calling webhook \"{}\": {err}",
            hook.name
        ))),
        Err(err) => {
            tracing::warn!(
                webhook = %hook.name,
                "failed calling webhook, failing open (failurePolicy: Ignore): {err}"
            );
            Ok(None)
        }
        Ok(verdict) if !verdict.allowed => Err(denied(hook, verdict.status.as_ref())),
        Ok(verdict) => Ok(Some(verdict)),
    }
}

/// One mutating webhook on `object`: its patch applied, its warnings kept.
async fn mutate(
    attributes: &Attributes<'_>,
    hook: &Hook,
    object: &mut Value,
    old: Option<&Value>,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    let review = review(attributes, Some(object), old);
    let Some(verdict) = consult(hook, &review).await? else {
        return Ok(());
    };
    warnings.extend(verdict.warnings);
    if let Some(patch) = verdict.patch {
        // Bounded as a PATCH request's is: a few `copy` operations would otherwise double the
        // object each, whatever the webhook's failurePolicy.
        let mut patched = object.clone();
        crate::patch::apply_json_patch(&mut patched, &patch).map_err(|err| match err {
            crate::patch::JsonPatchError::Invalid(_) => ApiError::internal(format!(
                "Internal error occurred: webhook \"{}\" returned an {err}",
                hook.name
            )),
            _ => ApiError::internal(format!("Internal error occurred: {err}")),
        })?;
        *object = patched;
    }
    Ok(())
}

/// The validating webhooks, called concurrently as kube-apiserver does; the first denial (in
/// their order) fails the request.
async fn validate(
    attributes: &Attributes<'_>,
    hooks: &[Hook],
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<Vec<String>, ApiError> {
    if hooks.is_empty() {
        return Ok(Vec::new());
    }
    let review = review(attributes, object, old);
    let verdicts = futures::future::join_all(hooks.iter().map(|h| consult(h, &review))).await;
    let mut warnings = Vec::new();
    for verdict in verdicts {
        if let Some(verdict) = verdict? {
            warnings.extend(verdict.warnings);
        }
    }
    Ok(warnings)
}

/// A webhook's denial as kube-apiserver's `ToStatusErr` words it: the webhook's code when at
/// least 400 (else 400), its reason kept.
fn denied(hook: &Hook, status: Option<&Value>) -> ApiError {
    let denied_by = format!("admission webhook \"{}\" denied the request", hook.name);
    let field = |key: &str| {
        status
            .and_then(|s| s.get(key))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let message = match (field("message"), field("reason")) {
        (Some(message), _) => format!("{denied_by}: {message}"),
        (None, Some(reason)) => format!("{denied_by}: {reason}"),
        (None, None) => format!("{denied_by} without explanation"),
    };
    let code = status
        .and_then(|s| s.get("code"))
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    ApiError::from_webhook(code, field("reason").unwrap_or(""), message)
}

/// Run CPU-bound `work` (CEL expressions, up to their cost budget) without holding up the
/// runtime's other tasks: in place on a multi-threaded runtime, whose other tasks move to
/// another worker meanwhile; as it is elsewhere.
fn off_runtime<R>(work: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// Run `future` to its end from synchronous code on a Tokio runtime (the built-in
/// controllers' writes): in place on a multi-threaded runtime, else on a thread of its own.
pub fn block_on<F>(future: F) -> Result<F::Output, ApiError>
where
    F: Future + Send,
    F::Output: Send,
{
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            Ok(tokio::task::block_in_place(|| handle.block_on(future)))
        }
        _ => std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map(|runtime| runtime.block_on(future))
                })
                .join()
                .map_err(|_| ApiError::internal("admission panicked"))?
                .map_err(|e| ApiError::internal(format!("admission runtime: {e}")))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dry_run_should_reach_only_webhooks_without_side_effects() {
        let hook = |side_effects: &str| {
            Hook::from_configuration(
                HookKind::Validating,
                &json!({"webhooks": [{"name": "check.example.com",
                    "clientConfig": {"url": "https://127.0.0.1:9/"},
                    "sideEffects": side_effects, "failurePolicy": "Fail",
                    "admissionReviewVersions": ["v1"], "rules": []}]}),
            )
            .remove(0)
        };
        let dry = call::Review {
            request: json!({"dryRun": true}),
        };
        let refused = consult(&hook("Some"), &dry).await.expect_err("refused");
        assert_eq!(refused.code, 400);
        assert_eq!(
            refused.message,
            r#"admission webhook "check.example.com" does not support dry run"#
        );
        // One without side effects is called (and here, unreachable, fails the request).
        let called = consult(&hook("None"), &dry).await.expect_err("unreachable");
        assert!(
            called.message.contains("failed calling webhook"),
            "{}",
            called.message
        );
    }
}
