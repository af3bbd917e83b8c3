//! `krec new --lang go`: a Go module over the Go SDK (`krec.dev/guest`), with the same
//! reconciler (and webhooks) as the other templates in controller-runtime's shapes, its
//! manifest, an example object and `go test`s against krec's own API server
//! (`krec.dev/guest/fake`).
//!
//! The module requires the SDK by a `replace` to its folder, and carries the SDK's module
//! requirements and `go.sum`, so `krec build` and `go test` work at once, with no `go mod tidy`.

use std::path::Path;

use super::{Known, NewError, NewGuest, api_version, example, go_package, manifest, validator};

/// The `module version` pairs `go.mod` requires.
fn requirements(go_mod: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in go_mod.lines() {
        let line = line.split("//").next().unwrap_or_default().trim();
        let entry = if in_block {
            if line == ")" {
                in_block = false;
                continue;
            }
            line
        } else if line == "require (" {
            in_block = true;
            continue;
        } else if let Some(single) = line.strip_prefix("require ") {
            single
        } else {
            continue;
        };
        let mut parts = entry.split_whitespace();
        if let (Some(module), Some(version)) = (parts.next(), parts.next()) {
            out.push((module.to_owned(), version.to_owned()));
        }
    }
    out
}

/// The new module's `go.mod`: the SDK by path, the k8s.io modules the guest imports, and the
/// rest of the SDK's requirements (so the build needs no `go mod tidy`).
fn go_mod(name: &str, sdk: &Path, sdk_go_mod: &str) -> String {
    const DIRECT: [&str; 2] = ["k8s.io/api", "k8s.io/apimachinery"];
    let requires = requirements(sdk_go_mod);
    let version = |module: &str| {
        requires
            .iter()
            .find(|(m, _)| m == module)
            .map_or("v0.36.0", |(_, v)| v.as_str())
            .to_owned()
    };
    let mut direct: Vec<String> = DIRECT
        .iter()
        .map(|m| format!("\t{m} {}\n", version(m)))
        .collect();
    direct.push("\tkrec.dev/guest v0.0.0\n".into());
    let indirect: String = requires
        .iter()
        .filter(|(m, _)| !DIRECT.contains(&m.as_str()))
        .map(|(m, v)| format!("\t{m} {v} // indirect\n"))
        .collect();
    let sdk = sdk.display().to_string();
    let sdk = if sdk.contains(char::is_whitespace) {
        format!("{sdk:?}")
    } else {
        sdk
    };
    format!(
        "module {name}\n\ngo 1.26.0\n\nrequire (\n{direct})\n\nrequire (\n{indirect})\n\n// The Go SDK, from this krec's sources.\nreplace krec.dev/guest => {sdk}\n",
        direct = direct.concat(),
    )
}

