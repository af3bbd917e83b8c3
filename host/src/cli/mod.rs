//! The `krec` command line, one file per command: `krec new`, `krec build`, `krec check`, `krec cluster`,
//! `krec dev`, `krec run`, `krec rbac`, `krec webhooks`, `krec record`, `krec replay` and
//! `krec diff`. The binary's `main` is [`main`].

mod admin_client;
mod args;
mod build;
mod check;
#[cfg(feature = "embedded-apiserver")]
mod cluster;
#[cfg(feature = "embedded-apiserver")]
pub mod dev;
mod diff;
#[cfg(feature = "embedded-apiserver")]
mod envtest;
#[cfg(feature = "embedded-apiserver")]
mod fake_cluster;
mod install;
mod new;
mod push;
mod rbac;
mod record;
pub mod replay;
pub mod run;
pub mod scaffold;
mod top;
mod webhooks;

/// Serve krec's own API on the embedded API server — the Reconciler and ClusterReconciler CRDs
/// and their admission policy — as `kubectl apply -f deploy/crds.yaml` would on a cluster, so
/// that `kubectl apply -f` of a manifest works locally as it does there.
#[cfg(feature = "embedded-apiserver")]
fn serve_reconciler_crds(cluster: &krec_apiserver::Server) -> anyhow::Result<()> {
    let store = cluster.store();
    for mut object in crate::install::crds::api_objects() {
        // As `kubectl apply` would have left them: applying `krec install`'s output (the same
        // objects) then changes nothing and warns of nothing.
        object["metadata"]["annotations"] = serde_json::json!({});
        // Written as kubectl (Go's encoding/json) writes it: `<`, `>` and `&` escaped.
        let applied = format!("{object}\n")
            .replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026");
        object["metadata"]["annotations"] =
            serde_json::json!({"kubectl.kubernetes.io/last-applied-configuration": applied});
        let gvk = krec_core::Gvk::from_api_version(
            object["apiVersion"].as_str().unwrap_or_default(),
            object["kind"].as_str().unwrap_or_default(),
        );
        let Some(rt) = store
            .registry()
            .by_kind(&gvk.group, &gvk.version, &gvk.kind)
        else {
            continue;
        };
        match store.create(&rt, None, object, false) {
            // Kept in the data directory from an earlier start.
            Err(err) if err.code == 409 => {}
            Err(err) => anyhow::bail!("serving krec's API ({gvk}): {}", err.message),
            Ok(_) => {}
        }
    }
    Ok(())
}

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::process::progress::say;

