//! What krec's test suites (`host/tests`, `tests/`) and benchmarks (`host/benches`) share:
//! where the repository and its built guests are, a local OCI registry process ([`OciRegistry`]),
//! a loopback HTTP receiver ([`receive_posts`]) and client ([`http::get`]), the programs `make
//! tools` provides ([`tool`]), a free port, polling until something holds. It does not depend on
//! the `krec` crate, so the host's own tests and benchmarks can use it beside the library they
//! test.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub mod http;
mod posts;
mod registry;

pub use posts::receive_posts;
pub use registry::{OciRegistry, PASSWORD, USER};

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from(".."), Path::to_path_buf)
}

/// A file under `target/` that `make guests` builds, with the fix named when it is missing.
fn built(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run `make guests` first",
        path.display()
    );
    path
}

/// A built Rust guest component in `target/wasm32-wasip2/release/`.
pub fn built_module(file: &str) -> PathBuf {
    built(repo_root().join("target/wasm32-wasip2/release").join(file))
}

/// A built Python (`python-guests`), TypeScript (`js-guests`) or Go (`go-guests`) guest
/// component in `target/<folder>/`.
pub fn built_script_module(folder: &str, file: &str) -> PathBuf {
    built(repo_root().join("target").join(folder).join(file))
}

/// A program `make tools` put under `.tools/` (`path` below it), or the one the environment
/// variable `variable` names; panics saying how to get it when it is missing.
pub fn tool(path: &str, variable: &str) -> PathBuf {
    let program = std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".tools").join(path));
    assert!(
        program.exists(),
        "{} is missing: run `make tools` (or name it in {variable})",
        program.display()
    );
    program
}

/// A free TCP port on loopback (for a server a child process binds).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// Poll `check` every 20 ms until it holds; panics after `limit`. Returns how long it took.
pub fn wait_until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
    started.elapsed()
}