/// The files of a Go guest. The SDK's folder is required: its module is not published.
pub(super) fn go_files(
    new: &NewGuest,
    kind: &Known,
) -> Result<Vec<(&'static str, String)>, NewError> {
    let sdk = new.sdk_path.as_deref().ok_or(NewError::NoGoSdk)?;
    let read = |file: &str| {
        let path = sdk.join(file);
        std::fs::read_to_string(&path).map_err(|source| NewError::Io { path, source })
    };
    let (sdk_go_mod, sdk_go_sum) = (read("go.mod")?, read("go.sum")?);
    let name = &new.name;
    let module = format!("{name}.wasm");
    let api_version = api_version(kind);
    let ty = kind.kind;
    let (alias, import) = go_package(kind);
    let request = if kind.namespaced {
        r#"reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "example"}}"#
    } else {
        r#"reconcile.Request{NamespacedName: types.NamespacedName{Name: "example"}}"#
    };
    let (webhook_imports, webhook_code, webhook_register, webhook_tests) = if new.webhook {
        (
            ("\n\t\"fmt\"", "\n\t\"k8s.io/apimachinery/pkg/runtime\""),
            format!(
                r#"

{guard}

// Defaults is the mutating webhook: it labels every {ty} it admits
// `example.com/defaulted: "true"`.
type Defaults struct{{}}

// Default sets the label.
func (Defaults) Default(_ context.Context, obj runtime.Object) error {{
	o, ok := obj.(*{alias}.{ty})
	if !ok {{
		return fmt.Errorf("expected a {ty}, got %T", obj)
	}}
	if o.Labels == nil {{
		o.Labels = map[string]string{{}}
	}}
	o.Labels["example.com/defaulted"] = "true"
	return nil
}}"#,
                guard = validator::go_guard(&alias, ty),
            ),
            format!(
                "\n\tguest.Validator(&{alias}.{ty}{{}}, Guard{{}})\n\tguest.Defaulter(&{alias}.{ty}{{}}, Defaults{{}})"
            ),
            format!(
                r#"

{guard_test}

func TestDefaultsShouldLabelWhatItAdmits(t *testing.T) {{
	obj := &{alias}.{ty}{{}}
	if err := (Defaults{{}}).Default(context.Background(), obj); err != nil {{
		t.Fatal(err)
	}}
	if obj.Labels["example.com/defaulted"] != "true" {{
		t.Fatalf("labels %v", obj.Labels)
	}}
}}"#,
                guard_test = validator::go_guard_test(&alias, ty),
            ),
        )
    } else {
        (("", ""), String::new(), String::new(), String::new())
    };
    let (fmt_import, runtime_import) = webhook_imports;
    let admission_import = if new.webhook {
        "\n\t\"krec.dev/guest/webhook/admission\""
    } else {
        ""
    };
    let main = format!(
        r#"// {name}: a krec guest reconciling {api_version} {ty}, with controller-runtime's shapes.
//
// It marks every {ty} with an annotation — the manifest's spec.config.annotation — set to the
// object's generation. Replace Reconcile with your logic; main_test.go runs it against krec's
// own API server (krec.dev/guest/fake).
package main

import (
	"context"
	"encoding/json"
	"errors"{fmt_import}
	"strconv"

	{alias} "{import}"{runtime_import}

	"krec.dev/guest"
	"krec.dev/guest/client"
	"krec.dev/guest/log"
	"krec.dev/guest/reconcile"{admission_import}
)

// Settings are the guest's settings: the manifest's spec.config.
type Settings struct {{
	// Annotation is the annotation the reconciler writes.
	Annotation string `json:"annotation"`
}}

// ParseSettings reads spec.config (JSON); an error refuses it, and the host does not run the
// guest.
func ParseSettings(config []byte) (Settings, error) {{
	var settings Settings
	if err := json.Unmarshal(config, &settings); err != nil {{
		return settings, err
	}}
	if settings.Annotation == "" {{
		return settings, errors.New("annotation: required: the annotation the reconciler writes")
	}}
	return settings, nil
}}

// Reconciler marks each {ty} with its generation.
type Reconciler struct {{
	client.Client
	Settings
}}

// Reconcile marks the {ty} of req.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {{
	obj := &{alias}.{ty}{{}}
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {{
		// The object may be gone by the time we run: nothing to do then.
		return reconcile.Result{{}}, client.IgnoreNotFound(err)
	}}
	generation := strconv.FormatInt(obj.Generation, 10)
	if obj.Annotations[r.Annotation] == generation {{
		return reconcile.Result{{}}, nil // already in the desired state
	}}
	log.FromContext(ctx).Info("marking", "object", req, "generation", generation)
	patch := client.MergeFrom(obj.DeepCopy())
	if obj.Annotations == nil {{
		obj.Annotations = map[string]string{{}}
	}}
	obj.Annotations[r.Annotation] = generation
	return reconcile.Result{{}}, r.Patch(ctx, obj, patch)
}}{webhook_code}

var reconciler = &Reconciler{{Client: guest.Client()}}

// The host instantiates the guest (running init), hands it spec.config, then reconciles.
func init() {{
	guest.Configure(func(config []byte) (err error) {{
		reconciler.Settings, err = ParseSettings(config)
		return err
	}})
	guest.Reconcile(reconciler){webhook_register}
}}

