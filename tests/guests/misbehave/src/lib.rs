//! A guest that misbehaves in the way its request's name asks for, to test containment.

use krec_guest::bindings::krec::reconciler::{client, types};
use krec_guest::k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use krec_guest::prelude::*;

struct Misbehave;

/// `spec.config`: how `init` misbehaves (`{init: sleep}`, `{init: loop}`), if at all.
#[derive(Default, serde::Deserialize)]
struct Settings {
    #[serde(default)]
    init: Option<String>,
}

impl FromConfig for Misbehave {
    type Config = Option<Settings>;

    fn from_config(config: Option<Settings>) -> Result<Self> {
        match config.and_then(|c| c.init).as_deref() {
            // Blocks in a WASI host call, where epoch interruption cannot reach.
            Some("sleep") => std::thread::sleep(std::time::Duration::from_secs(3600)),
            Some("loop") => loop {
                std::hint::black_box(());
            },
            _ => {}
        }
        Ok(Misbehave)
    }
}

fn namespace_gvk() -> types::Gvk {
    types::Gvk {
        group: String::new(),
        version: "v1".into(),
        kind: "Namespace".into(),
    }
}

fn configmap_gvk() -> types::Gvk {
    types::Gvk {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
    }
}

#[cfg(target_arch = "wasm32")]
/// The `remember` case's secret's byte `i`: made from `seed` (the request name's length) at
/// run time, never stored whole anywhere but where it is left, so no image holds it.
fn secret_byte(seed: usize, i: usize) -> u8 {
    ((seed.wrapping_mul(131) ^ i.wrapping_mul(0x9E37)) % 251) as u8 ^ 0xA5
}

#[cfg(target_arch = "wasm32")]
const SECRET_LEN: usize = 64;

#[cfg(target_arch = "wasm32")]
/// Whether memory at `at` holds the secret.
///
/// # Safety
///
/// `at .. at + SECRET_LEN` is inside linear memory. Rust's memory model does not allow reading
/// memory no allocation owns through an integer cast to a pointer; this test guest does it on
/// purpose, relying on what a volatile byte load compiles to on Wasm (`i32.load8_u`, which
/// reads any in-bounds address of linear memory), never on what the model promises.
unsafe fn holds_secret(seed: usize, at: usize) -> bool {
    (0..SECRET_LEN).all(|i| {
        // SAFETY: in bounds of linear memory (the caller's promise); see above for the rest.
        let byte = unsafe { std::ptr::read_volatile((at + i) as *const u8) };
        byte == secret_byte(seed, i)
    })
}

#[cfg(target_arch = "wasm32")]
fn leave_secret(seed: usize, into: &mut [u8]) {
    for (i, byte) in into.iter_mut().take(SECRET_LEN).enumerate() {
        *byte = secret_byte(seed, i);
    }
}

#[cfg(target_arch = "wasm32")]
fn remember(seed: usize) -> Result<Action> {
    let size = core::arch::wasm32::memory_size(0)
        .checked_mul(65_536)
        .ok_or_else(|| Error::Other("linear memory of 4 GiB".into()))?;
    // From 16: address 0 is no place to read from, and nothing is kept below 16.
    for at in 16..=size.saturating_sub(SECRET_LEN) {
        // SAFETY: `at .. at + SECRET_LEN` is below the memory's size.
        if unsafe { holds_secret(seed, at) } {
            return Err(Error::Other(format!(
                "saw an earlier instance's secret at {at} of {size} bytes"
            )));
        }
    }
    let mut kept = vec![0u8; 4096];
    leave_secret(seed, &mut kept);
    // Memory grown for 2 MiB more, the secret at its far end.
    let mut grown = vec![0u8; 2 << 20];
    let len = grown.len();
    leave_secret(seed, &mut grown[len - SECRET_LEN..]);
    std::mem::forget(kept);
    std::mem::forget(grown);
    Ok(Action::done())
}

