//! Module references: `oci://HOST[:PORT]/REPOSITORY:TAG` or `…@sha256:DIGEST`, always naming
//! their registry.

use std::path::Path;

pub use oci_client::Reference;

/// The scheme of a module reference in a registry.
pub const SCHEME: &str = "oci://";

/// A module reference that is no usable OCI reference.
#[derive(Debug, thiserror::Error)]
#[error("{text:?} {problem}")]
pub struct ReferenceError {
    /// The reference as written.
    pub text: String,
    /// Why it cannot be used, with the form expected.
    pub problem: String,
}

/// The form a reference must have.
const USAGE: &str =
    "expected oci://HOST[:PORT]/REPOSITORY:TAG or oci://HOST[:PORT]/REPOSITORY@sha256:DIGEST";

/// The registry reference `module` names, if it is an `oci://` one (`Err`: it is one, and it is
/// malformed).
pub fn reference(module: &Path) -> Option<Result<Reference, ReferenceError>> {
    let text = module.to_str()?;
    let rest = text.strip_prefix(SCHEME)?;
    Some(parse(text, rest))
}

fn parse(text: &str, rest: &str) -> Result<Reference, ReferenceError> {
    let refused = |problem: String| ReferenceError {
        text: text.to_owned(),
        problem,
    };
    // Without a registry host, the reference would silently mean Docker Hub.
    let host = rest.split('/').next().unwrap_or_default();
    if !rest.contains('/') || !(host.contains('.') || host.contains(':') || host == "localhost") {
        return Err(refused(format!("names no registry: {USAGE}")));
    }
    rest.parse::<Reference>()
        .map_err(|err| refused(format!("is not an OCI reference ({err}): {USAGE}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oci_references_should_name_their_registry() {
        let ok = reference(Path::new("oci://127.0.0.1:5000/team/pod-counter:v1"))
            .expect("oci")
            .expect("valid");
        assert_eq!(ok.registry(), "127.0.0.1:5000");
        assert_eq!(ok.repository(), "team/pod-counter");
        assert_eq!(ok.tag(), Some("v1"));
        let pinned = format!("oci://ghcr.io/a/b@sha256:{}", "0".repeat(64));
        let pinned = reference(Path::new(&pinned)).expect("oci").expect("valid");
        assert!(pinned.digest().is_some());
        assert!(reference(Path::new("pod_counter.wasm")).is_none(), "a file");
        for bad in [
            "oci://pod-counter:v1",
            "oci://team/pod-counter:v1",
            "oci://ghcr.io/A b",
        ] {
            let err = reference(Path::new(bad)).expect("oci").expect_err(bad);
            assert!(
                err.to_string().contains("oci://HOST[:PORT]/REPOSITORY:TAG"),
                "{err}"
            );
        }
    }
}
