//! Support for the `export!` macro; not part of the public API.
pub use wit_bindgen;

use std::cell::OnceCell;
use std::thread::LocalKey;

use crate::bindings::krec::reconciler::types as wit;
use crate::context::Context;
use crate::reconciler::{Action, FromConfig, Reconciler, Request};

/// Where an instance keeps one of its parts (reconciler, validator, mutator, converter), built
/// once by `init` (or, for a host older than WIT 0.1.2 that never calls `init`, at the first
/// call, without configuration).
pub type Slot<P> = LocalKey<OnceCell<P>>;

/// Build `R` from the manifest's `spec.config` (JSON text): a message naming the field
/// when it does not deserialize, or `from_config`'s refusal.
pub fn build<R: FromConfig>(config: &str) -> Result<R, String> {
    let mut decoder = serde_json::Deserializer::from_str(config);
    let settings: R::Config = serde_path_to_error::deserialize(&mut decoder).map_err(|err| {
        let path = err.path().to_string();
        // The position is in the host's JSON rendering of the YAML, which nobody sees.
        let inner = err.into_inner().to_string();
        let inner = match inner.rfind(" at line ") {
            Some(at) => &inner[..at],
            None => &inner,
        };
        if path == "." {
            format!("spec.config: {inner}")
        } else {
            format!("spec.config.{path}: {inner}")
        }
    })?;
    R::from_config(settings).map_err(|err| format!("spec.config: {err}"))
}

/// The configuration part `P` of a guest is built from: the guest's, unless `P` takes none
/// while another part does (`any_takes`) — then none.
fn config_for<P: FromConfig>(config: &str, any_takes: bool) -> &str {
    if P::TAKES_CONFIG || !any_takes {
        config
    } else {
        "null"
    }
}

/// Build part `P` into `slot` from `config` (a second `init` of one instance keeps the first).
fn build_into<P: FromConfig + 'static>(
    slot: &'static Slot<P>,
    config: &str,
    any_takes: bool,
) -> Result<(), String> {
    let part = build::<P>(config_for::<P>(config, any_takes))?;
    slot.with(|cell| {
        let _ = cell.set(part);
    });
    Ok(())
}

/// The `init` export: build the instance's parts — reconciler, validator, mutator, converter —
/// from its configuration.
pub fn init<R, V, M, C>(
    slots: (
        &'static Slot<R>,
        &'static Slot<V>,
        &'static Slot<M>,
        &'static Slot<C>,
    ),
    config: String,
) -> Result<(), String>
where
    R: FromConfig + 'static,
    V: FromConfig + 'static,
    M: FromConfig + 'static,
    C: FromConfig + 'static,
{
    let any = R::TAKES_CONFIG || V::TAKES_CONFIG || M::TAKES_CONFIG || C::TAKES_CONFIG;
    build_into(slots.0, &config, any)?;
    build_into(slots.1, &config, any)?;
    build_into(slots.2, &config, any)?;
    build_into(slots.3, &config, any)
}

/// Run `call` on the instance's part `P`, built without configuration if `init` never ran (a
/// host older than WIT 0.1.2); a part that cannot be built is `unbuilt`'s error.
fn with_part<P: FromConfig + 'static, T, E>(
    slot: &'static Slot<P>,
    unbuilt: impl FnOnce(String) -> E,
    call: impl FnOnce(&P) -> Result<T, E>,
) -> Result<T, E> {
    slot.with(|cell| {
        if cell.get().is_none() {
            let built = build::<P>("null").map_err(unbuilt)?;
            let _ = cell.set(built);
        }
        match cell.get() {
            Some(part) => call(part),
            None => unreachable!("set just above"),
        }
    })
}

/// [`with_part`] for the reconciler's exports, whose errors are WIT errors.
fn with_reconciler<R: Reconciler + FromConfig + 'static, T>(
    slot: &'static Slot<R>,
    call: impl FnOnce(&R) -> Result<T, wit::Error>,
) -> Result<T, wit::Error> {
    with_part(slot, wit::Error::Invalid, call)
}