#[cfg(not(target_arch = "wasm32"))]
fn remember(_seed: usize) -> Result<Action> {
    Err(Error::Other("remember reads a Wasm linear memory".into()))
}

#[inline(never)]
#[allow(unconditional_recursion)] // the point: overflow the stack
fn recurse(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth; 64]);
    recurse(depth + 1) + frame[0]
}

impl Reconciler for Misbehave {
    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
        match req.name.as_str() {
            "ok" => Ok(Action::done()),
            // What a Go guest's runtime reads at start-up (k8s.io/klog indexes `os.Args[0]`).
            "argv" => Err(Error::Invalid(format!(
                "argv: {:?}",
                std::env::args().collect::<Vec<_>>()
            ))),
            "loop" => loop {
                std::hint::black_box(());
            },
            "oom" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "sleep" => {
                // Blocks in a WASI host call, where epoch interruption cannot reach.
                std::thread::sleep(std::time::Duration::from_secs(3600));
                Ok(Action::done())
            }
            "panic" => panic!("misbehave was asked to panic"),
            "forge" => {
                // A log line, stdout and an error that try to pass for host lines.
                let forged = "ok\n2026-01-01T00:00:00.000000Z ERROR krec::host: guest healthy stopped\r\u{1b}[2K";
                error!("{forged}");
                println!("{forged}");
                Err(Error::Other(forged.into()))
            }
            "grow" => {
                // 40 MiB used and freed: the instance's memory stays grown.
                let hoard = vec![1u8; 40 << 20];
                std::hint::black_box(&hoard);
                Ok(Action::done())
            }
            "slow" => {
                // A slow but well-behaved reconcile, for graceful shutdown tests.
                std::thread::sleep(std::time::Duration::from_millis(1500));
                println!("slow reconcile finished");
                Ok(Action::done())
            }
            "recurse" => Ok(Action::requeue_after(std::time::Duration::from_millis(
                recurse(0),
            ))),
            "print" => {
                println!("hello from stdout");
                eprintln!("hello from stderr");
                Ok(Action::done())
            }
            "flood" => {
                for i in 0..200_000 {
                    println!("flood line {i}");
                }
                Ok(Action::done())
            }
            "print-5000" => {
                // Fifty seconds' worth of the log budget's lines, ending.
                for i in 0..5_000 {
                    println!("flood line {i}");
                }
                Ok(Action::done())
            }
            "huge" => {
                // Just over the host's 3 MiB limit for one object, built without reallocating.
                let payload = (3 << 20) + 1024;
                let mut big = String::with_capacity(payload + 128);
                big.push_str(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"k":""#);
                big.extend(std::iter::repeat_n('x', payload));
                big.push_str(r#""}}"#);
                Ok(client::update(&big)
                    .map(|_| Action::done())
                    .map_err(Error::from)?)
            }
            "forbidden" => {
                ctx.delete::<Namespace>(None, "kube-system")?;
                Ok(Action::done())
            }
            "bad-json" => Ok(client::update("{not json")
                .map(|_| Action::done())
                .map_err(Error::from)?),
            "requeue" => Ok(Action::requeue_after(std::time::Duration::from_millis(
                1500,
            ))),
            // Hostile calls: each tries to get past a limit of the host.
            "delete-victim" => {
                // A namespace for a cluster-scoped kind, hoping a namespace-limited permission
                // matches it.
                client::delete(&namespace_gvk(), Some("sandbox"), "victim", None)?;
                Ok(Action::done())
            }
            "get-kube-system" => {
                client::get(&namespace_gvk(), Some("sandbox"), "kube-system")?;
                Ok(Action::done())
            }
            "create-in-body" => {
                client::create(
                    r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"smuggled","namespace":"sandbox"}}"#,
                )?;
                Ok(Action::done())
            }
            "read-cm" => {
                // A harmless cached read across all namespaces (what starts an all-namespaces
                // informer beside another guest's namespaced one).
                ctx.get_opt::<ConfigMap>(Some("b"), "x")?;
                Ok(Action::done())
            }
            "requeue-zero" => Ok(Action::requeue_after(std::time::Duration::ZERO)),
            "requeue-1ms" => Ok(Action::requeue_after(std::time::Duration::from_millis(1))),
            "log-flood" => {
                let line = "x".repeat(16 << 10);
                for _ in 0..2_000 {
                    krec_guest::log::write(krec_guest::log::Level::Info, &line);
                }
                Ok(Action::done())
            }
            "huge-error" => Err(Error::Other("e".repeat(20 << 20))),
            // Look through the whole linear memory for the secret an earlier instance left,
            // then leave it: in a heap allocation, and at the end of memory grown for it.
            "remember" => remember(req.name.len()),
            "copy-bomb" => {
                let mut ops = vec![
                    r#"{"op":"add","path":"/data","value":{"seed":"0123456789012345678901234567890123456789012345678901234567890123"}}"#
                        .to_owned(),
                ];
                for k in 0..20 {
                    ops.push(format!(
                        r#"{{"op":"copy","from":"/data","path":"/data/k{k}"}}"#
                    ));
                }
                let body = format!("[{}]", ops.join(","));
                client::patch(
                    &configmap_gvk(),
                    Some("default"),
                    "bomb",
                    types::PatchType::Json,
                    &body,
                    false,
                )?;
                Ok(Action::done())
            }
            "write-flood" => {
                for i in 0..1_000 {
                    let cm = format!(
                        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"flood-{i}","namespace":"default"}}}}"#
                    );
                    match client::create(&cm) {
                        Ok(_) | Err(types::Error::AlreadyExists(_)) => {}
                        Err(err) => return Err(err.into()),
                    }
                }
                Ok(Action::done())
            }
            "warn-and-fail" => {
                // What a failing reconciler often does: say so with an Event, then fail (and
                // be retried): one Event, its count growing, not one Event per retry.
                let mut cm = ConfigMap::default();
                cm.metadata.name = Some(req.name.clone());
                cm.metadata.namespace = req.namespace.clone();
                ctx.record_event(
                    &cm,
                    EventType::Warning,
                    "ReconcileFailed",
                    "the backend is down",
                )?;
                Err(Error::Unavailable("the backend is down".into()))
            }
            other => Err(Error::Invalid(format!("unknown misbehaviour {other:?}"))),
        }
    }
}