/// krec runs Kubernetes reconcilers compiled to WebAssembly components.
#[derive(Parser)]
#[command(name = "krec", version, about)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of its largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Start a guest — a Rust crate, a Python or TypeScript project, or a Go module: a
    /// reconciler with a configuration, its manifest, an example object and unit tests on the
    /// fake cluster (--webhook: a validating and a mutating webhook too; --webhook-only: a
    /// validating webhook alone, no reconciler).
    ///
    /// Then, in the new folder (krec new prints the same for the language chosen):
    ///
    ///   Rust:        cargo build-guest; cargo test; krec dev --manifests .
    ///
    ///   Python:      python -m pytest; python -m krec_guest.build app -o NAME.wasm --dev;
    ///                krec dev --manifests . (edits run live); to ship, build without --dev
    ///
    ///   TypeScript:  npm install; npm test; npm run dev (krec dev on a dev build: edits run
    ///                live); to ship, npm run build
    ///
    ///   Go:          krec build; go test ./...; krec dev --manifests .
    #[command(verbatim_doc_comment)]
    New(new::Args),
    /// Validate manifests (and the modules they name) or bare `.wasm` modules.
    ///
    /// Prints one line per file: `ok` with the module digest, or what is wrong. Exits non-zero if
    /// any file is invalid.
    Check(check::Args),
    /// Build a Go guest: `go build` for wasip1, then the component krec runs (`<name>.wasm`).
    ///
    /// Needs only Go (1.26 or later) beside krec: the component step (the guest world and the
    /// WASI adapter) is krec's own.
    Build(build::Args),
    /// Serve the embedded Kubernetes API server, for kubectl and kube clients.
    ///
    /// HTTPS with a generated CA; the kubeconfig trusting it (and carrying the admin's token)
    /// is written to --kubeconfig-out. Clients authenticate with that token, ServiceAccount
    /// tokens, or client certificates (--client-ca-file); it binds loopback unless told
    /// otherwise. Ctrl-C or SIGTERM stops it.
    #[cfg(feature = "embedded-apiserver")]
    Cluster(cluster::Args),
    /// Put a `kube-apiserver`, an `etcd` and a `kubectl` for envtest into a folder and print
    /// it: `KUBEBUILDER_ASSETS=$(krec envtest) go test ./...` runs a controller-runtime suite's
    /// envtest control plane on krec's API server (see docs/envtest.md).
    #[cfg(feature = "embedded-apiserver")]
    Envtest(envtest::Args),
    /// kube-apiserver's command line, served by krec's API server (envtest's `kube-apiserver`).
    #[cfg(feature = "embedded-apiserver")]
    #[command(
        name = "kube-apiserver",
        hide = true,
        disable_help_flag = true,
        disable_version_flag = true
    )]
    KubeApiserver(envtest::Flags),
    /// etcd's command line: envtest's `etcd`, answering its health check (krec's store is the
    /// API server's own).
    #[cfg(feature = "embedded-apiserver")]
    #[command(hide = true, disable_help_flag = true, disable_version_flag = true)]
    Etcd(envtest::Flags),
    /// Start the embedded API server, apply example objects and reconcile them with the guests.
    ///
    /// Writes a kubeconfig so kubectl can watch the guests work, and logs every reconcile until
    /// Ctrl-C.
    #[cfg(feature = "embedded-apiserver")]
    Dev(dev::Args),
    /// The embedded API server's object store, answering calls as JSON lines on stdin and
    /// stdout: what the Python and TypeScript SDKs' FakeCluster run, so that unit tests get the
    /// cluster's own verdicts and messages. Not for people to type.
    #[cfg(feature = "embedded-apiserver")]
    #[command(name = "fake-cluster", hide = true)]
    FakeCluster(fake_cluster::Args),
    /// Publish a built guest to an OCI registry (the CNCF Wasm artifact layout, as `wkg oci
    /// push` writes it), for `spec.module: oci://…`; prints the reference pinned to its digest.
    Push(push::Args),
    /// Print (or apply) everything a cluster needs to run krec: the Reconciler CRDs and their
    /// admission policy and roles, the host's namespace, ServiceAccount, RBAC, Deployment and
    /// Services, as `kubectl apply -f -` input.
    Install(install::Args),
    /// Print the least-privilege ClusterRole and binding for the guests in a directory: their
    /// permissions plus what the host needs (watches, leases, events).
    Rbac(rbac::Args),
    /// Print what registers the guests' webhooks in a cluster: a Mutating- and a
    /// ValidatingWebhookConfiguration per guest with `webhooks` (apply with `kubectl apply
    /// --server-side`), and, as a comment, the `spec.conversion` of each CRD a guest converts.
    ///
    /// The API server reaches the host through --service (the default, as deploy/ creates it)
    /// or at --url; it trusts the CA of --ca-file, or of the certificates --generate-certs
    /// writes (ca.crt, and tls.crt/tls.key for `kubectl create secret tls`).
    Webhooks(webhooks::Args),
    /// Run the guests against a Kubernetes cluster until Ctrl-C or SIGTERM.
    Run(run::Args),
    /// Record a running guest's reconciles — each request, every read's answer, the clock, the
    /// writes, Events and result — into a file, through the host's admin server (Secrets'
    /// values redacted unless --include-secrets).
    Record(record::Args),
    /// Run a module against a recording, reads answered from it, no cluster needed; prints
    /// where its writes, Events and results differ from the recorded ones and exits 1 if any
    /// do.
    Replay(replay::Args),
    /// Show a guest's rollout (spec.rollout): the candidate's phase, its counts against the
    /// live version and its first divergences with their diff; --promote or --abort decide it.
    Diff(diff::Args),
    /// A live view of a running host's guests — CPU, reconciles per second, errors, p99,
    /// queue depth, memory, rollout phase — through its admin server; keys sort the table and
    /// open a guest's last reconciles.
    Top(top::Args),
}