/// Run one reconcile of `R` for a request from the host.
pub fn reconcile<R: Reconciler + FromConfig + 'static>(
    slot: &'static Slot<R>,
    req: wit::Request,
) -> Result<wit::Action, wit::Error> {
    let req = Request {
        namespace: req.namespace,
        name: req.name,
    };
    with_reconciler(slot, |r| match r.reconcile(req, &Context::new()) {
        Ok(action) => Ok(action.into()),
        Err(err) => Err(err.into()),
    })
}

/// The `map` export: `R::map` of one object of a watched kind.
pub fn map<R: Reconciler + FromConfig + 'static>(
    slot: &'static Slot<R>,
    kind: wit::Gvk,
    object: String,
) -> Result<Vec<wit::Request>, wit::Error> {
    let gvk = kube_core::GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
    let object: kube_core::DynamicObject = serde_json::from_str(&object).map_err(|err| {
        wit::Error::Invalid(format!("the {} to map does not decode: {err}", kind.kind))
    })?;
    with_reconciler(slot, |r| {
        Ok(r.map_in(&gvk, &object, &Context::new())
            .into_iter()
            .map(|req| wit::Request {
                namespace: req.namespace,
                name: req.name,
            })
            .collect())
    })
}

use crate::admission::{
    AdmissionRequest, Converter, Mutator, Operation, UserInfo, Validator, Verdict,
};
use crate::bindings::krec::reconciler::admission_types as review;

/// Stands for the parts of a guest it does not implement: each says so when called.
#[derive(Default)]
pub struct Unimplemented;

impl Reconciler for Unimplemented {
    fn reconcile(&self, _: Request, _: &Context) -> crate::error::Result<Action> {
        Err(crate::error::Error::Other(
            "this guest exports no reconciler (export!(reconciler: …))".into(),
        ))
    }
}

// A webhook a guest does not implement traps: the host answers HTTP 500 and the API
// server applies the webhook's `failurePolicy`, as for any webhook that cannot answer.
impl Validator for Unimplemented {
    type Object = serde_json::Value;
    fn validate(&self, _: &AdmissionRequest<Self::Object>, _: &Context) -> Verdict {
        panic!("this guest exports no validator (export!(validator: …))")
    }
}

impl Mutator for Unimplemented {
    type Object = serde_json::Value;
    fn mutate(
        &self,
        _: &AdmissionRequest<Self::Object>,
        _: &mut Self::Object,
        _: &Context,
    ) -> Verdict {
        panic!("this guest exports no mutator (export!(mutator: …))")
    }
}

impl Converter for Unimplemented {
    fn convert(&self, _: serde_json::Value, _: &str) -> Result<serde_json::Value, String> {
        Err("this guest exports no converter (export!(converter: …))".into())
    }
}

/// The request decoded as `K` (its strings moved, not copied), and the request's object as
/// text; a message when an object does not decode.
fn request<K: crate::lazy::FromJson>(
    mut req: review::AdmissionRequest,
    keep_object: bool,
) -> Result<(AdmissionRequest<K>, Option<String>), String> {
    let decode = |which: &str, text: Option<String>| -> Result<Option<K>, String> {
        text.map(K::from_json_text)
            .transpose()
            .map_err(|e| format!("the request's {which} does not decode: {e}"))
    };
    // The request's object text is kept (a copy) only for a mutation, which is diffed against
    // it; otherwise each text is moved into its object.
    let text = if keep_object {
        req.object.clone()
    } else {
        None
    };
    let object = decode("object", req.object.take())?;
    let old_object = decode("oldObject", req.old_object.take())?;
    let typed = AdmissionRequest {
        uid: req.uid,
        kind: kube_core::GroupVersionKind {
            group: req.kind.group,
            version: req.kind.version,
            kind: req.kind.kind,
        },
        resource: req.resource,
        sub_resource: req.sub_resource,
        name: req.name,
        namespace: req.namespace,
        operation: match req.operation {
            review::Operation::Create => Operation::Create,
            review::Operation::Update => Operation::Update,
            review::Operation::Delete => Operation::Delete,
            review::Operation::Connect => Operation::Connect,
        },
        user: UserInfo {
            username: req.user_info.username,
            groups: req.user_info.groups,
        },
        object,
        old_object,
        dry_run: req.dry_run,
    };
    Ok((typed, text))
}

