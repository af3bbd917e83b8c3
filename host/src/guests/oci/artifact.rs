//! The CNCF Wasm OCI artifact: its media types, and the names a component imports and exports
//! (what a pushed artifact's config records).

/// What `spec.module` starts with to name a module in a registry.
pub use crate::manifest::module_ref::SCHEME;
/// The config media type of a Wasm OCI artifact.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The media type of its one layer, the component.
pub const WASM_LAYER: &str = "application/wasm";
/// The OCI image manifest media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// Make ring the TLS crypto provider of the process (the registry client's rustls has none of
/// its own); harmless when one is installed already.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The names a component imports and exports at its top level.
#[derive(Debug, Default)]
pub(super) struct ComponentNames {
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

/// The names `bytes`, a component, imports and exports; `None` when they are a core module or
/// something else that parses.
///
/// # Errors
///
/// When `bytes` are no WebAssembly binary.
pub(super) fn component_names(
    bytes: &[u8],
) -> Result<Option<ComponentNames>, wasmparser::BinaryReaderError> {
    use wasmparser::{Parser, Payload};
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    let mut component = false;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload? {
            Payload::Version { encoding, .. } => {
                depth += 1;
                if depth == 1 {
                    component = encoding == wasmparser::Encoding::Component;
                }
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(reader) if depth == 1 => {
                for import in reader {
                    imports.push(import?.name.name.to_owned());
                }
            }
            Payload::ComponentExportSection(reader) if depth == 1 => {
                for export in reader {
                    exports.push(export?.name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    Ok(component.then_some(ComponentNames { imports, exports }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_module_should_not_pass_for_a_component() {
        // `(module)`: the smallest core module.
        let core = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
        assert!(matches!(component_names(&core), Ok(None)));
        assert!(component_names(b"junk").is_err());
    }
}
