//! `krec dev`: the embedded cluster, the sample objects and the sample guests, reconciling live;
//! kubectl with the printed kubeconfig sees what the guests did.

use crate::common;

use crate::common::{repo, stop};
use std::io::BufReader;
use std::path::Path;
use std::process::Command;

/// `krec dev` on `manifests`, writing `kubeconfig`, run until it says its guests reconcile:
/// the process, what it printed until then, and the rest of its output.
fn start_dev(
    manifests: &Path,
    kubeconfig: &Path,
) -> (
    std::process::Child,
    String,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
) {
    let (child, printed, lines) = common::spawn_until(
        [
            "dev".as_ref(),
            "--manifests".as_ref(),
            manifests.as_os_str(),
            "--kubeconfig-out".as_ref(),
            kubeconfig.as_os_str(),
            "--admin-addr".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--module-cache".as_ref(),
            common::shared_module_cache().as_os_str(),
        ],
        |line| line.contains("reconciling"),
    );
    (child, printed.join("\n"), lines)
}

#[test]
fn dev_should_reconcile_the_samples_live_and_kubectl_should_see_the_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kc.yaml");
    let cache = dir.path().join("kubectl-cache");
    let kubectl = common::Kubectl::new(&kubeconfig, &cache);
    let (mut child, text, lines) = start_dev(&repo().join("sample-guests"), &kubeconfig);
    assert!(
        text.contains(&format!(
            "kubeconfig: {}",
            kubeconfig.canonicalize().expect("written").display()
        )),
        "{text}"
    );
    assert!(text.contains("try: kubectl --kubeconfig "), "{text}");
    assert!(
        text.contains("10 guest(s) reconciling (cleanup-ticker, configmap-watcher, foo-controller, foo-controller-go, greeter, namespace-labeller, pod-counter, pod-counter-go, pod-counter-py, replicaset-reconciler-go), 5 serving webhooks (foo-converter, foo-validator, foo-validator-go, foo-validator-ts, pod-defaulter)"),
        "{text}"
    );

    // pod-counter labelled the ReplicaSet with its 3 pods.
    kubectl.until(
        &[
            "get",
            "replicaset",
            "web",
            "-o",
            "jsonpath={.metadata.labels.pod-count}",
        ],
        |out| out == "3",
    );
    // namespace-labeller counted default's Deployments (the Foo's, and pod-counter's
    // example has none) through its map function, with the annotation its config names.
    kubectl.until(
        &[
            "get",
            "namespace",
            "default",
            "-o",
            "jsonpath={.metadata.annotations.example\\.com/deployments}",
        ],
        |out| out == "1",
    );
    // foo-controller created the Deployment and wrote the Foo's status.
    kubectl.until(
        &[
            "get",
            "deployment",
            "example-foo",
            "-o",
            "jsonpath={.metadata.ownerReferences[0].kind}",
        ],
        |out| out == "Foo",
    );
    kubectl.until(
        // Its Deployment's real availability: the cluster's controllers ran its Pod.
        &[
            "get",
            "foo",
            "example-foo",
            "-o",
            "jsonpath={.status.availableReplicas}",
        ],
        |out| out == "1",
    );
    // The Go foo-controller (controller-runtime code) made its Foo's Deployment in foo-go.
    kubectl.until(
        &[
            "get",
            "deployment",
            "example-foo",
            "-n",
            "foo-go",
            "-o",
            "jsonpath={.metadata.ownerReferences[0].kind}",
        ],
        |out| out == "Foo",
    );
    // foo-converter serves the Foo's v1beta1 (spec.replicas is spec.instances there).
    kubectl.until(
        &[
            "get",
            "foos.v1beta1.samplecontroller.k8s.io",
            "example-foo",
            "-o",
            "jsonpath={.spec.instances}",
        ],
        |out| out == "1",
    );
    // configmap-watcher keeps its summary; cleanup-ticker deleted the expired ConfigMap.
    kubectl.until(
        &[
            "get",
            "configmap",
            "configmap-summary",
            "-o",
            "jsonpath={.data.kube-public}",
        ],
        // The example's cluster-info and the root CA every namespace gets.
        |out| out == "2",
    );
    kubectl.until(&["get", "configmaps", "-o", "name"], |out| {
        !out.contains("old-cache") && out.contains("session-cache")
    });

    // The examples were applied as kubectl applies: applying one again is a quiet patch.
    let example = repo().join("sample-guests/pod-counter/examples/replicaset.yaml");
    let (applied, out, stderr) =
        kubectl.run(["apply".as_ref(), "-f".as_ref(), example.as_os_str()]);
    assert!(applied, "{out}{stderr}");
    assert!(!stderr.contains("last-applied-configuration"), "{stderr}");

    let exit = stop(&mut child, "-INT");
    assert!(exit.success(), "exit status {exit:?}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("stopping")), "{rest:?}");
}

