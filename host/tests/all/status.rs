//! The status page on the admin port, in headless Chromium (Debian's, which `make tools`
//! installs): `krec dev` runs the samples with foo-controller shadowed by a candidate that
//! writes one replica more, behind an admin token; the page, as Chromium renders it, asks for
//! the token without one and, with it, shows the guests and — once the Foo is scaled — the
//! shadow's divergence as a diff. A screenshot is kept in the target directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{self, stop, until};

const CHROMIUM: &str = "/usr/bin/chromium";
const TOKEN: &str = "status-page-test-token";

/// Headless Chromium's flags for a closed network, as root, with a profile of its own.
fn chromium(profile: &Path) -> Command {
    assert!(
        Path::new(CHROMIUM).exists(),
        "the status page's test needs Debian's chromium: `make tools` installs it"
    );
    let mut command = Command::new(CHROMIUM);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1400,1100",
            // Virtual time: the page's fetches finish and its timers run before the DOM is
            // taken, however busy the machine (virtual time stands still while a fetch is out).
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()));
    command
}

/// The page at `url` as Chromium leaves it once its script ran.
fn rendered(profile: &Path, url: &str) -> Result<String, String> {
    let output = chromium(profile)
        .arg("--dump-dom")
        .arg(url)
        .output()
        .map_err(|e| format!("{CHROMIUM}: {e}"))?;
    let dom = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() && !dom.is_empty() {
        Ok(dom)
    } else {
        Err(format!(
            "{CHROMIUM} {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Where the screenshot is kept: the target directory's `tmp`, beside the test binaries.
fn screenshot_path() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("status-page.png")
}

#[test]
fn the_status_page_should_show_the_guests_and_a_shadow_rollouts_divergence_in_chromium() {
    let dir = tempfile::tempdir().expect("tempdir");
    let candidate = common::module("foo_plus.wasm");
    let manifests = dir.path().join("manifests");
    let (mut dev, admin, kubeconfig) =
        common::dev(dir.path(), &["foo-controller", "pod-counter"], |command| {
            // The manifests are in place by now: foo-controller gains its shadow.
            let manifest = manifests.join("foo-controller.yaml");
            let mut text = std::fs::read_to_string(&manifest).expect("read manifest");
            text.push_str(&format!(
                "  rollout:\n    candidate: {}\n",
                candidate.display()
            ));
            std::fs::write(&manifest, text).expect("write manifest");
            command.args(["--admin-token", TOKEN]);
        });
    let profile = dir.path().join("chromium-profile");

    // The page itself holds no data and is served to anyone; what it reads is guarded.
    let page = krec_testkit::http::get(admin, "/status").expect("GET /status");
    assert!(page.contains("<title>krec status</title>"), "{page}");
    assert_eq!(
        krec_testkit::http::get(admin, "/guests"),
        None,
        "GET /guests without the token is refused"
    );

    // Without the token the page asks for it, and shows nothing of the guests.
    let url = format!("http://{admin}/status");
    let dom = until(
        "the page to ask for the token",
        Duration::from_secs(30),
        || {
            let dom = rendered(&profile, &url)?;
            if dom.contains("needs its admin token") {
                Ok(dom)
            } else {
                Err(dom)
            }
        },
    );
    assert!(
        dom.contains(r#"<form id="login">"#),
        "the form is shown: {dom}"
    );
    assert!(!dom.contains("foo-controller"), "{dom}");

    // Scaled to 3, the live version updates the Deployment to 3 replicas, the candidate would
    // to 4. With the token (in the fragment, which never reaches the server): the guests, and
    // that divergence as a diff under the write it belongs to.
    let kubectl = common::Kubectl::new(&kubeconfig, &dir.path().join("kubectl-cache"));
    let (ok, out, err) = kubectl.run([
        "patch",
        "foo",
        "example-foo",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"replicas":3}}"#,
    ]);
    assert!(ok, "{out}{err}");
    let url = format!("http://{admin}/status#token={TOKEN}");
    let dom = until(
        "the page to show the guests and the divergence",
        Duration::from_secs(60),
        || {
            let dom = rendered(&profile, &url)?;
            let shown = [
                r#"<tr data-guest="foo-controller""#,
                r#"<tr data-guest="pod-counter""#,
                r#"data-rollout="foo-controller""#,
                "foo-controller: shadow Shadowing",
                "@@ write 1 (update apps/v1 Deployment default/example-foo) @@",
                r#"<div class="del">- spec.replicas: 3</div>"#,
                r#"<div class="add">+ spec.replicas: 4</div>"#,
            ];
            match shown.iter().find(|s| !dom.contains(*s)) {
                None => Ok(dom),
                Some(missing) => Err(format!("no {missing:?} in:\n{dom}")),
            }
        },
    );
    assert!(dom.contains(r#"<form id="login" hidden="">"#), "{dom}");
    assert!(
        dom.contains(r#"<td class="state-Running">Running</td>"#),
        "{dom}"
    );

    // The screenshot, kept as the test's artifact.
    let screenshot = screenshot_path();
    let _ = std::fs::remove_file(&screenshot);
    let output = chromium(&profile)
        .arg(format!("--screenshot={}", screenshot.display()))
        .arg(&url)
        .output()
        .expect("chromium --screenshot");
    let png = std::fs::read(&screenshot).unwrap_or_else(|e| {
        panic!(
            "no screenshot at {} ({e}): {}",
            screenshot.display(),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    println!("the status page: {}", screenshot.display());
    let exit = stop(&mut dev.0, "-INT");
    assert!(exit.success(), "krec dev ends cleanly: {exit}");
}