func main() {{}}
"#
    );
    let tests = format!(
        r#"package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	{alias} "{import}"
	"k8s.io/apimachinery/pkg/types"

	"krec.dev/guest/fake"
	"krec.dev/guest/reconcile"
)

var (
	settings = Settings{{Annotation: "example.com/generation"}}
	request  = {request}
)

func TestReconcileShouldMarkTheObjectOnce(t *testing.T) {{
	ctx := context.Background()
	cluster := fake.NewCluster(t) // krec's API server, for this test
	cluster.AddFiles(t, "examples/example.yaml")
	r := &Reconciler{{Client: cluster.Client(), Settings: settings}}
	if _, err := r.Reconcile(ctx, request); err != nil {{
		t.Fatal(err)
	}}
	marked := &{alias}.{ty}{{}}
	if err := cluster.Client().Get(ctx, request.NamespacedName, marked); err != nil {{
		t.Fatal(err)
	}}
	if got, want := marked.Annotations[settings.Annotation], strconv.FormatInt(marked.Generation, 10); got != want {{
		t.Fatalf("annotation %q, want %q", got, want)
	}}
	// Reconciling again changes nothing: reconciles are idempotent.
	if _, err := r.Reconcile(ctx, request); err != nil {{
		t.Fatal(err)
	}}
	if writes := cluster.Writes(); len(writes) != 1 {{
		t.Fatalf("writes %q, want one", writes)
	}}
}}

func TestAGoneObjectShouldBeDone(t *testing.T) {{
	r := &Reconciler{{Client: fake.NewCluster(t).Client(), Settings: settings}}
	result, err := r.Reconcile(context.Background(), request)
	if err != nil || !result.IsZero() {{
		t.Fatalf("%v, %v", result, err)
	}}
}}

func TestAConfigurationWithoutTheAnnotationShouldBeRefused(t *testing.T) {{
	if _, err := ParseSettings([]byte(`{{}}`)); err == nil || !strings.Contains(err.Error(), "annotation") {{
		t.Fatalf("accepted a configuration without the annotation: %v", err)
	}}
}}{webhook_tests}
"#
    );
    let readme = format!(
        r#"# {name}

A krec guest in Go reconciling `{api_version} {ty}`, made by `krec new --lang go`: a
controller-runtime-shaped `Reconcile(ctx, req) (reconcile.Result, error)` over the Go SDK
(`krec.dev/guest`).

```sh
krec build                 # go build for wasip1, then the component: {module}
go test ./...              # unit tests against krec's own API server (krec on PATH, or $KREC)
krec dev --manifests .     # a local cluster, with examples/ applied, reconciling live
```

`main.go` is the reconciler, `manifest.yaml` what it watches, may touch and its settings. Go's
runtime reserves its heap in large steps: keep `limits.memory` at 128Mi or more.
"#
    );
    Ok(vec![
        ("go.mod", go_mod(name, sdk, &sdk_go_mod)),
        ("go.sum", sdk_go_sum),
        ("main.go", main),
        ("main_test.go", tests),
        (
            "manifest.yaml",
            manifest(new, kind, &module, "`krec build`", "128Mi"),
        ),
        ("examples/example.yaml", example(kind)),
        ("README.md", readme),
        (".gitignore", "*.wasm\n".into()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_should_be_read_from_blocks_and_single_lines() {
        let go_mod = "module x\n\nrequire k8s.io/api v0.36.0\n\nrequire (\n\tgithub.com/a/b v1.2.3 // indirect\n\tk8s.io/apimachinery v0.36.0\n)\n";
        assert_eq!(
            requirements(go_mod),
            [
                ("k8s.io/api".to_owned(), "v0.36.0".to_owned()),
                ("github.com/a/b".to_owned(), "v1.2.3".to_owned()),
                ("k8s.io/apimachinery".to_owned(), "v0.36.0".to_owned()),
            ]
        );
    }
}
