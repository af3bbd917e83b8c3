//! `krec new --lang python|typescript`: a guest project over the Python or TypeScript SDK, with
//! the same reconciler (and webhooks) as the Rust template, its manifest, an example object and
//! unit tests on the SDK's fake cluster.

use super::{Known, NewGuest, api_version, camel, example, example_literal, manifest, validator};

/// The object's namespace argument in a host call: the request's, or none.
fn namespace_arg(kind: &Known, none: &str, request: &str) -> String {
    if kind.namespaced {
        request.to_owned()
    } else {
        none.to_owned()
    }
}

/// The files of a Python guest.
pub(super) fn python_files(new: &NewGuest, kind: &Known) -> Vec<(&'static str, String)> {
    let name = &new.name;
    let module = format!("{}.wasm", name.replace('-', "_"));
    let api_version = api_version(kind);
    let ty = kind.kind;
    let reconciler = format!("{}Reconciler", camel(name));
    let namespace = namespace_arg(kind, "None", "req.namespace");
    let request = if kind.namespaced {
        r#"Request("default", "example")"#
    } else {
        r#"Request.cluster("example")"#
    };
    let (webhook_import, webhook_code, export, webhook_tests) = if new.webhook {
        (
            "\nfrom krec_guest import AdmissionRequest, Mutator, Validator, Verdict",
            format!(
                r#"

{guard}

class Defaults(Mutator):
    """The mutating webhook: labels every {ty} it admits ``example.com/defaulted: "true"``."""

    def mutate(self, req: AdmissionRequest, obj: dict, ctx: Context) -> Verdict:
        obj["metadata"].setdefault("labels", {{}})["example.com/defaulted"] = "true"
        return Verdict.allow()
"#,
                guard = validator::python_guard(ty),
            ),
            format!(
                "WitWorld = export(reconciler={reconciler}, validator=Guard, mutator=Defaults)"
            ),
            format!(
                r#"


{guard_test}


def test_defaults_should_label_what_it_admits():
    mutated = FakeCluster().mutate(Defaults(), AdmissionRequest.create(example()))
    assert mutated.verdict.allowed
    assert mutated.object["metadata"]["labels"]["example.com/defaulted"] == "true""#,
                guard_test = validator::python_guard_test(),
            ),
        )
    } else {
        (
            "",
            String::new(),
            format!("WitWorld = export(reconciler={reconciler})"),
            String::new(),
        )
    };
    let test_webhook_import = if new.webhook {
        "from app import Defaults, Guard\nfrom krec_guest import AdmissionRequest\n"
    } else {
        ""
    };
    let app = format!(
        r#""""{name}: a krec guest reconciling {api_version} {ty}.

It marks every {ty} with an annotation — the manifest's ``spec.config.annotation`` — set to the
object's generation (``0`` for a kind that has none, like ConfigMap or Secret: the mark then says
only that the guest saw it). Replace ``reconcile`` with your logic; ``tests/test_app.py`` runs it on a
fake cluster.
"""

from krec_guest import Action, Context, Kind, Reconciler, Request, export, log{webhook_import}

#: The kind this guest reconciles.
KIND = Kind("{api_version}", "{ty}")


class {reconciler}(Reconciler):
    """The reconciler, built once per instance from its settings (the manifest's spec.config)."""

    def __init__(self, config: dict | None) -> None:
        if not isinstance(config, dict) or not config.get("annotation"):
            raise ValueError("annotation: required: the annotation the reconciler writes")
        self.annotation = config["annotation"]

    def reconcile(self, req: Request, ctx: Context) -> Action:
        # The object may be gone by the time we run: nothing to do then.
        obj = ctx.get_opt(KIND, req.name, {namespace})
        if obj is None:
            return Action.done()
        generation = str(obj["metadata"].get("generation", 0))
        if (obj["metadata"].get("annotations") or {{}}).get(self.annotation) == generation:
            return Action.done()  # already in the desired state
        log.info(f"marking {{req}} at generation {{generation}}")
        patch = {{"metadata": {{"annotations": {{self.annotation: generation}}}}}}
        ctx.patch(KIND, req.name, patch, {namespace})
        return Action.done()
{webhook_code}

{export}
"#
    );
    let tests = format!(
        r#""""{name}'s unit tests: its parts on krec_guest's fake cluster, natively (no Wasm)."""

from app import KIND, {reconciler}
{test_webhook_import}from krec_guest import Action, Request
from krec_guest.testing import FakeCluster


def reconciler() -> {reconciler}:
    return {reconciler}({{"annotation": "example.com/generation"}})


def example() -> dict:
    return {example}


def test_reconcile_should_mark_the_object_once():
    cluster = FakeCluster([example()])
    assert cluster.reconcile(reconciler(), {request}) == Action.done()
    marked = cluster.object(KIND, "example"{test_ns})
    # The object's generation; 0 for a kind that has none (ConfigMap, Secret): then it marks "seen".
    assert marked["metadata"]["annotations"]["example.com/generation"] == str(marked["metadata"].get("generation", 0))
    assert len(cluster.writes) == 1

    # Reconciling again changes nothing: reconciles are idempotent.
    assert cluster.reconcile(reconciler(), {request}) == Action.done()
    assert len(cluster.writes) == 1


def test_a_gone_object_should_be_done():
    assert FakeCluster().reconcile(reconciler(), {request}) == Action.done()


def test_a_configuration_without_the_annotation_should_be_refused():
    try:
        {reconciler}({{}})
    except ValueError as err:
        assert "annotation" in str(err)
    else:
        raise AssertionError("accepted a configuration without the annotation")
{webhook_tests}
"#,
        example = example_literal(kind, true),
        test_ns = if kind.namespaced {
            r#", "default""#
        } else {
            ""
        },
    );
    let sdk = new.sdk_path.as_ref().map_or_else(
        || "krec-guest".to_owned(),
        |p| format!("-e {}", p.display()),
    );
    let readme = format!(
        r#"# {name}

A krec guest in Python reconciling `{api_version} {ty}`, made by `krec new --lang python`.

```sh
pip install componentize-py==0.25.1 pytest {sdk}   # once
python -m krec_guest.build app -o {module}   # the component (CPython inside: ~18 MB)
python -m pytest                              # unit tests on the SDK's fake cluster
krec dev --manifests .                        # a local cluster, with examples/ applied, reconciling live
```

`app.py` is the reconciler, `manifest.yaml` what it watches, may touch and its settings.
"#
    );
    vec![
        ("app.py", app),
        ("tests/test_app.py", tests),
        (
            "conftest.py",
            "# pytest finds app.py here: the guest's module is tested as it is built.\n".into(),
        ),
        (
            "manifest.yaml",
            manifest(
                new,
                kind,
                &module,
                "`python -m krec_guest.build app -o ...`",
                "128Mi",
            ),
        ),
        ("examples/example.yaml", example(kind)),
        ("README.md", readme),
        (
            ".gitignore",
            "*.wasm\n__pycache__/\n.pytest_cache/\n".into(),
        ),
    ]
}