impl Command {
    /// What the command logs unless `RUST_LOG` says otherwise.
    fn default_log(&self) -> &'static str {
        match self {
            Command::New(_) => "info",
            #[cfg(feature = "embedded-apiserver")]
            Command::Cluster(_) => "info",
            // `krec check`: a guest's own log lines from `init` would break "one line per file".
            Command::Build(_) => "info",
            Command::Check(_)
            | Command::Rbac(_)
            | Command::Webhooks(_)
            | Command::Install(_)
            | Command::Push(_)
            | Command::Replay(_)
            | Command::Diff(_) => "warn",
            Command::Record(_) => "info",
            // A log line would tear the screen: errors are said after it is restored.
            Command::Top(_) => "off",
            #[cfg(feature = "embedded-apiserver")]
            Command::Envtest(_) => "warn",
            #[cfg(feature = "embedded-apiserver")]
            Command::KubeApiserver(_) | Command::Etcd(_) => "info",
            #[cfg(feature = "embedded-apiserver")]
            Command::Dev(_) => LIVE_LOG,
            #[cfg(feature = "embedded-apiserver")]
            Command::FakeCluster(_) => "warn",
            Command::Run(_) => LIVE_LOG,
        }
    }
}

/// Parse the command line and run the command; what `krec` exits with.
pub fn main() -> ExitCode {
    disable_transparent_huge_pages();
    raise_open_files_limit();
    let cli = Cli::parse();
    init_logging(cli.command.default_log(), cli.log_format);
    match cli.command {
        Command::New(args) => new::execute(args),
        Command::Check(args) => check::execute(args),
        Command::Build(args) => exit_code("build", build::execute(args)),
        #[cfg(feature = "embedded-apiserver")]
        Command::Cluster(args) => block_on("cluster", cluster::execute(args)),
        #[cfg(feature = "embedded-apiserver")]
        Command::Dev(args) => traced("dev", || block_on("dev", dev::execute(args))),
        #[cfg(feature = "embedded-apiserver")]
        Command::FakeCluster(args) => exit_code("fake-cluster", fake_cluster::execute(args)),
        Command::Run(args) => traced("run", || block_on("run", run::execute(args))),
        #[cfg(feature = "embedded-apiserver")]
        Command::Envtest(args) => exit_code("envtest", envtest::execute(args)),
        #[cfg(feature = "embedded-apiserver")]
        Command::KubeApiserver(args) => block_on("kube-apiserver", envtest::kube_apiserver(args)),
        #[cfg(feature = "embedded-apiserver")]
        Command::Etcd(args) => block_on("etcd", envtest::etcd(args)),
        Command::Rbac(args) => rbac::execute(args),
        Command::Install(args) => block_on("install", install::execute(args)),
        Command::Push(args) => block_on("push", push::execute(args)),
        Command::Webhooks(args) => webhooks::execute(args),
        Command::Record(args) => record::execute(args),
        Command::Replay(args) => replay::execute(args),
        Command::Diff(args) => diff::execute(args),
        Command::Top(args) => top::execute(args),
    }
}

