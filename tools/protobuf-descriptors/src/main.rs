//! Compiles proto files into the `FileDescriptorSet`s the embedded API server encodes and
//! decodes protobuf with: Kubernetes' `generated.proto` files (`apiserver/src/protobuf/kubernetes.binpb`)
//! and gnostic's OpenAPI v2 messages (`apiserver/src/openapi/openapiv2.binpb`).
//!
//! ```sh
//! cargo run --manifest-path tools/protobuf-descriptors/Cargo.toml -- PROTO_ROOT OUT [FILE…]
//! ```
//!
//! Without `FILE`s it compiles Kubernetes' files ([`FILES`]). For the OpenAPI v2 messages,
//! `PROTO_ROOT` is a checkout of `github.com/google/gnostic-models` and the file is
//! `openapiv2/OpenAPIv2.proto`.
//!
//! `PROTO_ROOT` holds the proto files under their import paths (`api/core/v1/generated.proto`,
//! `apimachinery/pkg/apis/meta/v1/generated.proto`, …), as the `k8s-rs-pb` crate ships them in
//! `src/v1_35/` (or a checkout of `k8s.io/api`, `k8s.io/apimachinery` and
//! `k8s.io/apiextensions-apiserver` arranged the same way). Only the messages are kept: no
//! comments, no source positions.

use std::path::PathBuf;
use std::process::ExitCode;

/// The API groups the server decodes, by proto file.
const FILES: &[&str] = &[
    "api/core/v1/generated.proto",
    "api/admissionregistration/v1/generated.proto",
    "api/apps/v1/generated.proto",
    "api/batch/v1/generated.proto",
    "api/autoscaling/v1/generated.proto",
    "api/autoscaling/v2/generated.proto",
    "api/coordination/v1/generated.proto",
    "api/discovery/v1/generated.proto",
    "api/events/v1/generated.proto",
    "api/networking/v1/generated.proto",
    "api/policy/v1/generated.proto",
    "api/rbac/v1/generated.proto",
    "api/scheduling/v1/generated.proto",
    "api/storage/v1/generated.proto",
    "apiextensions_apiserver/pkg/apis/apiextensions/v1/generated.proto",
    "apimachinery/pkg/apis/meta/v1/generated.proto",
    "apimachinery/pkg/runtime/generated.proto",
];

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(root), Some(out)) = (args.next(), args.next()) else {
        eprintln!("usage: protobuf-descriptors PROTO_ROOT OUT [FILE…]");
        return ExitCode::FAILURE;
    };
    let mut files: Vec<String> = args.collect();
    if files.is_empty() {
        files = FILES.iter().map(|f| (*f).to_owned()).collect();
    }
    let compiled = protox::Compiler::new([PathBuf::from(&root)]).and_then(|mut compiler| {
        compiler.include_imports(true).include_source_info(false);
        compiler.open_files(&files)?;
        Ok(compiler.file_descriptor_set())
    });
    let set = match compiled {
        Ok(set) => set,
        Err(err) => {
            eprintln!("compiling the proto files under {root}: {err}");
            return ExitCode::FAILURE;
        }
    };
    let bytes = prost::Message::encode_to_vec(&set);
    if let Err(err) = std::fs::write(&out, &bytes) {
        eprintln!("writing {out}: {err}");
        return ExitCode::FAILURE;
    }
    println!("{out}: {} files, {} bytes", set.file.len(), bytes.len());
    ExitCode::SUCCESS
}