#[test]
fn dev_should_register_the_webhooks_of_guests_a_reload_brings_and_remove_them_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let guests = dir.path().join("guests");
    std::fs::create_dir(&guests).expect("mkdir");
    common::place_manifest(&guests, "foo-controller");
    std::fs::copy(
        repo().join("sample-guests/foo-controller/crd/foo-crd.yaml"),
        guests.join("foo-crd.yaml"),
    )
    .expect("copy the CRD");
    let kubeconfig = dir.path().join("kc.yaml");
    let cache = dir.path().join("kubectl-cache");
    let kubectl = common::Kubectl::new(&kubeconfig, &cache);
    let (mut child, _, _lines) = start_dev(&guests, &kubeconfig);
    let bad = repo()
        .join("sample-guests/foo-validator/rejected/bad-foo.yaml")
        .display()
        .to_string();
    // No validator yet: nothing is registered.
    let (_, out, _) = kubectl.run(["get", "validatingwebhookconfigurations", "-o", "name"]);
    assert_eq!(out, "");
    // The validator's manifest appears: the reload registers its webhook.
    common::place_manifest(&guests, "foo-validator");
    kubectl.until(
        &["get", "validatingwebhookconfigurations", "-o", "name"],
        |out| {
            out.trim()
                == "validatingwebhookconfiguration.admissionregistration.k8s.io/krec-foo-validator"
        },
    );
    let (denied, _, stderr) = kubectl.run(["apply", "-f", &bad, "--dry-run=server"]);
    assert!(!denied);
    assert!(
        stderr.contains("denied the request: spec.deploymentName: Invalid value: \"Not_A_Name\""),
        "{stderr}"
    );
    // Gone again: so is its registration, and the Foo is admitted.
    std::fs::remove_file(guests.join("foo-validator.yaml")).expect("remove");
    kubectl.until(
        &["get", "validatingwebhookconfigurations", "-o", "name"],
        |out| out.is_empty(),
    );
    let (admitted, _, stderr) = kubectl.run(["apply", "-f", &bad, "--dry-run=server"]);
    assert!(admitted, "{stderr}");

    assert!(stop(&mut child, "-INT").success());
}

/// Run `program args` in `dir`, failing the test with its output unless it succeeds.
fn run_in(dir: &Path, program: &str, args: &[&str]) -> String {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(dir)
        // The outer `cargo test`'s settings must not leak into the new crate's own build.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET");
    if program == env!("CARGO_BIN_EXE_krec") {
        // krec's module cache: the tests' own, not the user's.
        command.env("XDG_CACHE_HOME", common::test_cache_home());
    }
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{program} {args:?} in {}:\n{text}",
        dir.display()
    );
    text
}

/// Wait until the example Deployment's `example.com/generation` annotation is `value`.
fn example_marked(kubectl: &common::Kubectl, value: &str) {
    kubectl.until(
        &[
            "get",
            "deployment",
            "example",
            "-o",
            "jsonpath={.metadata.annotations.example\\.com/generation}",
        ],
        |out| out == value,
    );
}