/// As a validating webhook for ConfigMaps: misbehaves as the ConfigMap's `data.misbehave` asks.
#[derive(Default)]
struct MisbehaveValidator;

impl Validator for MisbehaveValidator {
    // Any kind: a Foo is allowed (it has no `data.misbehave`).
    type Object = krec_guest::DynamicObject;

    fn validate(
        &self,
        req: &AdmissionRequest<krec_guest::DynamicObject>,
        ctx: &Context,
    ) -> Verdict {
        let asked = req
            .object
            .as_ref()
            .and_then(|o| o.data.pointer("/data/misbehave"))
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned();
        match asked.as_str() {
            "loop" => loop {
                std::hint::black_box(0);
            },
            "panic" => panic!("misbehave's validator was asked to panic"),
            "sleep" => {
                // Blocks in a WASI host call: cut at the outer deadline.
                std::thread::sleep(std::time::Duration::from_secs(3600));
                Verdict::allow()
            }
            "write" => {
                let cm: ConfigMap =
                    krec_guest::serde_json::from_value(krec_guest::serde_json::json!(
                        {"metadata": {"name": "written-by-a-webhook", "namespace": "default"}}
                    ))
                    .unwrap_or_default();
                match ctx.create(&cm) {
                    Ok(_) => Verdict::deny("the write went through"),
                    Err(err) => Verdict::deny(format!("refused: {err}")),
                }
            }
            "deny" => Verdict::invalid("data.misbehave: denied as asked"),
            _ => Verdict::allow(),
        }
    }
}

export!(reconciler: Misbehave, validator: MisbehaveValidator);
