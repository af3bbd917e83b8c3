//! krec as envtest's control plane: `krec envtest` puts a `kube-apiserver`, an `etcd` and a
//! `kubectl` into a folder, so `KUBEBUILDER_ASSETS=$(krec envtest) go test ./...` runs a
//! controller-runtime suite's `envtest.Environment` on krec's API server, unchanged.
//!
//! envtest starts each entry as the real binary, with the real binary's flags
//! (`sigs.k8s.io/controller-runtime/pkg/internal/testing/controlplane`): `kube-apiserver` here
//! is `krec kube-apiserver`, which reads kube-apiserver's flags ([`APISERVER_FLAGS`]; an unknown
//! one is refused by name, as kube-apiserver refuses it) and serves krec's API server with the
//! given certificates, client CA and authorization mode, no controllers and no nodes — the
//! control plane envtest promises. `etcd` is `krec etcd`: krec's store lives in the API
//! server's process, so this entry only answers envtest's health check on its client URL and
//! waits for its signal. `kubectl` is the one on `PATH`, when there is one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The arguments of `krec envtest`.
#[derive(clap::Args)]
pub(super) struct Args {
    /// The folder to put `kube-apiserver`, `etcd` and `kubectl` into (made if missing);
    /// default: krec's folder in the user's cache (`$XDG_CACHE_HOME/krec/envtest`, else
    /// `~/.cache/krec/envtest`).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// The arguments of `krec kube-apiserver` and `krec etcd`: the real binaries' flags, read by
/// this module rather than by clap (their syntax is Go's pflag's).
#[derive(clap::Args)]
pub(super) struct Flags {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// Write the entries; print the folder (alone on stdout, for `$(krec envtest)`).
pub(super) fn execute(args: Args) -> anyhow::Result<()> {
    let dir = match args.dir {
        Some(dir) => dir,
        None => default_dir()?,
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let krec = std::env::current_exe().context("finding krec's own executable")?;
    for (entry, command) in [("kube-apiserver", "kube-apiserver"), ("etcd", "etcd")] {
        write_entry(&dir.join(entry), &krec, command)?;
    }
    let kubectl = dir.join("kubectl");
    let _ = std::fs::remove_file(&kubectl);
    match which("kubectl") {
        Some(found) => link_or_copy(&found, &kubectl)?,
        None => eprintln!(
            "krec envtest: no kubectl on PATH: {} has none (envtest needs one only for ControlPlane.KubeCtl())",
            dir.display()
        ),
    }
    let dir = dir.canonicalize().unwrap_or(dir);
    println!("{}", dir.display());
    Ok(())
}

/// `$XDG_CACHE_HOME/krec/envtest`, else `~/.cache/krec/envtest`.
fn default_dir() -> anyhow::Result<PathBuf> {
    let cache = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(cache) => PathBuf::from(cache),
        None => PathBuf::from(
            std::env::var_os("HOME")
                .context("neither XDG_CACHE_HOME nor HOME is set: give --dir")?,
        )
        .join(".cache"),
    };
    Ok(cache.join("krec").join("envtest"))
}

/// A script at `path` running `krec <command>` with the arguments it was given.
fn write_entry(path: &Path, krec: &Path, command: &str) -> anyhow::Result<()> {
    let quoted = krec.display().to_string().replace('\'', r"'\''");
    let script = format!(
        "#!/bin/sh\n# krec's {command} for envtest (written by `krec envtest`).\nexec '{quoted}' {command} \"$@\"\n"
    );
    // Written beside and renamed: a suite running the old entry never reads half a script,
    // and two `krec envtest`s at once each rename a whole one of their own.
    let temporary = path.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&temporary, script)
        .with_context(|| format!("writing {}", temporary.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("making {} executable", temporary.display()))?;
    }
    std::fs::rename(&temporary, path).with_context(|| format!("writing {}", path.display()))
}

/// `program` on `PATH`.
fn which(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
        .and_then(|path| path.canonicalize().ok())
}

fn link_or_copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    if std::os::unix::fs::symlink(from, to).is_ok() {
        return Ok(());
    }
    std::fs::copy(from, to)
        .map(drop)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))
}

/// How a flag takes its value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `--name=value` or `--name value`.
    Value,
    /// `--name`, `--name=true` or `--name=false`.
    Bool,
}