/// What every `krec new` guest does under `krec dev --manifests PROJECT`: its example
/// Deployment is marked with its generation, and its webhook refuses a frozen copy of it
/// (written into `scratch`).
fn example_marked_and_frozen_refused(kubectl: &common::Kubectl, project: &Path, scratch: &Path) {
    example_marked(kubectl, "1");
    frozen_refused(kubectl, project, scratch);
}

/// The guest's validating webhook refuses the example, frozen, as `kubectl apply` sends it.
fn frozen_refused(kubectl: &common::Kubectl, project: &Path, scratch: &Path) {
    let frozen = scratch.join("frozen.yaml");
    std::fs::write(
        &frozen,
        std::fs::read_to_string(project.join("examples/example.yaml"))
            .expect("example")
            .replace(
                "name: example",
                "name: frozen\n  annotations: { example.com/frozen: \"true\" }",
            ),
    )
    .expect("write");
    let (refused, _, stderr) = kubectl.run(["apply".as_ref(), "-f".as_ref(), frozen.as_os_str()]);
    assert!(!refused);
    assert!(stderr.contains("this object is frozen"), "{stderr}");
}

/// The journey of a guest author outside this repository: `krec new`, then the commands it
/// prints — `cargo build-guest`, `cargo test` (the generated unit test on the fake cluster and
/// integration test in the real host), `krec dev --manifests .` — without editing a file.
#[test]
fn krec_new_should_make_a_guest_that_builds_tests_and_runs_outside_the_repository() {
    let outside = tempfile::tempdir().expect("tempdir");
    assert!(
        !outside
            .path()
            .starts_with(repo().canonicalize().expect("repo"))
    );
    // The new crate's build output is kept between runs (outside the repository too), so a
    // second run does not compile its dependencies again; the crate itself is always new.
    let cache = std::env::temp_dir().join("krec-new-test-target");
    let out = Command::new(env!("CARGO_BIN_EXE_krec"))
        .args(["new", "my-guest", "--webhook"])
        .current_dir(outside.path())
        .output()
        .expect("krec new");
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.contains("cargo build-guest") && printed.contains("krec dev --manifests ."),
        "{printed}"
    );
    let crate_dir = outside.path().join("my-guest");
    if cache.exists() {
        let _ = std::fs::rename(&cache, crate_dir.join("target"));
    }
    let keep_cache = |crate_dir: &Path| {
        let _ = std::fs::remove_dir_all(&cache);
        let _ = std::fs::rename(crate_dir.join("target"), &cache);
    };

    run_in(&crate_dir, "cargo", &["build-guest"]);
    assert!(
        crate_dir
            .join("target/wasm32-wasip2/release/my_guest.wasm")
            .exists()
    );
    let tests = run_in(&crate_dir, "cargo", &["test"]);
    assert!(
        tests.contains("reconcile_should_mark_the_object_once ... ok")
            && tests.contains("the_guest_should_mark_an_object_in_the_host ... ok")
            && tests.contains("the_guard_should_refuse_a_frozen_object_and_admit_others ... ok")
            && tests.contains("defaults_should_label_what_it_admits ... ok")
            && tests
                .contains("the_webhooks_should_judge_what_the_cluster_is_asked_to_create ... ok"),
        "{tests}"
    );
    let checked = run_in(
        &crate_dir,
        env!("CARGO_BIN_EXE_krec"),
        &["check", "manifest.yaml"],
    );
    assert!(checked.contains("ok, guest my-guest"), "{checked}");

    // `krec dev --manifests .`: the example Deployment is applied and marked.
    let kubeconfig = outside.path().join("kc.yaml");
    let kubectl = common::Kubectl::new(&kubeconfig, &outside.path().join("kubectl-cache"));
    let (mut child, text, _lines) = start_dev(&crate_dir, &kubeconfig);
    assert!(
        text.contains("get deployments --show-labels"),
        "the kubectl hint names what the guest reconciles: {text}"
    );
    example_marked_and_frozen_refused(&kubectl, &crate_dir, outside.path());
    let _ = child.kill();
    let _ = child.wait();
    keep_cache(&crate_dir);
}

