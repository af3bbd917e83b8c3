//! A guest that misbehaves in the way its request's name asks for, to test containment.

use krec_guest::bindings::krec::reconciler::client;
use krec_guest::k8s_openapi::api::core::v1::Namespace;
use krec_guest::prelude::*;

struct Misbehave;

#[inline(never)]
#[allow(unconditional_recursion)] // the point: overflow the stack
fn recurse(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth; 64]);
    recurse(depth + 1) + frame[0]
}

impl Reconciler for Misbehave {
    fn reconcile(req: Request, ctx: &Context) -> Result<Action> {
        match req.name.as_str() {
            "ok" => Ok(Action::done()),
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
            other => Err(Error::Invalid(format!("unknown misbehaviour {other:?}"))),
        }
    }
}

export!(Misbehave);
