//! [`OciError`]: what went wrong resolving, pulling, keeping or pushing a module in a registry,
//! each naming the reference, file or Secret at fault.

use std::path::PathBuf;

use crate::manifest::module_ref::{ReferenceError, SCHEME};

/// What went wrong with a module in a registry. Its text names the reference (or file, or
/// Secret) and the problem; what a registry answered appears as its status code and error
/// codes alone, never its body (a guest's status, which a tenant reads, carries this text).
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// A module reference that is no usable OCI reference.
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    /// The registry, or what it holds: unreachable, refusing, answering with what is no Wasm
    /// component artifact, or with content that does not match its digest.
    #[error("{SCHEME}{reference}: {problem}")]
    Registry {
        /// The reference, without its scheme.
        reference: String,
        /// What went wrong.
        problem: String,
    },
    /// The pull policy forbids what the module needs (`spec.pull.policy: Never`).
    #[error("{SCHEME}{reference} {problem}")]
    Policy {
        /// The reference, without its scheme.
        reference: String,
        /// What is missing, and the policy that forbids fetching it.
        problem: String,
    },
    /// The registry's credentials: a pull Secret that cannot be read or holds no Docker config.
    #[error("{secret}{problem}")]
    Credentials {
        /// The Secret (`Secret ns/name: `), or empty when the Docker config alone is at fault.
        secret: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A pulled module could not be kept on disk.
    #[error("keeping {}: {error}", path.display())]
    Store {
        /// The file being written.
        path: PathBuf,
        /// The error writing it.
        error: std::io::Error,
    },
    /// A component to push cannot be read, or is none.
    #[error("{}: {problem}", path.display())]
    Module {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The registry client could not be set up.
    #[error("creating the registry client: {0}")]
    Client(String),
}

impl OciError {
    /// A problem of the registry serving `reference` (written without its scheme).
    pub(crate) fn registry(reference: &oci_client::Reference, problem: impl ToString) -> Self {
        OciError::Registry {
            reference: reference.whole(),
            problem: problem.to_string(),
        }
    }

    /// What the pull policy forbids for `reference`.
    pub(crate) fn policy(reference: &oci_client::Reference, problem: impl ToString) -> Self {
        OciError::Policy {
            reference: reference.whole(),
            problem: problem.to_string(),
        }
    }

    /// The same error, with `more` added to a registry's problem.
    #[must_use]
    pub(crate) fn with_hint(self, more: &str) -> Self {
        match self {
            OciError::Registry { reference, problem } => OciError::Registry {
                reference,
                problem: format!("{problem}{more}"),
            },
            other => other,
        }
    }
}
