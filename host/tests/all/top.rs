//! `krec top` in a real terminal: tmux runs it against `krec dev` on the samples; what tmux's
//! pane shows is read back, keys are sent to it.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{self, stop, until};

/// A tmux server of this test's own (its socket named for the process), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new() -> Tmux {
        Tmux {
            socket: format!("krec-top-test-{}", std::process::id()),
        }
    }

    fn run(&self, args: &[&str]) -> (bool, String) {
        let output = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("tmux (make tools installs it)");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    }

    /// What the pane shows now.
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "top"]).1
    }

    /// Type `keys` (tmux's key names).
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend(keys);
        assert!(self.run(&args).0, "send-keys {keys:?}");
    }

    /// Wait until the pane shows every one of `texts`.
    fn shows(&self, what: &str, texts: &[&str]) -> String {
        until(what, Duration::from_secs(30), || {
            let screen = self.screen();
            if texts.iter().all(|t| screen.contains(t)) {
                Ok(screen)
            } else {
                Err(format!("the screen:\n{screen}"))
            }
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// `krec top` under tmux shows the samples' guests with their figures, sorts by a key, opens
/// a guest's last reconciles with Enter, goes back with Esc and ends with q.
#[test]
fn krec_top_should_show_the_samples_guests_live_in_a_terminal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut dev, admin, kubeconfig) = common::dev(
        dir.path(),
        &["foo-controller", "pod-counter", "foo-validator"],
        |_| {},
    );
    let tmux = Tmux::new();
    let top = format!(
        "{} top --admin http://{admin} --interval 300ms",
        env!("CARGO_BIN_EXE_krec")
    );
    let (started, _) = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "150",
        "-y",
        "30",
        &top,
    ]);
    assert!(started, "tmux new-session");
    let screen = tmux.shows(
        "the guests in krec top",
        &[
            "krec top",
            "foo-controller",
            "pod-counter",
            "foo-validator",
            "Running",
            "CPU▼",
        ],
    );
    assert!(
        screen.contains("Mi") || screen.contains("Ki"),
        "memory figures:\n{screen}"
    );

    // Live: the Foo scaled, foo-controller reconciles again; its recent reconciles say so.
    let kubectl = common::Kubectl::new(&kubeconfig, &dir.path().join("kubectl-cache"));
    let (patched, _, stderr) = kubectl.run(
        [
            "patch",
            "foo",
            "example-foo",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":2}}"#,
        ]
        .map(std::ffi::OsStr::new),
    );
    assert!(patched, "{stderr}");

    // Sorted by name, foo-controller is first and selected: Enter opens its reconciles.
    tmux.keys(&["n"]);
    tmux.shows("sorted by name", &["GUEST▼"]);
    tmux.keys(&["Enter"]);
    let reconciles = tmux.shows(
        "foo-controller's last reconciles",
        &[
            "foo-controller · Running · version 1",
            "default/example-foo",
            "done",
        ],
    );
    assert!(reconciles.contains("ENDED"), "{reconciles}");
    tmux.keys(&["Escape"]);
    tmux.shows("the table again", &["GUEST▼", "pod-counter"]);
    tmux.keys(&["m"]);
    tmux.shows("sorted by memory", &["MEMORY▼"]);
    tmux.keys(&["q"]);
    until(
        "krec top to end on q",
        Duration::from_secs(10),
        || match tmux.run(&["has-session", "-t", "top"]).0 {
            true => Err("still running".to_owned()),
            false => Ok(()),
        },
    );
    let exit = stop(&mut dev.0, "-INT");
    assert!(exit.success(), "{exit:?}");
}
