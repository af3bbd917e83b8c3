//! A core WebAssembly module built for `wasip1` turned into a krec guest component — what
//! `krec build` does after `go build`, so that a Go guest author needs Go and krec and nothing
//! else (no wit-bindgen, no wasm-tools).
//!
//! Go's own toolchain (`GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared`) writes a core
//! module whose exports are the component model's lowered functions (`//go:wasmexport` in the
//! bindings the Go SDK carries) and whose WASI calls are preview 1's. Two steps make a
//! component of it, both done by the `wit-component` crate:
//!
//! 1. the world the bindings were generated for — `krec:reconciler@0.1.2`'s `controller`, from
//!    the WIT this krec was built with — is embedded in the module as its component type;
//! 2. the module is wrapped with the WASI preview 1 *reactor* adapter of the wasmtime this
//!    host runs (the adapter turns its preview 1 calls into WASI 0.2 imports, and the
//!    component's start calls the module's `_initialize`, which runs Go's `init`s).

use std::path::Path;

use anyhow::Context as _;

/// The world every krec guest component targets (the SDKs build it).
pub const WORLD: &str = "controller";

/// krec's guest contract, as this krec was built with (`wit/`).
const WIT: &[(&str, &str)] = &[
    ("admission.wit", include_str!("../../../wit/admission.wit")),
    ("client.wit", include_str!("../../../wit/client.wit")),
    (
        "controller.wit",
        include_str!("../../../wit/controller.wit"),
    ),
    ("events.wit", include_str!("../../../wit/events.wit")),
    ("log.wit", include_str!("../../../wit/log.wit")),
    ("types.wit", include_str!("../../../wit/types.wit")),
    ("world.wit", include_str!("../../../wit/world.wit")),
];

/// The component of `core`, a `wasip1` core module exporting the lowered functions of the
/// [`WORLD`] world.
///
/// # Errors
///
/// When `core` is not a module of that world: an export of the wrong type, an import neither
/// WASI preview 1 nor krec's interfaces, or not WebAssembly at all.
pub fn componentize(core: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut sources = wit_parser::SourceMap::new();
    for (name, text) in WIT {
        sources.push(Path::new(name), *text);
    }
    let group = sources
        .parse()
        .map_err(|(_, err)| anyhow::anyhow!("krec's own WIT does not parse: {err}"))?;
    let mut resolve = wit_parser::Resolve::default();
    let package = resolve
        .push_group(group)
        .map_err(|err| anyhow::anyhow!("krec's own WIT does not resolve: {err}"))?;
    let world = resolve.select_world(&[package], Some(WORLD))?;
    let mut module = core.to_vec();
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .context("embedding the guest world in the module")?;
    wit_component::ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .context("reading the module")?
        .adapter(
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )
        .context("adding the WASI preview 1 adapter")?
        .encode()
        .context("making a component of the module")
}