fn answer(verdict: Verdict, patched: Option<String>) -> review::Verdict {
    review::Verdict {
        allowed: verdict.allowed,
        code: verdict.code,
        message: verdict.message,
        reason: verdict.reason,
        warnings: verdict.warnings,
        audit_annotations: verdict.audit_annotations,
        patched,
    }
}

fn undecodable(message: String) -> review::Verdict {
    answer(
        Verdict::deny(message)
            .with_code(400)
            .with_reason("BadRequest"),
        None,
    )
}

/// Run the instance's validator (built as [`init`] says) for a review from the host; a
/// validator that cannot be built traps, so the webhook's `failurePolicy` decides.
pub fn validate<V: Validator + FromConfig + 'static>(
    slot: &'static Slot<V>,
    req: review::AdmissionRequest,
) -> review::Verdict {
    with_part(slot, |err| err, |v| Ok(validate_with(v, req)))
        .unwrap_or_else(|err| panic!("the validator cannot be built: {err}"))
}

/// Run `validator` for a review.
pub fn validate_with<V: Validator>(
    validator: &V,
    req: review::AdmissionRequest,
) -> review::Verdict {
    match request::<V::Object>(req, false) {
        Ok((typed, _)) => answer(validator.validate(&typed, &Context::new()), None),
        Err(message) => undecodable(message),
    }
}

/// Run the instance's mutator for a review from the host (see [`mutate_with`]).
pub fn mutate<M: Mutator + FromConfig + 'static>(
    slot: &'static Slot<M>,
    req: review::AdmissionRequest,
) -> review::Verdict {
    with_part(slot, |err| err, |m| Ok(mutate_with(m, req)))
        .unwrap_or_else(|err| panic!("the mutator cannot be built: {err}"))
}

/// Run `mutator` for a review: the object it leaves, as the request's object with the changes
/// `mutate` made to its typed form (so fields the type does not know survive).
pub fn mutate_with<M: Mutator>(mutator: &M, req: review::AdmissionRequest) -> review::Verdict {
    let (typed, text) = match request::<M::Object>(req, true) {
        Ok(request) => request,
        Err(message) => return undecodable(message),
    };
    let Some(mut object) = typed.object.clone() else {
        // A delete: nothing to change.
        return answer(Verdict::allow(), None);
    };
    let before = serde_json::to_value(&object);
    let verdict = mutator.mutate(&typed, &mut object, &Context::new());
    let after = serde_json::to_value(&object);
    let (Ok(before), Ok(after)) = (before, after) else {
        panic!("the mutated object does not encode as JSON");
    };
    if before == after {
        return answer(verdict, None);
    }
    let changes = json_patch::diff(&before, &after);
    let mut original: serde_json::Value = text
        .as_deref()
        .and_then(|o| serde_json::from_str(o).ok())
        .unwrap_or(serde_json::Value::Null);
    // The request's object and its typed form differ where the change is: sending the
    // typed form whole would drop what the type does not know, so the review traps (and
    // the webhook's `failurePolicy` decides).
    if let Err(err) = json_patch::patch(&mut original, &changes) {
        panic!("the mutation cannot be applied to the request's object: {err}");
    }
    let patched = original;
    answer(verdict, Some(patched.to_string()))
}

/// Run the instance's converter on each object for a conversion review from the host.
pub fn convert<C: Converter + FromConfig + 'static>(
    slot: &'static Slot<C>,
    objects: Vec<String>,
    desired: String,
) -> Result<Vec<String>, String> {
    with_part(
        slot,
        |err| err,
        |c| {
            objects
                .iter()
                .map(|text| {
                    let object = serde_json::from_str(text)
                        .map_err(|e| format!("an object does not decode: {e}"))?;
                    c.convert(object, &desired)
                        .map(|converted| converted.to_string())
                })
                .collect()
        },
    )
}

impl From<Action> for wit::Action {
    fn from(action: Action) -> Self {
        match action {
            Action::Done => wit::Action::Done,
            Action::Requeue => wit::Action::Requeue,
            Action::RequeueAfter(after) => {
                wit::Action::RequeueAfter(u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
            }
        }
    }
}
