//! What became of the guests a start or reload was asked for: [`ReloadReport`], the guests
//! [`Skipped`], and why a version could not start ([`StartError`]).

use std::path::PathBuf;

use crate::manifest::ManifestError;
use krec_core::Gvk;

/// A guest that could not be started, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The guest (or the manifest file, if it has no valid name).
    pub guest: String,
    /// What is wrong, naming the file or kind.
    pub reason: String,
    /// What kind of problem, in one CamelCase word (a status condition's reason):
    /// [`ManifestError::code`] or [`StartError::code`].
    pub code: &'static str,
}

/// Why a guest, or a new version of one, could not start; each names the manifest file, the
/// module or the kind.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Code compiled into the host takes no configuration and has no `map` export.
    #[error(
        "{path}: guest {guest} runs code compiled into the host: spec.config and mapByGuest need a component"
    )]
    RunnerUnsupported {
        /// The manifest file.
        path: PathBuf,
        /// The guest.
        guest: String,
    },
    /// Loading the module panicked.
    #[error("loading the module panicked: {0}")]
    LoadPanicked(String),
    /// The module could not be read, compiled or checked against the world.
    #[error(transparent)]
    Load(#[from] crate::guest::LoadError),
    /// The module's first instance failed (a start function trapped, the configuration was
    /// refused).
    #[error(transparent)]
    Instantiate(#[from] crate::guest::ReconcileError),
    /// A kind it watches is not served, or its informer could not start.
    #[error("cannot watch {gvk}: {source}")]
    Watch {
        /// The kind.
        gvk: Gvk,
        /// Why.
        source: krec_core::CallError,
    },
    /// A permission restricted to namespaces names a cluster-scoped kind.
    #[error("{path}: spec.permissions[{index}].namespaces: {message}")]
    ClusterScoped {
        /// The manifest file.
        path: PathBuf,
        /// The permission's index.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// An informer did not sync in time.
    #[error(transparent)]
    Sync(krec_core::CallError),
    /// The guest asks for something the host itself may not do.
    #[error("{path}: {field}: {problem}")]
    PermissionRefused {
        /// The manifest file or object.
        path: PathBuf,
        /// The manifest field asking for it.
        field: String,
        /// What the host may not do.
        problem: String,
    },
    /// A namespaced `Reconciler` asks for more than its namespace.
    #[error("{path}: {message}")]
    Confined {
        /// The object.
        path: PathBuf,
        /// What it asks for.
        message: String,
    },
}

impl StartError {
    /// What kind of problem, in one CamelCase word (a status condition's reason).
    pub fn code(&self) -> &'static str {
        match self {
            StartError::RunnerUnsupported { .. }
            | StartError::ClusterScoped { .. }
            | StartError::Confined { .. } => "Invalid",
            StartError::LoadPanicked(_) | StartError::Load(_) => "LoadFailed",
            StartError::Instantiate(_) => "InstantiateFailed",
            StartError::Watch { .. } => "WatchFailed",
            StartError::Sync(_) => "SyncFailed",
            StartError::PermissionRefused { .. } => "PermissionRefused",
        }
    }
}

/// What a [`reload`](super::Manager::reload) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadReport {
    /// Guests started.
    pub started: Vec<String>,
    /// Guests now running a new version.
    pub swapped: Vec<String>,
    /// Guests stopped because their manifest is gone.
    pub removed: Vec<String>,
    /// Changes refused (the old version, if any, keeps running): guest or file, and why.
    pub rejected: Vec<Skipped>,
    /// Guests whose new version still loads in the background (the old one, if any, keeps
    /// running): taken up by the reload that its end starts.
    pub loading: Vec<String>,
}

impl Skipped {
    /// A manifest (file or object) refused, named by its path.
    pub(super) fn refused(err: &ManifestError) -> Self {
        Skipped {
            guest: err.path().display().to_string(),
            reason: err.to_string(),
            code: err.code(),
        }
    }
}

impl ReloadReport {
    /// Whether nothing changed and nothing was refused.
    pub fn is_empty(&self) -> bool {
        self.started.is_empty()
            && self.swapped.is_empty()
            && self.removed.is_empty()
            && self.rejected.is_empty()
            && self.loading.is_empty()
    }
}
