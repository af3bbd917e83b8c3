//! The CNCF distribution registry as a test process.

use std::path::PathBuf;

/// The CNCF distribution registry (Debian's `docker-registry`, unpacked by `make tools` into
/// `.tools/docker-registry`, or `KREC_TEST_REGISTRY`) running as a process on loopback, its
/// storage in a directory of its own. Never skipped: without the binary the test fails.
pub struct OciRegistry {
    child: Option<std::process::Child>,
    /// Basic auth (htpasswd) required: user [`USER`], password [`PASSWORD`].
    auth: bool,
    /// `127.0.0.1:PORT`, as `oci://` references name it.
    pub addr: String,
    binary: PathBuf,
    dir: tempfile::TempDir,
}

/// The user of a registry started [`with_auth`](OciRegistry::with_auth).
pub const USER: &str = "krec";
/// Its password.
pub const PASSWORD: &str = "s3cret";
/// [`USER`]'s htpasswd line (bcrypt of [`PASSWORD`]: the registry reads only bcrypt).
const HTPASSWD: &str = "krec:$2b$12$TEhIWyPQdaOrzlPJW67rtuOGOnOkDFZW5C1fKNmNQ8V17F7/p6ouW\n";

impl OciRegistry {
    /// Start a registry on a free port.
    pub fn start() -> OciRegistry {
        Self::launch(false)
    }

    /// Start a registry that wants Basic credentials ([`USER`], [`PASSWORD`]).
    pub fn with_auth() -> OciRegistry {
        Self::launch(true)
    }

    fn launch(auth: bool) -> OciRegistry {
        let binary = std::env::var_os("KREC_TEST_REGISTRY")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                crate::repo_root().join(".tools/docker-registry/usr/bin/docker-registry")
            });
        assert!(
            binary.exists(),
            "{} is missing: run `make tools` (unpacks Debian's docker-registry package)",
            binary.display()
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let mut registry = OciRegistry {
            child: None,
            auth,
            addr: "127.0.0.1:0".into(),
            binary,
            dir,
        };
        registry.spawn();
        registry
    }

    fn spawn(&mut self) {
        use std::io::BufRead as _;
        let config = self.dir.path().join("config.yml");
        let mut text = format!(
            "version: 0.1\nlog: {{level: info, accesslog: {{disabled: true}}}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\nhttp: {{addr: \"{}\", secret: krec-test}}\n",
            self.dir.path().join("store").display(),
            self.addr
        );
        if self.auth {
            let htpasswd = self.dir.path().join("htpasswd");
            std::fs::write(&htpasswd, HTPASSWD).expect("htpasswd");
            text.push_str(&format!(
                "auth:\n  htpasswd: {{realm: krec-test, path: {}}}\n",
                htpasswd.display()
            ));
        }
        std::fs::write(&config, text).expect("registry config");
        let mut child = std::process::Command::new(&self.binary)
            .arg("serve")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start docker-registry");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = std::io::BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        let addr = loop {
            let Some(Ok(line)) = lines.next() else {
                panic!(
                    "docker-registry stopped before listening:\n{}",
                    seen.join("\n")
                );
            };
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest
                    .split(['"', ',', ' '])
                    .next()
                    .unwrap_or_default()
                    .to_owned();
            }
            seen.push(line);
        };
        // Keep draining its log, so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        self.addr = addr;
        self.child = Some(child);
    }

    /// Stop it (its storage stays, for [`restart`](Self::restart)).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start it again on the same address, with the same content.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// `oci://<addr>/<path>`.
    pub fn reference(&self, path: &str) -> String {
        format!("oci://{}/{path}", self.addr)
    }
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}
