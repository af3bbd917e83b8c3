//! `krec check`: one clear line naming the file and the problem, and a non-zero exit, for every
//! kind of bad module or manifest.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn krec_check(paths: &[&Path]) -> (bool, String, String) {
    let mut args = vec![std::ffi::OsStr::new("check")];
    args.extend(paths.iter().map(|p| p.as_os_str()));
    common::krec(args)
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write fixture");
    path
}

fn one_bad_line(path: &Path, expected: &str) {
    let (ok, stdout, stderr) = krec_check(&[path]);
    assert!(!ok, "krec check must fail for {}", path.display());
    assert!(stdout.is_empty(), "{stdout}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one line: {stderr}");
    assert!(
        lines[0].starts_with(&path.display().to_string()),
        "names the file: {stderr}"
    );
    assert!(
        lines[0].contains(expected),
        "expected {expected:?} in {stderr}"
    );
}

#[test]
fn check_should_reject_a_core_module() {
    let dir = tempfile::tempdir().expect("tempdir");
    let core = wat::parse_str("(module (func (export \"reconcile\")))").expect("wat");
    one_bad_line(
        &write(dir.path(), "core.wasm", &core),
        "is a core WebAssembly module, not a component",
    );
}

#[test]
fn check_should_reject_a_component_of_another_world() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Exports `reconcile`, but as `func()` rather than `func(req: request) -> result<...>`.
    let other = wat::parse_str(
        r#"(component
             (core module $m (func (export "f")))
             (core instance $i (instantiate $m))
             (func (export "reconcile") (canon lift (core func $i "f"))))"#,
    )
    .expect("wat");
    one_bad_line(
        &write(dir.path(), "other.wasm", &other),
        "does not implement the krec:reconciler@0.1 reconciler world",
    );
    let empty = wat::parse_str("(component)").expect("wat");
    one_bad_line(
        &write(dir.path(), "empty.wasm", &empty),
        "does not implement the krec:reconciler@0.1 reconciler world",
    );
    let wrong_import = wat::parse_str(
        r#"(component (import "example:other/api" (instance (export "f" (func)))))"#,
    )
    .expect("wat");
    one_bad_line(
        &write(dir.path(), "import.wasm", &wrong_import),
        "example:other/api",
    );
}

#[test]
fn check_should_reject_a_truncated_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let component = wat::parse_str(
        r#"(component (core module $m (func (export "f"))) (core instance $i (instantiate $m)))"#,
    )
    .expect("wat");
    let truncated = &component[..component.len() - 5];
    one_bad_line(
        &write(dir.path(), "truncated.wasm", truncated),
        "invalid component",
    );
    one_bad_line(
        &write(dir.path(), "text.wasm", b"hello"),
        "is not a WebAssembly component",
    );
    one_bad_line(&dir.path().join("missing.wasm"), "cannot read module");
}

#[test]
fn check_should_name_the_manifest_field_at_fault() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = write(
        dir.path(),
        "bad.yaml",
        b"apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: bad}\nspec:\n  module: x.wasm\n  for: {apiVersion: v1, kind: Pod}\n  limits: {memory: lots}\n",
    );
    one_bad_line(&manifest, "spec.limits.memory: invalid quantity \"lots\"");
    let missing_module = write(
        dir.path(),
        "missing.yaml",
        b"apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: lost}\nspec: {module: nowhere.wasm, for: {apiVersion: v1, kind: Pod}}\n",
    );
    one_bad_line(&missing_module, "guest lost");
}

#[test]
fn check_should_refuse_modules_and_manifests_that_are_not_regular_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Read forever before: a device, then a FIFO with no writer (which blocked the open).
    let zero = write(
        dir.path(),
        "zero.yaml",
        b"apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: zero}\nspec: {module: /dev/zero, for: {apiVersion: v1, kind: Pod}}\n",
    );
    one_bad_line(&zero, "/dev/zero: cannot read module: not a regular file");
    let fifo = dir.path().join("fifo.wasm");
    let status = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(status.success());
    let piped = write(
        dir.path(),
        "piped.yaml",
        b"apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: piped}\nspec: {module: fifo.wasm, for: {apiVersion: v1, kind: Pod}}\n",
    );
    one_bad_line(&piped, "cannot read module: not a regular file");
    let manifest_fifo = dir.path().join("manifest-fifo.yaml");
    let status = Command::new("mkfifo")
        .arg(&manifest_fifo)
        .status()
        .expect("mkfifo");
    assert!(status.success());
    one_bad_line(&manifest_fifo, "not a regular file");
}