/// The files of a TypeScript guest.
pub(super) fn typescript_files(new: &NewGuest, kind: &Known) -> Vec<(&'static str, String)> {
    let name = &new.name;
    let module = format!("{}.wasm", name.replace('-', "_"));
    let api_version = api_version(kind);
    let ty = kind.kind;
    let reconciler = format!("{}Reconciler", camel(name));
    let namespace = namespace_arg(kind, "undefined", "req.namespace");
    let request = if kind.namespaced {
        r#"new Request("default", "example")"#
    } else {
        r#"Request.cluster("example")"#
    };
    let (webhook_import, webhook_code, parts, webhook_tests) = if new.webhook {
        (
            ", AdmissionRequest, type KObject, Mutator, Validator, Verdict",
            format!(
                r#"

{guard}
/** The mutating webhook: labels every {ty} it admits `example.com/defaulted: "true"`. */
export class Defaults implements Mutator {{
  mutate(_req: AdmissionRequest, obj: KObject, _ctx: Context): Verdict {{
    (obj.metadata.labels ??= {{}})["example.com/defaulted"] = "true";
    return Verdict.allow();
  }}
}}
"#,
                guard = validator::typescript_guard(ty),
            ),
            format!("{{ reconciler: {reconciler}, validator: Guard, mutator: Defaults }}"),
            format!(
                r#"

{guard_test}

test("defaults should label what it admits", () => {{
  const mutated = new FakeCluster().mutate(new Defaults(), AdmissionRequest.create(example()));
  assert.ok(mutated.verdict.allowed);
  assert.equal(mutated.object?.metadata.labels?.["example.com/defaulted"], "true");
}});"#,
                guard_test = validator::typescript_guard_test(),
            ),
        )
    } else {
        (
            "",
            String::new(),
            format!("{{ reconciler: {reconciler} }}"),
            String::new(),
        )
    };
    let (test_imports, test_classes) = if new.webhook {
        ("AdmissionRequest, ", ", Defaults, Guard")
    } else {
        ("", "")
    };
    let app = format!(
        r#"/**
 * {name}: a krec guest reconciling {api_version} {ty}.
 *
 * It marks every {ty} with an annotation — the manifest's `spec.config.annotation` — set to the
 * object's generation (`0` for a kind that has none, like ConfigMap or Secret: the mark then says
 * only that the guest saw it). Replace `reconcile` with your logic; `test/app.test.ts` runs it on
 * a fake cluster.
 */

import {{ Action, Context, guest, Kind, log, Reconciler, Request{webhook_import} }} from "@krec/guest";

/** The kind this guest reconciles. */
export const KIND = new Kind("{api_version}", "{ty}");

/** The guest's settings: the manifest's `spec.config`. */
export interface Settings {{
  /** The annotation the reconciler writes. */
  annotation: string;
}}

/** The reconciler, built once per instance from its settings. */
export class {reconciler} implements Reconciler {{
  private readonly annotation: string;

  constructor(config: Settings | null) {{
    if (!config?.annotation) throw new Error("annotation: required: the annotation the reconciler writes");
    this.annotation = config.annotation;
  }}

  reconcile(req: Request, ctx: Context): Action {{
    // The object may be gone by the time we run: nothing to do then.
    const obj = ctx.getOpt(KIND, req.name, {namespace});
    if (!obj) return Action.done();
    const generation = String(obj.metadata.generation ?? 0);
    if (obj.metadata.annotations?.[this.annotation] === generation) return Action.done(); // already in the desired state
    log.info(`marking ${{req}} at generation ${{generation}}`);
    ctx.patch(KIND, req.name, {{ metadata: {{ annotations: {{ [this.annotation]: generation }} }} }}, {namespace});
    return Action.done();
  }}
}}
{webhook_code}
export default guest({parts});
"#
    );
    let tests = format!(
        r#"import assert from "node:assert/strict";
import {{ test }} from "node:test";

import {{ {test_imports}Action, type KObject, Request }} from "@krec/guest";
import {{ FakeCluster }} from "@krec/guest/testing";

import {{ KIND, {reconciler}{test_classes} }} from "../src/app.js";

const reconciler = () => new {reconciler}({{ annotation: "example.com/generation" }});

function example(): KObject {{
  return {example};
}}

test("reconcile should mark the object once", () => {{
  const cluster = new FakeCluster([example()]);
  assert.deepEqual(cluster.reconcile(reconciler(), {request}), Action.done());
  const marked = cluster.object(KIND, "example"{test_ns});
  // The object's generation; 0 for a kind that has none (ConfigMap, Secret): then it marks "seen".
  assert.equal(marked?.metadata.annotations?.["example.com/generation"], String(marked?.metadata.generation ?? 0));
  assert.equal(cluster.writes.length, 1);

  // Reconciling again changes nothing: reconciles are idempotent.
  assert.deepEqual(cluster.reconcile(reconciler(), {request}), Action.done());
  assert.equal(cluster.writes.length, 1);
}});

test("a gone object should be done", () => {{
  assert.deepEqual(new FakeCluster().reconcile(reconciler(), {request}), Action.done());
}});

test("a configuration without the annotation should be refused", () => {{
  assert.throws(() => new {reconciler}({{}} as never), /annotation/);
}});{webhook_tests}
"#,
        example = example_literal(kind, false),
        test_ns = if kind.namespaced {
            r#", "default""#
        } else {
            ""
        },
    );
    let sdk = new
        .sdk_path
        .as_ref()
        .map_or_else(|| "0.1.0".to_owned(), |p| format!("file:{}", p.display()));
    let package = format!(
        r#"{{
  "name": "{name}",
  "private": true,
  "type": "module",
  "scripts": {{
    "build": "krec-guest build src/app.ts -o {module}",
    "dev": "krec-guest dev src/app.ts -o {module}",
    "test": "krec-guest test"
  }},
  "devDependencies": {{
    "@krec/guest": "{sdk}"
  }}
}}
"#,
        sdk = sdk.replace('\\', "\\\\").replace('"', "\\\""),
    );
    let tsconfig = r#"{
  "compilerOptions": {
    "target": "ES2022",
    "module": "NodeNext",
    "moduleResolution": "NodeNext",
    "strict": true,
    "noEmit": true,
    "skipLibCheck": true
  },
  "include": ["src/**/*.ts", "test/**/*.ts"]
}
"#;
    let readme = format!(
        r#"# {name}

A krec guest in TypeScript reconciling `{api_version} {ty}`, made by `krec new --lang typescript`.

```sh
npm install                # once: links @krec/guest (with its build tools)
npm test                   # unit tests on the SDK's fake cluster (node --test)
npm run dev                # krec dev on a dev build: a local cluster, examples/ applied, each saved edit running in ~1 s
npm run build              # type-check, bundle and componentize: {module} to ship (SpiderMonkey inside: ~12 MB)
```

`npm run dev` (`krec-guest dev`) builds a dev build of {module} once (SpiderMonkey and the SDK
with a loader in place of your code; ~20 s the first time), rebuilds your code's bundle on every
save (esbuild: milliseconds, no type-check — `npm test` and your editor do that) and runs
`krec dev --manifests .` on it; flags after `--` go to `krec dev`. Outside `krec dev` a dev build
refuses to start: `npm run build` makes the component to ship.

`src/app.ts` is the reconciler, `manifest.yaml` what it watches, may touch and its settings.
"#
    );
    vec![
        ("package.json", package),
        ("tsconfig.json", tsconfig.into()),
        ("src/app.ts", app),
        ("test/app.test.ts", tests),
        (
            "manifest.yaml",
            manifest(new, kind, &module, "`npm run build`", "128Mi"),
        ),
        ("examples/example.yaml", example(kind)),
        ("README.md", readme),
        (".gitignore", "*.wasm\nnode_modules/\n.krec-build/\n".into()),
    ]
}
