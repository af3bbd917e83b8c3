//! [`Fingerprint`]: the manifest and module files as their metadata describes them — what the
//! watch loop compares to tell a change, and what a load read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::manifest::Manifest;

/// The manifest files of a directory and the module files they name, as the file system
/// describes them (size, modification time, inode) without opening them: two are equal when
/// no file was written, replaced, added or removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Fingerprint {
    /// The directory whose manifest files are listed, if any.
    dir: Option<PathBuf>,
    files: BTreeMap<PathBuf, Option<(u64, Option<std::time::SystemTime>, u64)>>,
}

impl Fingerprint {
    /// The manifest files in `dir` (if any) and `modules`.
    pub(super) fn of(dir: Option<&Path>, modules: &[PathBuf]) -> Self {
        let files = dir
            .and_then(|dir| Manifest::files(dir).ok())
            .unwrap_or_default();
        Self::of_paths(dir, files.iter().chain(modules))
    }

    /// The files `manifests` were read from and the module files they name (a registry
    /// module's reference is no file: it stays absent). Files added beside them are not seen.
    pub(super) fn of_manifests<'a>(manifests: impl IntoIterator<Item = &'a Manifest>) -> Self {
        let mut paths = Vec::new();
        for manifest in manifests {
            paths.push(manifest.path.clone());
            paths.push(manifest.module_file().to_owned());
            paths.extend(manifest.candidate_file().map(Path::to_owned));
        }
        Self::of_paths(None, paths.iter())
    }

    /// Whether the files changed since this was taken: one written, replaced or removed, or a
    /// manifest added to its directory.
    pub(super) fn changed_since(&self) -> bool {
        let paths: Vec<PathBuf> = self.files.keys().cloned().collect();
        Self::of(self.dir.as_deref(), &paths) != *self
    }

    fn of_paths<'a>(dir: Option<&Path>, paths: impl Iterator<Item = &'a PathBuf>) -> Self {
        let stat = |path: &Path| {
            let meta = std::fs::metadata(path).ok()?;
            #[cfg(unix)]
            let inode = std::os::unix::fs::MetadataExt::ino(&meta);
            #[cfg(not(unix))]
            let inode = 0;
            Some((meta.len(), meta.modified().ok(), inode))
        };
        Fingerprint {
            dir: dir.map(Path::to_owned),
            files: paths.map(|path| (path.clone(), stat(path))).collect(),
        }
    }
}