#[test]
fn check_should_refuse_numbers_beyond_their_bounds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let huge = write(
        dir.path(),
        "huge.yaml",
        b"apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: huge}\nspec: {module: x.wasm, for: {apiVersion: v1, kind: Pod}, maxConcurrentReconciles: 4000000000}\n",
    );
    one_bad_line(
        &huge,
        "spec.maxConcurrentReconciles: must be between 1 and 256",
    );
}

#[test]
fn check_should_accept_the_sample_guests() {
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-guests");
    let wasm = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/wasm32-wasip2/release/pod_counter.wasm");
    assert!(
        wasm.exists(),
        "{} is missing: run `make guests` first",
        wasm.display()
    );
    let (ok, stdout, stderr) = krec_check(&[&samples, &wasm]);
    assert!(ok, "{stderr}");
    for guest in [
        "pod-counter",
        "foo-controller",
        "configmap-watcher",
        "cleanup-ticker",
    ] {
        assert!(
            stdout.contains(&format!("ok, guest {guest} (sha256:")),
            "{stdout}"
        );
    }
    assert!(
        stdout.contains(
            "pod_counter.wasm: ok, a krec:reconciler@0.1 component: reconciler and admission webhooks"
        ),
        "{stdout}"
    );
}

#[test]
fn check_should_report_every_manifest_of_a_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wasm = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/wasm32-wasip2/release/pod_counter.wasm");
    assert!(
        wasm.exists(),
        "{} is missing: run `make guests` first",
        wasm.display()
    );
    let good = format!(
        "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: good}}\nspec: {{module: {:?}, for: {{apiVersion: apps/v1, kind: ReplicaSet}}}}\n",
        wasm.display()
    );
    write(dir.path(), "a-good.yaml", good.as_bytes());
    write(dir.path(), "b-typo.yaml", b"apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: typo}\nspec: {modul: x.wasm}\n");
    write(dir.path(), "c-broken.yaml", b"kind: [unclosed\n");
    write(
        dir.path(),
        "d-crd.yaml",
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: not-a-guest}\n",
    );
    write(
        dir.path(),
        "e-dup.yaml",
        good.replace("a-good", "x").as_bytes(),
    );
    let (ok, stdout, stderr) = krec_check(&[dir.path()]);
    assert!(!ok, "bad manifests make the check fail");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.contains("a-good.yaml: ok, guest good"), "{stdout}");
    let errors: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        errors.len(),
        3,
        "one line per bad file, the ConfigMap skipped: {stderr}"
    );
    assert!(
        errors[0].contains("b-typo.yaml: spec.modul: unknown field `modul`"),
        "{stderr}"
    );
    assert!(errors[1].contains("c-broken.yaml"), "{stderr}");
    assert!(
        errors[2].contains("e-dup.yaml: guest \"good\" is already defined by"),
        "{stderr}"
    );
}

/// A component built against WIT 0.1.0 (before the admission world) still loads as a reconciler,
/// and a guest that declares webhooks with it is refused, naming what to do.
#[test]
fn check_should_accept_a_wit_0_1_0_reconciler_and_refuse_it_as_a_webhook() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/readme-example-wit-0.1.0.wasm");
    let (ok, stdout, stderr) = krec_check(&[&fixture]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains(
            "ok, a krec:reconciler@0.1 component: reconciler (WIT 0.1.0: no admission exports)"
        ),
        "{stdout}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = format!(
        "apiVersion: krec.dev/v1alpha1
kind: Reconciler
metadata: {{ name: old-webhook }}
spec:
  module: {}
  webhooks:
    - type: validating
      rules: [ {{ apiGroups: [''], apiVersions: [v1], resources: [configmaps], operations: [CREATE] }} ]
",
        fixture.display()
    );
    let path = write(dir.path(), "manifest.yaml", manifest.as_bytes());
    let (ok, _, stderr) = krec_check(&[&path]);
    assert!(!ok);
    assert!(
        stderr.contains("does not implement the krec:reconciler@0.1 admission world")
            && stderr.contains("declares webhooks or a conversion but its component exports no validate/mutate/convert"),
        "{stderr}"
    );
}