/// What the entry does with a flag.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Use {
    /// Read and honoured.
    Honoured,
    /// Accepted and without effect here (said in the docs' table, and logged when given).
    Ignored,
}

/// The kube-apiserver flags `krec kube-apiserver` accepts: those envtest and kubebuilder pass,
/// and those a suite commonly adds (`Environment.ControlPlane.APIServer.Configure()`). Any other
/// is refused by name.
const APISERVER_FLAGS: &[(&str, Kind, Use)] = &[
    ("secure-port", Kind::Value, Use::Honoured),
    ("bind-address", Kind::Value, Use::Honoured),
    ("cert-dir", Kind::Value, Use::Honoured),
    ("tls-cert-file", Kind::Value, Use::Honoured),
    ("tls-private-key-file", Kind::Value, Use::Honoured),
    ("client-ca-file", Kind::Value, Use::Honoured),
    ("authorization-mode", Kind::Value, Use::Honoured),
    ("anonymous-auth", Kind::Bool, Use::Honoured),
    ("etcd-servers", Kind::Value, Use::Honoured),
    ("audit-log-path", Kind::Value, Use::Honoured),
    (
        "service-account-max-token-expiration",
        Kind::Value,
        Use::Honoured,
    ),
    ("advertise-address", Kind::Value, Use::Ignored),
    ("allow-privileged", Kind::Bool, Use::Ignored),
    ("service-cluster-ip-range", Kind::Value, Use::Ignored),
    ("service-account-issuer", Kind::Value, Use::Ignored),
    ("service-account-key-file", Kind::Value, Use::Ignored),
    (
        "service-account-signing-key-file",
        Kind::Value,
        Use::Ignored,
    ),
    ("disable-admission-plugins", Kind::Value, Use::Ignored),
    ("enable-admission-plugins", Kind::Value, Use::Ignored),
    ("enable-priority-and-fairness", Kind::Bool, Use::Ignored),
    ("etcd-prefix", Kind::Value, Use::Ignored),
    ("storage-backend", Kind::Value, Use::Ignored),
    ("storage-media-type", Kind::Value, Use::Ignored),
    ("feature-gates", Kind::Value, Use::Ignored),
    ("runtime-config", Kind::Value, Use::Ignored),
    ("profiling", Kind::Bool, Use::Ignored),
    ("v", Kind::Value, Use::Ignored),
    ("vmodule", Kind::Value, Use::Ignored),
    ("logtostderr", Kind::Bool, Use::Ignored),
    ("alsologtostderr", Kind::Bool, Use::Ignored),
];

/// The etcd flags `krec etcd` accepts (envtest's, and those of its `Etcd.Configure()` users).
const ETCD_FLAGS: &[(&str, Kind, Use)] = &[
    ("listen-client-urls", Kind::Value, Use::Honoured),
    ("advertise-client-urls", Kind::Value, Use::Ignored),
    ("listen-peer-urls", Kind::Value, Use::Ignored),
    ("initial-advertise-peer-urls", Kind::Value, Use::Ignored),
    ("initial-cluster", Kind::Value, Use::Ignored),
    ("data-dir", Kind::Value, Use::Ignored),
    ("name", Kind::Value, Use::Ignored),
    ("unsafe-no-fsync", Kind::Bool, Use::Ignored),
    ("quota-backend-bytes", Kind::Value, Use::Ignored),
    ("listen-metrics-urls", Kind::Value, Use::Ignored),
    ("log-level", Kind::Value, Use::Ignored),
    ("logger", Kind::Value, Use::Ignored),
];

/// A command line pflag refuses, in its words.
#[derive(Debug, thiserror::Error)]
enum FlagError {
    /// An argument that is no flag.
    #[error("unexpected argument {0:?}: flags only")]
    NotAFlag(String),
    /// A flag the program does not have.
    #[error("unknown flag: --{0}")]
    Unknown(String),
    /// A flag that takes a value, last and without one.
    #[error("flag needs an argument: --{0}")]
    NoValue(String),
    /// A boolean flag's value that `strconv.ParseBool` refuses (value, flag).
    #[error(
        "invalid argument {0:?} for \"--{1}\" flag: strconv.ParseBool: parsing {0:?}: invalid syntax"
    )]
    NotABool(String, String),
}

