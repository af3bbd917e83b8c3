//! `krec cluster`: prints where the kubeconfig is and how to use it, binds loopback by default,
//! and stops cleanly on Ctrl-C.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn cluster_should_print_the_kubeconfig_and_stop_on_ctrl_c() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kc.yaml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_krec"))
        .args(["cluster", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .env("RUST_LOG", "off")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start krec cluster");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut printed = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("line");
        let done = line.starts_with("try: kubectl");
        printed.push(line);
        if done {
            break;
        }
    }
    let text = printed.join("\n");
    assert!(
        text.contains("serving the Kubernetes API at https://127.0.0.1:"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "kubeconfig: {}",
            kubeconfig.canonicalize().expect("written").display()
        )),
        "{text}"
    );
    assert!(text.contains("try: kubectl --kubeconfig "), "{text}");
    let written = std::fs::read_to_string(&kubeconfig).expect("kubeconfig");
    assert!(
        written.contains("server: https://127.0.0.1:")
            && written.contains("certificate-authority-data:")
    );

    // Ctrl-C: SIGINT to the process.
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = child.wait().expect("wait");
    assert!(exit.success(), "exit status {exit:?}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("stopping")), "{rest:?}");
}