/// The journey of a Python, TypeScript or Go guest author: `krec new NAME --lang LANG --webhook`,
/// then the commands it prints, run as printed (one-time installs aside: `make test` installed
/// the SDKs and their tools), then `krec dev --manifests .`: the example is marked and a frozen
/// object refused.
fn scripted_guest_journey(lang: &str, name: &str) {
    guest_journey(lang, name, "--webhook");
}

/// The journey of a guest made by `krec new … --lang LANG` with `webhooks` (`--webhook`, or
/// `--webhook-only`: the guest only judges, so nothing is marked or edited).
fn guest_journey(lang: &str, name: &str, webhooks: &str) {
    let webhook_only = webhooks == "--webhook-only";
    let outside = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_krec"))
        .args(["new", name, "--lang", lang, webhooks])
        .current_dir(outside.path())
        .output()
        .expect("krec new");
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let project = outside.path().join(name);
    // The tools venv first on PATH: its python has componentize-py, pytest and the SDK; then
    // this krec, as a guest author has it (`krec build`, and Go's fake cluster runs it).
    let krec_dir = Path::new(env!("CARGO_BIN_EXE_krec"))
        .parent()
        .expect("krec's folder");
    let path = format!(
        "{}:{}:{}",
        repo().join(".tools/venv/bin").display(),
        krec_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let commands: Vec<String> = printed
        .split_once("next:")
        .expect("next steps")
        .1
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim().to_owned())
        .filter(|line| !line.is_empty())
        .collect();
    // TypeScript's `npm run dev` runs `krec dev --manifests .` on a dev build.
    let dev_command = if lang == "typescript" {
        "npm run dev"
    } else {
        "krec dev --manifests ."
    };
    let until_dev = commands
        .iter()
        .position(|c| c == dev_command)
        .unwrap_or_else(|| panic!("no `{dev_command}` in the next steps: {printed}"));
    let run = |command: &str| {
        let out = Command::new("sh")
            .args(["-c", command])
            .current_dir(&project)
            .env("PATH", &path)
            .output()
            .expect("sh");
        assert!(
            out.status.success(),
            "`{command}` in {}:\n{}{}",
            project.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for command in &commands[..until_dev] {
        if command.starts_with("cd ") {
            continue;
        }
        // Installs "once" are `make test`'s (the venv, the SDK's node_modules).
        if command.starts_with("pip install") || command.starts_with("(cd ") {
            continue;
        }
        run(command);
    }

    let kubeconfig = outside.path().join("kc.yaml");
    let kubectl = common::Kubectl::new(&kubeconfig, &outside.path().join("kubectl-cache"));
    let mut child = if lang == "typescript" {
        npm_run_dev(&project, &kubeconfig, &path)
    } else {
        start_dev(&project, &kubeconfig).0
    };
    if webhook_only {
        frozen_refused(&kubectl, &project, outside.path());
    } else {
        example_marked_and_frozen_refused(&kubectl, &project, outside.path());
    }
    // A dev build: an edit of the sources runs as the next version, with no componentize and no
    // compile.
    let edit = match lang {
        _ if webhook_only => None,
        "python" => Some((
            "app.py",
            r#"generation = str(obj["metadata"].get("generation", 0))"#,
            r#"generation = "edited-" + str(obj["metadata"].get("generation", 0))"#,
        )),
        "typescript" => Some((
            "src/app.ts",
            "const generation = String(obj.metadata.generation ?? 0);",
            r#"const generation = "edited-" + String(obj.metadata.generation ?? 0);"#,
        )),
        _ => None,
    };
    if let Some((file, line, edited_line)) = edit {
        let file = project.join(file);
        let source = std::fs::read_to_string(&file).expect("the guest's source");
        let edited = source.replace(line, edited_line);
        assert_ne!(edited, source, "the template's marking line");
        std::fs::write(&file, edited).expect("edit");
        example_marked(&kubectl, "edited-1");
    }
    if lang == "typescript" {
        // The whole group: npm, krec-guest and krec dev.
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", child.id())])
            .status();
    } else {
        let _ = child.kill();
    }
    let _ = child.wait();
    // Then what ships: the component built without --dev.
    for command in &commands[until_dev + 1..] {
        run(command);
    }
}

/// `npm run dev` in `project` (`krec-guest dev`: the dev build, its bundle rebuilt on save,
/// `krec dev --manifests .` on it), in a process group of its own, once its guests reconcile.
fn npm_run_dev(project: &Path, kubeconfig: &Path, path: &str) -> std::process::Child {
    use std::os::unix::process::CommandExt as _;
    let mut child = Command::new("npm")
        .args(["run", "dev", "--", "--", "--kubeconfig-out"])
        .arg(kubeconfig)
        .args(["--admin-addr", "127.0.0.1:0", "--no-module-cache"])
        .current_dir(project)
        .env("PATH", path)
        .env("KREC", env!("CARGO_BIN_EXE_krec"))
        .env("RUST_LOG", "off")
        .env("XDG_CACHE_HOME", common::test_cache_home())
        .stdout(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("npm run dev");
    let (printed, lines) =
        common::read_until(&mut child, |line| line.contains("guest(s) reconciling"));
    if printed
        .last()
        .is_some_and(|line| line.contains("guest(s) reconciling"))
    {
        // What follows is read and dropped: krec dev never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        return child;
    }
    let status = child.wait();
    panic!(
        "npm run dev ended ({status:?}) before its guests reconciled:\n{}",
        printed.join("\n")
    );
}

#[test]
fn krec_new_python_should_make_a_guest_that_builds_tests_and_runs() {
    scripted_guest_journey("python", "py-guest");
}

#[test]
fn krec_new_typescript_should_make_a_guest_that_builds_tests_and_runs() {
    scripted_guest_journey("typescript", "ts-guest");
}

#[test]
fn krec_new_go_should_make_a_guest_that_builds_tests_and_runs() {
    scripted_guest_journey("go", "go-guest");
}

#[test]
fn krec_new_webhook_only_should_make_a_guest_that_only_judges() {
    guest_journey("go", "go-judge", "--webhook-only");
}

#[test]
fn dev_from_cluster_should_run_a_reconciler_kubectl_applies_and_show_its_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("no-manifests");
    std::fs::create_dir(&empty).expect("mkdir");
    let kubeconfig = dir.path().join("kc.yaml");
    let cache = dir.path().join("kubectl-cache");
    let kubectl = common::Kubectl::new(&kubeconfig, &cache);
    let modules = repo().join("target/wasm32-wasip2/release");
    common::module("pod_counter.wasm");
    let (mut child, printed, _lines) = common::spawn_until(
        [
            "dev".as_ref(),
            "--manifests".as_ref(),
            empty.as_os_str(),
            "--apply".as_ref(),
            repo()
                .join("sample-guests/pod-counter/examples")
                .as_os_str(),
            "--from-cluster".as_ref(),
            "--module-dir".as_ref(),
            modules.as_os_str(),
            "--kubeconfig-out".as_ref(),
            kubeconfig.as_os_str(),
            "--admin-addr".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--no-module-cache".as_ref(),
        ],
        |line| line.contains("reconciling"),
    );
    assert!(
        printed.join("\n").contains("0 guest(s) reconciling"),
        "{printed:?}"
    );
    // The sample's manifest as an object, its module named inside --module-dir.
    let sample = std::fs::read_to_string(repo().join("sample-guests/pod-counter/manifest.yaml"))
        .expect("manifest");
    let object: String = sample
        .lines()
        .map(|line| match line.strip_prefix("  module: ") {
            Some(_) => "  module: pod_counter.wasm\n".to_owned(),
            None => format!("{line}\n"),
        })
        .collect();
    let file = dir.path().join("pod-counter.yaml");
    std::fs::write(&file, object).expect("write");
    let file = file.display().to_string();
    let (ok, out, err) = kubectl.run(["apply", "-f", &file]);
    assert!(ok, "{out}{err}");
    assert_eq!(out.trim(), "reconciler.krec.dev/pod-counter created");
    let (ok, out, err) = kubectl.run([
        "wait",
        "--for=condition=Ready",
        "reconciler/pod-counter",
        "--timeout=60s",
    ]);
    assert!(ok, "{out}{err}");
    assert_eq!(out.trim(), "reconciler.krec.dev/pod-counter condition met");
    kubectl.until(
        &[
            "get",
            "replicaset",
            "web",
            "-o",
            "jsonpath={.metadata.labels.pod-count}",
        ],
        |out| out == "3",
    );
    let listed = kubectl.until(&["get", "rec"], |out| out.contains("Running"));
    let header: Vec<&str> = listed
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "READY", "REASON", "REPLICA", "MODULE", "AGE"],
        "{listed}"
    );
    assert!(listed.contains("pod-counter   True    Running"), "{listed}");

    // A spec the host refuses: Degraded, with the error, in status and Events; the old version
    // keeps running.
    let (ok, out, err) = kubectl.run([
        "patch",
        "rec",
        "pod-counter",
        "--type=merge",
        "-p",
        r#"{"spec":{"limits":{"timeout":"5 parsecs"}}}"#,
    ]);
    assert!(ok, "{out}{err}");
    kubectl.until(
        &[
            "get",
            "rec",
            "pod-counter",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Degraded")].reason}"#,
        ],
        |out| out == "NewVersionRefused",
    );
    let events = kubectl.until(
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=pod-counter",
        ],
        |out| out.contains("NewVersionRefused"),
    );
    assert!(
        events.contains("Reconciler default/pod-counter: spec.limits.timeout: invalid duration"),
        "{events}"
    );
    let (ok, described, err) = kubectl.run(["describe", "rec", "pod-counter"]);
    assert!(ok, "{err}");
    for expected in ["Type:", "Ready", "Running", "NewVersionRefused", "Started"] {
        assert!(described.contains(expected), "{expected}: {described}");
    }

    // Deleted: the guest stops (its ReplicaSet label is no longer kept up).
    let (ok, out, err) = kubectl.run(["delete", "rec", "pod-counter"]);
    assert!(ok, "{out}{err}");
    let (ok, out, _) = kubectl.run(["get", "rec", "-o", "name"]);
    assert!(ok && out.is_empty(), "{out}");
    assert!(stop(&mut child, "-INT").success());
}