/// The flags of `args` by name (each value a flag was given, in order), read as Go's pflag
/// reads them; an unknown flag or a missing value is kube-apiserver's error.
fn parse(
    args: &[String],
    known: &[(&str, Kind, Use)],
) -> Result<BTreeMap<String, Vec<String>>, FlagError> {
    let mut flags: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return Err(FlagError::NotAFlag(arg.clone()));
        };
        let (name, value) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (flag, None),
        };
        let Some((_, kind, _)) = known.iter().find(|(known, ..)| *known == name) else {
            return Err(FlagError::Unknown(name.to_owned()));
        };
        let value = match (kind, value) {
            (_, Some(value)) => value,
            (Kind::Bool, None) => "true".to_owned(),
            (Kind::Value, None) => args
                .next()
                .cloned()
                .ok_or_else(|| FlagError::NoValue(name.to_owned()))?,
        };
        let value = if *kind == Kind::Bool {
            // strconv.ParseBool's spellings.
            match value.as_str() {
                "1" | "t" | "T" | "true" | "TRUE" | "True" => "true".to_owned(),
                "0" | "f" | "F" | "false" | "FALSE" | "False" => "false".to_owned(),
                _ => return Err(FlagError::NotABool(value, name.to_owned())),
            }
        } else {
            value
        };
        flags.entry(name.to_owned()).or_default().push(value);
    }
    Ok(flags)
}

/// Whether `args` ask for help (`-h`, `--help`): envtest asks to learn which flags there are.
fn asks_help(args: &[String]) -> bool {
    args.iter().any(|a| a == "-h" || a == "--help")
}

/// The usage `binary --help` prints: its flags as pflag lists them.
fn usage(binary: &str, known: &[(&str, Kind, Use)]) -> String {
    let mut text = format!("Usage:\n  {binary} [flags]\n\nFlags:\n");
    for (name, kind, used) in known {
        let value = if *kind == Kind::Value { " string" } else { "" };
        let note = if *used == Use::Ignored {
            "accepted; no effect in krec"
        } else {
            "as the real binary's"
        };
        text.push_str(&format!("      --{name}{value}    {note}\n"));
    }
    text.push_str("  -h, --help    help for ");
    text.push_str(binary);
    text.push('\n');
    text
}

