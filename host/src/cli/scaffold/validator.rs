//! `krec new --webhook-only`: a guest that only judges — one validating webhook, no reconciler,
//! no configuration — in any language. The project is the language's template (build files, SDK,
//! example) with the guest's code, its tests, its manifest and its README replaced.

use super::{Known, Lang, NewGuest, api_version, example_fixture, example_literal, go_package};

/// The message the template's webhook refuses a frozen object with.
const FROZEN: &str = "metadata.annotations[example.com/frozen]: this object is frozen";

/// Replace the reconciler template's files in `files` with the validator's.
pub(super) fn replace_files(new: &NewGuest, kind: &Known, files: &mut Vec<(&'static str, String)>) {
    let replaced: Vec<(&'static str, String)> = match new.lang {
        Lang::Rust => rust(new, kind),
        Lang::Python => python(new, kind),
        Lang::TypeScript => typescript(new, kind),
        Lang::Go => go(new, kind),
    };
    for (path, text) in replaced {
        match files.iter_mut().find(|(p, _)| *p == path) {
            Some(file) => file.1 = text,
            None => files.push((path, text)),
        }
    }
    // The module, what builds it and the memory limit: the language template's.
    if let Some(file) = files.iter_mut().find(|(p, _)| *p == "manifest.yaml") {
        let line = |prefix: &str| {
            file.1
                .lines()
                .find_map(|l| l.trim_start().strip_prefix(prefix).map(str::to_owned))
                .unwrap_or_default()
        };
        let built_by = file
            .1
            .lines()
            .find_map(|l| {
                l.trim_start()
                    .strip_prefix("# ")?
                    .strip_suffix(" builds it here.")
            })
            .unwrap_or("its build")
            .to_owned();
        let module = line("module: ");
        let memory = line("limits: ");
        let memory = memory
            .split_once("memory: ")
            .map_or("128Mi", |(_, m)| m.trim_end_matches([' ', '}']));
        file.1 = manifest(new, kind, &module, &built_by, memory);
    }
    // The README: what the guest is, and the language template's commands.
    let (language, source) = match new.lang {
        Lang::Rust => ("", "src/lib.rs"),
        Lang::Python => (" in Python", "app.py"),
        Lang::TypeScript => (" in TypeScript", "src/app.ts"),
        Lang::Go => (" in Go", "main.go"),
    };
    if let Some(file) = files.iter_mut().find(|(p, _)| *p == "README.md") {
        let commands = file
            .1
            .split_once("```sh\n")
            .and_then(|(_, rest)| rest.split_once("```"))
            .map(|(block, _)| block.replace("reconciling live", "judging what is applied"))
            .unwrap_or_default();
        file.1 = format!(
            "# {name}\n\nA krec guest{language} judging `{api_version} {ty}` with a validating webhook, made by `krec new --webhook-only`.\n\n```sh\n{commands}```\n\n`{source}` is the webhook, `manifest.yaml` which requests reach it.\n",
            name = new.name,
            api_version = api_version(kind),
            ty = kind.kind,
        );
    }
}

/// The manifest: one validating webhook for creates and updates of `kind`.
fn manifest(new: &NewGuest, kind: &Known, module: &str, built_by: &str, memory: &str) -> String {
    format!(
        r#"# {name}: which requests its webhook judges, and its limits.
apiVersion: krec.dev/v1alpha1
kind: Reconciler
metadata:
  name: {name}
spec:
  # {built_by} builds it here.
  module: {module}
  webhooks:
    - type: validating
      rules:
        - {{ apiGroups: ["{group}"], apiVersions: [{version}], resources: [{plural}], operations: [CREATE, UPDATE] }}
      failurePolicy: Fail
  limits: {{ timeout: 5s, memory: {memory} }}
"#,
        name = new.name,
        group = kind.group,
        version = kind.version,
        plural = kind.plural,
    )
}

fn rust(new: &NewGuest, kind: &Known) -> Vec<(&'static str, String)> {
    let (name, ty) = (&new.name, kind.kind);
    let namespace_field = if kind.namespaced {
        "\n    object.metadata.namespace = Some(\"default\".into());"
    } else {
        ""
    };
    let fixture = example_fixture(kind);
    let lib = format!(
        r##"//! {name}: a krec guest judging {api_version} {ty} with a validating webhook.
//!
//! It refuses a {ty} with the annotation `example.com/frozen: "true"`. Replace `validate` with
//! your rules; the unit tests below run it on a fake cluster, `tests/integration.rs` in the real
//! host.

use krec_guest::k8s_openapi::api::{rust};
use krec_guest::prelude::*;
use krec_guest::{{AdmissionRequest, Validator, Verdict}};

{guard}
export!(validator: Guard);

#[cfg(test)]
mod tests {{
    use super::*;
    use krec_guest::testing::FakeCluster;{guard_test}
}}
"##,
        api_version = api_version(kind),
        rust = kind.rust,
        guard = rust_guard(ty),
        guard_test = rust_guard_test(kind),
    );
    let krate = name.replace('-', "_");
    let integration = format!(
        r#"//! The guest's built `.wasm` in the real krec host, against krec's embedded API server:
//! run `cargo build-guest` first (it builds `target/wasm32-wasip2/release/{krate}.wasm`).

use krec_guest::k8s_openapi::api::{rust};
use krec_guest::testing::TestCluster;

/// The webhook, registered by the host with the cluster, judges what the cluster is asked to
/// create — as `kubectl apply` would see.
#[test]
fn the_webhook_should_judge_what_the_cluster_is_asked_to_create() {{
    use krec_guest::ResourceExt as _;
    use krec_guest::k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let dir = env!("CARGO_MANIFEST_DIR");
    let module = format!("{{dir}}/target/wasm32-wasip2/release/{krate}.wasm");
    assert!(
        std::path::Path::new(&module).exists(),
        "{{module}} is missing: run `cargo build-guest` first"
    );
    let cluster = TestCluster::start().expect("the embedded API server");
    cluster.run_guests(format!("{{dir}}/manifest.yaml")).expect("the krec host");
    let example = |name: &str| {{
        let mut object = {ty}::default();
        object.metadata.name = Some(name.into());{namespace_field}
        {fixture}
        object
    }};
    // The host registers the webhook once its guest runs; the API server asks it from then.
    cluster.eventually("the host to register the webhook", || {{
        cluster.objects().get::<ValidatingWebhookConfiguration>(None, "krec-{name}")
    }});
    let mut attempt = 0;
    let refused = cluster.eventually("the guard to refuse a frozen object", || {{
        attempt += 1;
        let mut frozen = example(&format!("frozen-{{attempt}}"));
        frozen.annotations_mut().insert("example.com/frozen".into(), "true".into());
        cluster.create(&frozen).err()
    }});
    assert!(refused.to_string().contains("this object is frozen"), "{{refused}}");
    cluster.create(&example("admitted")).expect("admitted");
}}
"#,
        rust = kind.rust,
    );
    vec![("src/lib.rs", lib), ("tests/integration.rs", integration)]
}

fn python(new: &NewGuest, kind: &Known) -> Vec<(&'static str, String)> {
    let (name, ty) = (&new.name, kind.kind);
    let app = format!(
        r#""""{name}: a krec guest judging {api_version} {ty} with a validating webhook.

It refuses a {ty} with the annotation ``example.com/frozen: "true"``. Replace ``validate`` with
your rules; ``tests/test_app.py`` runs it on a fake cluster.
"""

from krec_guest import AdmissionRequest, Context, Validator, Verdict, export


{guard}

WitWorld = export(validator=Guard)
"#,
        api_version = api_version(kind),
        guard = python_guard(ty),
    );
    let tests = format!(
        r#"from app import Guard
from krec_guest import AdmissionRequest
from krec_guest.testing import FakeCluster


def example():
    return {example}


{guard_test}
"#,
        example = example_literal(kind, true),
        guard_test = python_guard_test(),
    );
    vec![("app.py", app), ("tests/test_app.py", tests)]
}

fn typescript(new: &NewGuest, kind: &Known) -> Vec<(&'static str, String)> {
    let (name, ty) = (&new.name, kind.kind);
    let app = format!(
        r#"/**
 * {name}: a krec guest judging {api_version} {ty} with a validating webhook.
 *
 * It refuses a {ty} with the annotation `example.com/frozen: "true"`. Replace `validate` with
 * your rules; `test/app.test.ts` runs it on a fake cluster.
 */

import {{ AdmissionRequest, Context, guest, Validator, Verdict }} from "@krec/guest";

{guard}
export default guest({{ validator: Guard }});
"#,
        api_version = api_version(kind),
        guard = typescript_guard(ty),
    );
    let tests = format!(
        r#"import assert from "node:assert/strict";
import {{ test }} from "node:test";

import {{ AdmissionRequest, type KObject }} from "@krec/guest";
import {{ FakeCluster }} from "@krec/guest/testing";

import {{ Guard }} from "../src/app.js";

function example(): KObject {{
  return {example};
}}

{guard_test}
"#,
        example = example_literal(kind, false),
        guard_test = typescript_guard_test(),
    );
    vec![("src/app.ts", app), ("test/app.test.ts", tests)]
}

fn go(new: &NewGuest, kind: &Known) -> Vec<(&'static str, String)> {
    let (name, ty) = (&new.name, kind.kind);
    let (alias, import) = go_package(kind);
    let main = format!(
        r#"// {name}: a krec guest judging {api_version} {ty} with a validating webhook, in
// controller-runtime's shape (admission.CustomValidator).
//
// It refuses a {ty} with the annotation `example.com/frozen: "true"`. Replace judge with your
// rules; main_test.go tests it.
package main

import (
	"context"
	"fmt"

	{alias} "{import}"
	"k8s.io/apimachinery/pkg/runtime"

	"krec.dev/guest"
	"krec.dev/guest/webhook/admission"
)

{guard}

// The host instantiates the guest (running init), then sends it admission reviews.
func init() {{
	guest.Validator(&{alias}.{ty}{{}}, Guard{{}})
}}

func main() {{}}
"#,
        api_version = api_version(kind),
        guard = go_guard(&alias, ty),
    );
    let tests = format!(
        r#"package main

import (
	"context"
	"testing"

	{alias} "{import}"
)

{guard_test}
"#,
        guard_test = go_guard_test(&alias, ty),
    );
    vec![("main.go", main), ("main_test.go", tests)]
}

/// Rust: the validating webhook `Guard` (after its imports: `AdmissionRequest`, `Validator`,
/// `Verdict`).
pub(super) fn rust_guard(ty: &str) -> String {
    format!(
        r#"
/// The validating webhook: refuses a {ty} with the annotation `example.com/frozen: "true"`.
#[derive(Default)]
struct Guard;

impl Validator for Guard {{
    type Object = {ty};

    fn validate(&self, req: &AdmissionRequest<{ty}>, _ctx: &Context) -> Verdict {{
        let Some(object) = &req.object else {{
            return Verdict::allow();
        }};
        if object.annotations().get("example.com/frozen").map(String::as_str) == Some("true") {{
            return Verdict::deny("{FROZEN}");
        }}
        Verdict::allow()
    }}
}}
"#
    )
}

/// Rust, in the tests module: an `example()` of `kind` and `Guard`'s unit test.
pub(super) fn rust_guard_test(kind: &Known) -> String {
    let ty = kind.kind;
    let namespace_field = if kind.namespaced {
        "\n        object.metadata.namespace = Some(\"default\".into());"
    } else {
        ""
    };
    format!(
        r#"

    fn example() -> {ty} {{
        let mut object = {ty}::default();
        object.metadata.name = Some("example".into());{namespace_field}
        {fixture}
        object
    }}

    #[test]
    fn the_guard_should_refuse_a_frozen_object_and_admit_others() {{
        let cluster = FakeCluster::new();
        assert!(cluster.validate(&Guard, &AdmissionRequest::create(example())).allowed);
        let mut frozen = example();
        frozen.annotations_mut().insert("example.com/frozen".into(), "true".into());
        let verdict = cluster.validate(&Guard, &AdmissionRequest::update(example(), frozen));
        assert!(!verdict.allowed);
        assert_eq!(verdict.message.as_deref(), Some("{FROZEN}"));
    }}"#,
        fixture = example_fixture(kind),
    )
}

/// Python: the validating webhook `Guard` (with `AdmissionRequest`, `Context`, `Validator` and
/// `Verdict` imported).
pub(super) fn python_guard(ty: &str) -> String {
    format!(
        r#"class Guard(Validator):
    """The validating webhook: refuses a {ty} with the annotation ``example.com/frozen: "true"``."""

    def validate(self, req: AdmissionRequest, ctx: Context) -> Verdict:
        obj = req.object
        if obj and (obj["metadata"].get("annotations") or {{}}).get("example.com/frozen") == "true":
            return Verdict.deny("{FROZEN}")
        return Verdict.allow()
"#
    )
}

/// Python: `Guard`'s unit test (`example()` defined beside it).
pub(super) fn python_guard_test() -> String {
    format!(
        r#"def test_the_guard_should_refuse_a_frozen_object_and_admit_others():
    cluster = FakeCluster()
    assert cluster.validate(Guard(), AdmissionRequest.create(example())).allowed
    frozen = example()
    frozen["metadata"]["annotations"] = {{"example.com/frozen": "true"}}
    verdict = cluster.validate(Guard(), AdmissionRequest.update(example(), frozen))
    assert not verdict.allowed
    assert verdict.message == "{FROZEN}""#
    )
}

/// TypeScript: the validating webhook `Guard`.
pub(super) fn typescript_guard(ty: &str) -> String {
    format!(
        r#"/** The validating webhook: refuses a {ty} with the annotation `example.com/frozen: "true"`. */
export class Guard implements Validator {{
  validate(req: AdmissionRequest, _ctx: Context): Verdict {{
    if (req.object?.metadata.annotations?.["example.com/frozen"] === "true") {{
      return Verdict.deny("{FROZEN}");
    }}
    return Verdict.allow();
  }}
}}
"#
    )
}

/// TypeScript: `Guard`'s unit test (`example()` defined beside it).
pub(super) fn typescript_guard_test() -> String {
    format!(
        r#"test("the guard should refuse a frozen object and admit others", () => {{
  const cluster = new FakeCluster();
  assert.ok(cluster.validate(new Guard(), AdmissionRequest.create(example())).allowed);
  const frozen = example();
  frozen.metadata.annotations = {{ "example.com/frozen": "true" }};
  const verdict = cluster.validate(new Guard(), AdmissionRequest.update(example(), frozen));
  assert.equal(verdict.allowed, false);
  assert.equal(verdict.message, "{FROZEN}");
}});"#
    )
}

/// Go: the validating webhook `Guard`, an `admission.CustomValidator` of `alias.ty`.
pub(super) fn go_guard(alias: &str, ty: &str) -> String {
    format!(
        r#"// Guard is the validating webhook: it refuses a {ty} with the annotation
// `example.com/frozen: "true"`.
type Guard struct{{}}

func (Guard) judge(obj runtime.Object) error {{
	if o, ok := obj.(*{alias}.{ty}); ok && o.Annotations["example.com/frozen"] == "true" {{
		return fmt.Errorf("{FROZEN}")
	}}
	return nil
}}

// ValidateCreate judges a new {ty}.
func (g Guard) ValidateCreate(_ context.Context, obj runtime.Object) (admission.Warnings, error) {{
	return nil, g.judge(obj)
}}

// ValidateUpdate judges a changed {ty}.
func (g Guard) ValidateUpdate(_ context.Context, _, newObj runtime.Object) (admission.Warnings, error) {{
	return nil, g.judge(newObj)
}}

// ValidateDelete lets every {ty} go.
func (Guard) ValidateDelete(context.Context, runtime.Object) (admission.Warnings, error) {{
	return nil, nil
}}"#
    )
}

/// Go: `Guard`'s unit test.
pub(super) fn go_guard_test(alias: &str, ty: &str) -> String {
    format!(
        r#"func TestTheGuardShouldRefuseAFrozenObjectAndAdmitOthers(t *testing.T) {{
	ctx := context.Background()
	obj := &{alias}.{ty}{{}}
	if _, err := (Guard{{}}).ValidateCreate(ctx, obj); err != nil {{
		t.Fatalf("refused an object that is not frozen: %v", err)
	}}
	frozen := obj.DeepCopy()
	frozen.Annotations = map[string]string{{"example.com/frozen": "true"}}
	_, err := (Guard{{}}).ValidateUpdate(ctx, obj, frozen)
	if err == nil || err.Error() != "{FROZEN}" {{
		t.Fatalf("a frozen object: %v", err)
	}}
}}"#
    )
}