/// The address `krec dev` printed for its admin server.
fn admin_addr(printed: &str) -> String {
    printed
        .lines()
        .find_map(|l| l.split("admin server at ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the admin server's address printed")
        .to_owned()
}

#[test]
fn record_replay_and_a_shadow_should_work_from_the_command_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).expect("mkdir");
    common::place_manifest(&manifests, "pod-counter");
    common::place_manifest(&manifests, "foo-controller");
    let foo_plus = common::module("foo_plus.wasm");
    let foo_manifest = manifests.join("foo-controller.yaml");
    let mut text = std::fs::read_to_string(&foo_manifest).expect("read");
    text.push_str(&format!(
        "  rollout:\n    candidate: {}\n",
        foo_plus.display()
    ));
    std::fs::write(&foo_manifest, text).expect("write");
    for example in [
        "pod-counter/examples/replicaset.yaml",
        "foo-controller/crd/foo-crd.yaml",
        "foo-controller/crd/example-foo.yaml",
    ] {
        let from = repo().join("sample-guests").join(example);
        let to = manifests.join(from.file_name().expect("name"));
        std::fs::copy(&from, &to).expect("copy example");
    }
    let kubeconfig = dir.path().join("kc.yaml");
    let kubectl = common::Kubectl::new(&kubeconfig, &dir.path().join("kubectl-cache"));
    let (mut child, printed, _lines) = start_dev(&manifests, &kubeconfig);
    let admin = admin_addr(&printed);
    kubectl.until(
        &[
            "get",
            "replicaset",
            "web",
            "-o",
            "jsonpath={.metadata.labels.pod-count}",
        ],
        |out| out == "3",
    );

    // Record pod-counter while the ReplicaSet scales.
    let recording = dir.path().join("pod-counter.jsonl");
    let recorder = std::process::Command::new(env!("CARGO_BIN_EXE_krec"))
        .args([
            "record",
            "pod-counter",
            "--seconds",
            "6",
            "--admin",
            &admin,
            "-o",
        ])
        .arg(&recording)
        .env("RUST_LOG", "off")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("krec record");
    std::thread::sleep(std::time::Duration::from_millis(500));
    for (replicas, count) in [("5", "5"), ("2", "2")] {
        let (ok, out, err) = kubectl.run(["scale", "replicaset", "web", "--replicas", replicas]);
        assert!(ok, "{out}{err}");
        kubectl.until(
            &[
                "get",
                "replicaset",
                "web",
                "-o",
                "jsonpath={.metadata.labels.pod-count}",
            ],
            |out| out == count,
        );
    }
    let recorded = recorder.wait_with_output().expect("krec record ends");
    let said = String::from_utf8_lossy(&recorded.stdout);
    assert!(recorded.status.success(), "{said}");
    assert!(said.contains("time is up"), "{said}");

    // The shadow: the candidate (replicas + 1) never writes; its divergence names the field.
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
    kubectl.until(
        &[
            "get",
            "deployment",
            "example-foo",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
        |out| out == "3",
    );
    let mut diff = String::new();
    common::wait_until(
        "krec diff shows the divergence",
        std::time::Duration::from_secs(30),
        || {
            let (ok, out, err) = common::krec(["diff", "foo-controller", "--admin", &admin]);
            assert!(ok, "{out}{err}");
            diff = out;
            diff.contains("spec.replicas: 3 → 4")
        },
    );
    assert!(diff.contains("Shadowing"), "{diff}");
    let (ok, out, err) = common::krec(["diff", "foo-controller", "--admin", &admin, "--abort"]);
    assert!(ok && out.contains("aborted"), "{out}{err}");
    let (_, out, _) = common::krec(["diff", "foo-controller", "--admin", &admin]);
    assert!(out.contains("RolledBack"), "{out}");
    // Decided: promoting now says why not and how to try again; `--retry` does.
    let (ok, out, err) = common::krec(["diff", "foo-controller", "--admin", &admin, "--promote"]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("RolledBack (aborted by hand)") && err.contains("krec diff --retry"),
        "{err}"
    );
    let (ok, out, err) = common::krec(["diff", "foo-controller", "--admin", &admin, "--retry"]);
    assert!(ok && out.contains("tried again"), "{out}{err}");
    let (_, out, _) = common::krec(["diff", "foo-controller", "--admin", &admin]);
    assert!(out.contains("Shadowing"), "{out}");
    let (ok, out, err) = common::krec(["diff", "foo-controller", "--admin", &admin, "--abort"]);
    assert!(ok && out.contains("aborted"), "{out}{err}");
    let (_, out, _) = kubectl.run([
        "get",
        "deployment",
        "example-foo",
        "-o",
        "jsonpath={.spec.replicas}",
    ]);
    assert_eq!(out, "3", "the candidate's writes were dry runs");
    let exit = stop(&mut child, "-INT");
    assert!(exit.success(), "exit status {exit:?}");

    // Replayed with no cluster: the same module does the same; a changed one does not.
    let recording = recording.display().to_string();
    let same = common::module("pod_counter.wasm").display().to_string();
    let (ok, out, err) = common::krec(["replay", &recording, "--module", &same]);
    assert!(ok, "{out}{err}");
    assert!(out.contains(" 0 diverged"), "{out}");
    let replayed: usize = out
        .split("replayed ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!(replayed >= 2, "{out}");
    let changed = common::module("pod_counter_plus.wasm")
        .display()
        .to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_krec"))
        .args(["replay", &recording, "--module", &changed])
        .env("RUST_LOG", "off")
        .env("XDG_CACHE_HOME", common::test_cache_home())
        .output()
        .expect("krec replay");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("metadata.labels.pod-count"), "{text}");
}