/// The last value of flag `name`; an empty value is no value (kube's flags read `--x=` as
/// unset).
fn last<'a>(flags: &'a BTreeMap<String, Vec<String>>, name: &str) -> Option<&'a str> {
    flags
        .get(name)?
        .last()
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// Every value of list flag `name` (pflag's string slices append: `--x=a --x=b,c` is
/// `a,b,c`), joined by commas; `None` when it was not given or only empty.
fn joined(flags: &BTreeMap<String, Vec<String>>, name: &str) -> Option<String> {
    let values: Vec<&str> = flags
        .get(name)?
        .iter()
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// Log the ignored flags given, once each.
fn say_ignored(flags: &BTreeMap<String, Vec<String>>, known: &[(&str, Kind, Use)], what: &str) {
    let ignored: Vec<&str> = known
        .iter()
        .filter(|(name, _, used)| *used == Use::Ignored && flags.contains_key(*name))
        .map(|(name, ..)| *name)
        .collect();
    if !ignored.is_empty() {
        tracing::info!(
            "krec {what}: accepted without effect (see docs/envtest.md): --{}",
            ignored.join(", --")
        );
    }
}

/// The version the entries answer `--version` with: the Kubernetes release krec's API server
/// answers as.
const KUBERNETES_VERSION: &str = "v1.36.0";

/// `krec kube-apiserver`: krec's API server as kube-apiserver is started.
pub(super) async fn kube_apiserver(args: Flags) -> anyhow::Result<()> {
    if args
        .args
        .iter()
        .any(|a| a == "--version" || a == "--version=true")
    {
        println!("Kubernetes {KUBERNETES_VERSION}");
        return Ok(());
    }
    if asks_help(&args.args) {
        print!("{}", usage("kube-apiserver", APISERVER_FLAGS));
        return Ok(());
    }
    let flags = parse(&args.args, APISERVER_FLAGS)?;
    say_ignored(&flags, APISERVER_FLAGS, "kube-apiserver");
    if joined(&flags, "etcd-servers").is_none() {
        anyhow::bail!("[--etcd-servers must be specified]");
    }
    let port: u16 = last(&flags, "secure-port")
        .unwrap_or("6443")
        .parse()
        .map_err(|err| anyhow::anyhow!("invalid argument for --secure-port: {err}"))?;
    let ip: std::net::IpAddr = last(&flags, "bind-address")
        .unwrap_or("0.0.0.0")
        .parse()
        .map_err(|err| anyhow::anyhow!("invalid argument for --bind-address: {err}"))?;
    let read = |flag: &str, path: &str| {
        std::fs::read_to_string(path).with_context(|| format!("--{flag}: reading {path}"))
    };
    // The serving certificate: --tls-cert-file, else apiserver.crt in --cert-dir, as
    // kube-apiserver looks for it.
    let serving = match (
        last(&flags, "tls-cert-file"),
        last(&flags, "tls-private-key-file"),
    ) {
        (Some(cert), Some(key)) => Some((
            read("tls-cert-file", cert)?,
            read("tls-private-key-file", key)?,
        )),
        (Some(_), None) | (None, Some(_)) => {
            anyhow::bail!("--tls-cert-file and --tls-private-key-file go together")
        }
        (None, None) => {
            let dir = Path::new(last(&flags, "cert-dir").unwrap_or("/var/run/kubernetes"));
            let (cert, key) = (dir.join("apiserver.crt"), dir.join("apiserver.key"));
            if cert.is_file() && key.is_file() {
                Some((
                    read("cert-dir", &cert.display().to_string())?,
                    read("cert-dir", &key.display().to_string())?,
                ))
            } else {
                tracing::info!(
                    "no serving certificate in {}: serving one of a CA generated now",
                    dir.display()
                );
                None
            }
        }
    };
    let always_allow = authorization(
        &joined(&flags, "authorization-mode").unwrap_or_else(|| "AlwaysAllow".to_owned()),
    )?;
    let anonymous = last(&flags, "anonymous-auth").unwrap_or("true") == "true";
    let simulation = krec_apiserver::controllers::Config {
        controllers: krec_apiserver::controllers::Selection::none(),
        nodes: 0,
        ..Default::default()
    };
    let mut server = krec_apiserver::Server::builder()
        .addr(std::net::SocketAddr::new(ip, port))
        .anonymous_auth(anonymous)
        .always_allow(always_allow)
        .simulation(simulation);
    if let Some((cert, key)) = serving {
        server = server.serving_certificate(cert, key);
    }
    if let Some(path) = last(&flags, "client-ca-file") {
        server = server.client_ca(read("client-ca-file", path)?);
    }
    if let Some(path) = last(&flags, "audit-log-path") {
        let log = krec_apiserver::audit::AuditLog::to_file(Path::new(path))
            .with_context(|| format!("--audit-log-path: opening {path}"))?;
        server = server.audit(std::sync::Arc::new(log));
    }
    if let Some(longest) = last(&flags, "service-account-max-token-expiration") {
        let longest = super::args::duration(longest)
            .map_err(|err| anyhow::anyhow!("--service-account-max-token-expiration: {err}"))?;
        server = server.max_token_expiration(Some(longest));
    }
    let stop = super::shutdown_signal();
    let cluster = server.start().await?;
    super::serve_reconciler_crds(&cluster)?;
    tracing::info!("Serving securely on {}", cluster.addr());
    stop.await;
    tracing::info!("krec kube-apiserver: stopping");
    cluster.shutdown().await;
    Ok(())
}

/// Whether `--authorization-mode`'s `modes` authorize everything (`AlwaysAllow` among them);
/// RBAC decides otherwise. `Node` is accepted (no kubelets ask here); the others are refused.
fn authorization(modes: &str) -> anyhow::Result<bool> {
    let mut always_allow = false;
    for mode in modes.split(',').map(str::trim) {
        match mode {
            "AlwaysAllow" => always_allow = true,
            "RBAC" | "Node" => {}
            other => anyhow::bail!(
                "--authorization-mode: krec serves AlwaysAllow, RBAC and Node (a no-op without kubelets), not {other:?}"
            ),
        }
    }
    Ok(always_allow)
}

/// `krec etcd`: answers envtest's health check on each `--listen-client-urls` address until
/// SIGTERM. krec's store is the API server's own; nothing is kept here.
pub(super) async fn etcd(args: Flags) -> anyhow::Result<()> {
    if args
        .args
        .iter()
        .any(|a| a == "--version" || a == "--version=true")
    {
        println!(
            "etcd Version: {ETCD_VERSION}\n(krec's stand-in: the store is krec's API server's)"
        );
        return Ok(());
    }
    if asks_help(&args.args) {
        print!("{}", usage("etcd", ETCD_FLAGS));
        return Ok(());
    }
    let flags = parse(&args.args, ETCD_FLAGS)?;
    say_ignored(&flags, ETCD_FLAGS, "etcd");
    let urls =
        joined(&flags, "listen-client-urls").unwrap_or_else(|| "http://localhost:2379".to_owned());
    let json = |text: String| {
        move || async move {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                text,
            )
        }
    };
    let app = axum::Router::new()
        .route(
            "/health",
            axum::routing::get(json(r#"{"health":"true","reason":""}"#.to_owned())),
        )
        .route(
            "/version",
            axum::routing::get(json(format!(
                r#"{{"etcdserver":"{ETCD_VERSION}","etcdcluster":"{ETCD_VERSION}"}}"#
            ))),
        );
    let stop = super::shutdown_signal();
    let mut servers = tokio::task::JoinSet::new();
    for url in urls.split(',').filter(|u| !u.trim().is_empty()) {
        let address = url
            .trim()
            .strip_prefix("http://")
            .ok_or_else(|| {
                anyhow::anyhow!("--listen-client-urls: {url:?}: krec's etcd serves http:// only")
            })?
            .trim_end_matches('/');
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("--listen-client-urls: binding {address}"))?;
        let app = app.clone();
        servers.spawn(async move { axum::serve(listener, app).await });
    }
    tracing::info!(
        "krec etcd: answering health checks on {urls} (the store is krec's API server's)"
    );
    stop.await;
    servers.abort_all();
    Ok(())
}

/// The etcd version the stand-in names.
const ETCD_VERSION: &str = "3.6.0";

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn kube_apiservers_flags_should_be_read_as_pflag_reads_them() {
        let flags = parse(
            &args("--secure-port=6443 --cert-dir /tmp/certs --allow-privileged --anonymous-auth=false -v=4"),
            APISERVER_FLAGS,
        )
        .expect("flags");
        assert_eq!(last(&flags, "secure-port"), Some("6443"));
        assert_eq!(last(&flags, "cert-dir"), Some("/tmp/certs"));
        assert_eq!(last(&flags, "allow-privileged"), Some("true"));
        assert_eq!(last(&flags, "anonymous-auth"), Some("false"));
        assert_eq!(last(&flags, "v"), Some("4"));
        // An unknown flag is refused by name, as kube-apiserver refuses it.
        assert_eq!(
            parse(
                &args("--secure-port=1 --insecure-port=8080"),
                APISERVER_FLAGS
            )
            .err()
            .map(|e| e.to_string())
            .as_deref(),
            Some("unknown flag: --insecure-port")
        );
        assert_eq!(
            parse(&args("--cert-dir"), APISERVER_FLAGS)
                .err()
                .map(|e| e.to_string())
                .as_deref(),
            Some("flag needs an argument: --cert-dir")
        );
        assert!(parse(&args("--allow-privileged=yes"), APISERVER_FLAGS).is_err());
        // strconv.ParseBool's spellings; an empty value is unset; list flags append.
        let flags = parse(
            &args("--anonymous-auth=F --allow-privileged=1 --client-ca-file= --authorization-mode=Node --authorization-mode=RBAC,AlwaysAllow"),
            APISERVER_FLAGS,
        )
        .expect("flags");
        assert_eq!(last(&flags, "anonymous-auth"), Some("false"));
        assert_eq!(last(&flags, "allow-privileged"), Some("true"));
        assert_eq!(last(&flags, "client-ca-file"), None);
        assert_eq!(
            joined(&flags, "authorization-mode").as_deref(),
            Some("Node,RBAC,AlwaysAllow")
        );
    }

    #[test]
    fn authorization_modes_should_be_always_allow_rbac_or_node() {
        assert!(!authorization("RBAC").expect("RBAC"));
        assert!(!authorization("Node,RBAC").expect("Node,RBAC"));
        assert!(authorization("AlwaysAllow").expect("AlwaysAllow"));
        assert!(authorization("RBAC,AlwaysAllow").expect("both"));
        assert!(authorization("Webhook").is_err());
    }
}