#[test]
fn check_should_start_the_guest_and_report_a_configuration_it_refuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wasm = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/wasm32-wasip2/release/namespace_labeller.wasm");
    assert!(
        wasm.exists(),
        "{} is missing: run `make guests` first",
        wasm.display()
    );
    let manifest = |annotation: &str| {
        format!(
            "apiVersion: krec.dev/v1alpha1
kind: Reconciler
metadata: {{ name: labeller }}
spec:
  module: {}
  for: {{ apiVersion: v1, kind: Namespace }}
  watches: [ {{ apiVersion: apps/v1, kind: Deployment, mapByGuest: true }} ]
  config: {{ annotation: {annotation}, frozenLabel: example.com/frozen }}
  permissions:
    - {{ apiVersion: v1, kind: Namespace, verbs: [get, list, watch, patch] }}
    - {{ apiVersion: apps/v1, kind: Deployment, verbs: [get, list, watch] }}
",
            wasm.display()
        )
    };
    // No configSchema: only the guest's own `from_config` (run by `init`) can refuse it.
    let bad = write(dir.path(), "bad.yaml", manifest("plain").as_bytes());
    one_bad_line(
        &bad,
        "guest labeller refused its configuration: spec.config: invalid: annotation: \"plain\" needs a prefix",
    );
    let good = write(
        dir.path(),
        "good.yaml",
        manifest("example.com/n").as_bytes(),
    );
    let (ok, stdout, stderr) = krec_check(&[&good]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("good.yaml: ok, guest labeller"), "{stdout}");
}

/// The `.cwasm` entries of the module cache in `cache`, with when each was written.
fn cache_entries(cache: &Path) -> Vec<(PathBuf, std::time::SystemTime)> {
    let mut entries: Vec<_> = std::fs::read_dir(cache)
        .expect("the module cache exists")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .map(|p| {
            let written = p.metadata().and_then(|m| m.modified()).expect("mtime");
            (p, written)
        })
        .collect();
    entries.sort();
    entries
}

#[test]
fn check_then_dev_and_two_replays_should_compile_a_module_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("modules");
    let guests = dir.path().join("guests");
    std::fs::create_dir(&guests).expect("guests dir");
    let module = common::module("cleanup_ticker.wasm");
    let manifest = write(
        &guests,
        "ticker.yaml",
        format!(
            "apiVersion: krec.dev/v1alpha1
kind: Reconciler
metadata: {{name: ticker}}
spec:
  module: {}
  tickers: [{{every: 1h, request: {{name: tick}}}}]
  permissions:
    - {{apiVersion: v1, kind: ConfigMap, verbs: [get, list, watch, delete]}}
",
            module.display()
        )
        .as_bytes(),
    );
    let cache_arg = cache.display().to_string();
    let manifest_arg = manifest.display().to_string();
    let (ok, out, err) = common::krec(["check", &manifest_arg, "--module-cache", &cache_arg]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("; compiled in "),
        "the first load compiles: {out}"
    );
    let compiled = cache_entries(&cache);
    assert_eq!(compiled.len(), 1, "one module, one entry: {compiled:?}");

    // `krec dev` on the same cache starts the guest from the entry `krec check` wrote.
    let kubeconfig = dir.path().join("kc.yaml");
    let (mut child, printed, _) = common::spawn_until(
        [
            "dev".as_ref(),
            "--manifests".as_ref(),
            guests.as_os_str(),
            "--kubeconfig-out".as_ref(),
            kubeconfig.as_os_str(),
            "--admin-addr".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--module-cache".as_ref(),
            cache.as_os_str(),
        ],
        |line| line.contains("reconciling"),
    );
    let exit = common::stop(&mut child, "-INT");
    assert!(exit.success(), "{exit:?}");
    assert!(
        printed
            .join("\n")
            .contains("1 guest(s) reconciling (ticker)"),
        "{printed:?}"
    );
    assert_eq!(cache_entries(&cache), compiled, "not compiled again by dev");

    // Two replays (of a recording with no reconciles) load it too.
    let recording = write(
        dir.path(),
        "ticker.jsonl",
        br#"{"header":{"recording":"krec.dev/recording/v1","guest":"ticker","module":"m","digest":"sha256:0","startedMs":0}}
"#,
    );
    let recording_arg = recording.display().to_string();
    let module_arg = module.display().to_string();
    for _ in 0..2 {
        let (ok, out, err) = common::krec([
            "replay",
            &recording_arg,
            "--module",
            &module_arg,
            "--module-cache",
            &cache_arg,
        ]);
        assert!(ok, "{out}{err}");
        assert!(out.contains("; from the module cache)"), "{out}");
    }
    let (ok, out, err) = common::krec(["check", &manifest_arg, "--module-cache", &cache_arg]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("; from the module cache)"), "{out}");
    assert_eq!(cache_entries(&cache), compiled, "compiled once in all");
}
