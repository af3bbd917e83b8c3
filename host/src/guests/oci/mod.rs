//! Modules from OCI registries: `spec.module: oci://HOST[:PORT]/REPOSITORY:TAG` (or
//! `@sha256:DIGEST`), in the CNCF Wasm OCI artifact layout — a manifest whose config is
//! `application/vnd.wasm.config.v0+json` and whose one layer is the `application/wasm`
//! component, what `wkg oci push` and [`Registries::push`] (`krec push`) write.
//!
//! A pulled module is verified against its digests (the manifest's against the reference or the
//! resolved digest, the layer's against the manifest, and again here) and kept in a local store
//! by layer digest, so a digest already pulled never touches the network. A tag is resolved to a
//! digest (one `HEAD`) when first seen and, with the pull policy `Always` (the default), again
//! every `spec.pull.every`: moving a tag swaps the guest in every replica. A resolution or pull
//! that fails is an error of that guest's manifest, so the version it runs keeps running and the
//! reload is retried with backoff.
//!
//! The room's parts: [`reference()`] parses references; `artifact` knows the layout;
//! `pull` speaks the registry's HTTP for a pull, held to the registry's own host;
//! [`Registries`] resolves, pulls, keeps and pushes; `credentials` reads a pull Secret; every
//! failure is an [`OciError`].

mod artifact;
mod credentials;
mod error;
mod pull;
mod registries;

pub use crate::manifest::module_ref::{Reference, ReferenceError, reference};
pub use artifact::{OCI_MANIFEST, SCHEME, WASM_CONFIG, WASM_LAYER, install_crypto};
pub use credentials::{auth_from_docker_config, pull_secret_auth};
pub use error::OciError;
pub use oci_client::secrets::RegistryAuth;
pub use registries::Registries;