/// What `krec` exits with after `command` ended in `result` (its error said on stderr).
fn exit_code(command: &str, result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("krec {command}: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Print where the admin server is.
fn announce_admin(command: &str, admin: Option<std::net::SocketAddr>) {
    if let Some(addr) = admin {
        say(format_args!(
            "krec {command}: admin server at http://{addr} (/metrics, /healthz, /readyz, POST /reconcile/GUEST/NAMESPACE/NAME, /diff/GUEST, /record/GUEST)"
        ));
    }
}

/// Log line format.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Logs to stderr; `RUST_LOG` overrides `default` (e.g. `RUST_LOG=debug`).
fn init_logging(default: &str, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    // kube's client logs every failed request as an ERROR of its own, without saying whose;
    // krec reports each failure where it matters (the guest's call, the watch), so by default
    // that line is off — when the API server goes away first it was the only thing printed.
    // The file watcher's crate reports, at INFO, every watch it could not remove (a file an
    // editor or a bundler replaced): noise in the dev loop's log.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(format!(
            "{default},kube_client::client::builder=off,notify=warn"
        ))
    });
    use std::io::IsTerminal as _;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// What `krec dev` and `krec run` log by default: every reconcile and every write a guest makes.
const LIVE_LOG: &str = "info,krec::reconcile=debug,krec::client=debug";

/// Opts the process out of transparent huge pages, as Redis does for itself: with THP
/// `always`, the first touch of each 2 MiB of a growing heap zeroes all of it at once, a pause
/// in whichever request touched it, and idle memory is counted in huge pages. The embedded API
/// server's store grows with every create; the figures in BENCHMARKS.md were measured with
/// 4 KiB pages. Nothing is changed where the kernel refuses (it only ever asks).
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE only sets a flag of this process's memory map.
    #[allow(unsafe_code)] // prctl(2) has no safe wrapper
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// Raises the soft limit on open files to the hard limit, as Go's runtime does for every Go
/// server (kube-apiserver among them): the API server and the admission server hold a file
/// descriptor per connection, and the connection cap ([`krec_net::connections::Limits`])
/// is sized from the soft limit, which shells often leave at 1 024.
fn raise_open_files_limit() {
    #[cfg(unix)]
    // SAFETY: getrlimit and setrlimit read and write this process's limits through a struct
    // owned here.
    #[allow(unsafe_code)] // getrlimit(2) and setrlimit(2) have no safe wrapper
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Run `host` (a command that runs guests) with traces as the environment configures them
/// (see [`crate::telemetry::Telemetry::from_env`]), exporting the last spans before it exits.
fn traced(command: &str, host: impl FnOnce() -> ExitCode) -> ExitCode {
    if let Err(err) = crate::telemetry::install_from_env() {
        eprintln!("krec {command}: traces: {err}");
        return ExitCode::from(2);
    }
    let code = host();
    crate::telemetry::shutdown();
    code
}

/// Run `future` on a new multi-threaded runtime; report its error as `krec <command>: ...`.
fn block_on(
    command: &str,
    future: impl std::future::Future<Output = anyhow::Result<()>>,
) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("krec: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    exit_code(command, runtime.block_on(future))
}

/// Resolves on Ctrl-C or SIGTERM.
///
/// The handlers are installed when this is called, not when the future is first polled: a host
/// polls it only once its guests run, and a SIGTERM before that must not kill it outright.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt());
        let terminate = signal(SignalKind::terminate());
        async move {
            match (interrupt, terminate) {
                (Ok(mut interrupt), Ok(mut terminate)) => {
                    tokio::select! {
                        _ = interrupt.recv() => {}
                        _ = terminate.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::LIVE_LOG;
    use tracing::Level;

    /// `krec dev` and `krec run` show every reconcile and every write a guest makes by default
    /// (the targets the controller and the write log name), and not the host's inner debug.
    #[test]
    fn the_live_log_should_show_every_reconcile_and_every_write() {
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(LIVE_LOG))
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            assert!(tracing::enabled!(target: "krec::reconcile", Level::DEBUG));
            assert!(tracing::enabled!(target: "krec::client", Level::DEBUG));
            assert!(crate::cluster::Logged::wanted());
            assert!(!tracing::enabled!(target: "krec::cluster::cache", Level::DEBUG));
        });
    }
}
