//! Kubernetes object files: the YAML documents `krec dev --apply` creates and `krec rbac` reads
//! CRDs from.

use std::path::{Path, PathBuf};

/// An object file (or directory) that cannot be read, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct ObjectFileError {
    /// The file or directory.
    pub path: PathBuf,
    /// What is wrong.
    pub message: String,
}

impl ObjectFileError {
    /// The error of `path`: `message`.
    pub fn new(path: &Path, message: impl std::fmt::Display) -> Self {
        ObjectFileError {
            path: path.to_owned(),
            message: message.to_string(),
        }
    }
}

/// Every Kubernetes object in the YAML files under `dir` (recursively, sorted by path; several
/// documents per file allowed), skipping krec `Reconciler` manifests and `target/`, `src/` and
/// `rejected/` and `by-hand/` directories (examples of objects a webhook refuses, or to apply by
/// hand once the guests run). Errors name the file.
///
/// # Errors
///
/// An [`ObjectFileError`] naming the file (or directory) and the problem.
pub fn read_objects(dir: &Path) -> Result<Vec<serde_json::Value>, ObjectFileError> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                if !path.file_name().is_some_and(|n| {
                    ["target", "src", "rejected", "by-hand"]
                        .iter()
                        .any(|d| n == *d)
                }) {
                    walk(&path, out)?;
                }
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                out.push(path);
            }
        }
        Ok(())
    }
    use serde::Deserialize as _;
    let mut files = Vec::new();
    if dir.is_file() {
        // One manifest file given: the objects beside it in its folder are not meant.
        return Ok(Vec::new());
    }
    walk(dir, &mut files).map_err(|e| ObjectFileError::new(dir, e))?;
    files.sort();
    let mut objects = Vec::new();
    for file in files {
        let text = crate::manifest::files::read_bounded_text(
            &file,
            crate::manifest::files::MAX_OBJECT_FILE_BYTES,
        )
        .map_err(|e| ObjectFileError::new(&file, e))?;
        let documents =
            krec_core::yaml::documents(&text).map_err(|e| ObjectFileError::new(&file, e))?;
        for document in documents {
            let value = serde_json::Value::deserialize(document)
                .map_err(|e| ObjectFileError::new(&file, e))?;
            // Manifests (either kind) are the guests', not objects to apply.
            let kind = value.get("kind").and_then(serde_json::Value::as_str);
            if value.is_null()
                || kind == Some(crate::manifest::KIND)
                || kind == Some(crate::manifest::CLUSTER_KIND)
            {
                continue;
            }
            if value.get("apiVersion").is_none() || value.get("kind").is_none() {
                return Err(ObjectFileError::new(
                    &file,
                    "a document without apiVersion and kind",
                ));
            }
            objects.push(value);
        }
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_of_either_kind_should_not_be_applied_as_objects() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("guests.yaml"),
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: a}\nspec: {}\n---\napiVersion: krec.dev/v1alpha1\nkind: ClusterReconciler\nmetadata: {name: b}\nspec: {}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
        )
        .expect("write");
        let objects = read_objects(dir.path()).expect("read");
        assert_eq!(objects.len(), 1, "{objects:?}");
        assert_eq!(objects[0]["kind"], "ConfigMap");
    }
}
