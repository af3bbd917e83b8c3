//! Reading manifests: one file, or every manifest under a directory.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use krec_core::Gvk;
use krec_core::selector::is_dns_label;

use super::types::*;
use super::validate::{FieldProblem, configure, validate_spec};
use super::{API_VERSION, CLUSTER_KIND, KIND, ManifestError};

impl Manifest {
    /// Whether the manifest permits `verb` on `gvk` in `namespace` (`None`: cluster-scoped or
    /// across all namespaces, which needs a permission without a namespace restriction).
    pub fn allows(&self, verb: Verb, gvk: &Gvk, namespace: Option<&str>) -> bool {
        self.spec.permissions.iter().any(|p| {
            p.verbs.contains(&verb)
                && Gvk::from_api_version(&p.api_version, &p.kind) == *gvk
                && (p.namespaces.is_empty()
                    || namespace.is_some_and(|ns| p.namespaces.iter().any(|n| n == ns)))
        })
    }

    /// Whether `gvk` is read from the API server rather than the cache.
    pub fn is_uncached(&self, gvk: &Gvk) -> bool {
        self.spec.uncached.iter().any(|k| k.gvk() == *gvk)
    }

    /// Read and validate a manifest file.
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let text = read_manifest(path).map_err(|error| ManifestError::Read {
            path: path.to_owned(),
            error,
        })?;
        Self::parse(path, &text)
    }

    /// Parse and validate manifest text; `path` names it in errors and anchors the module path.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ManifestError> {
        Self::parse_in(path, path.parent().unwrap_or(Path::new(".")), text)
    }

    /// Like [`parse`](Self::parse), with relative module paths resolved against `module_base`
    /// (e.g. a host's `--module-dir` for a `Reconciler` read from the cluster).
    pub fn parse_in(path: &Path, module_base: &Path, text: &str) -> Result<Self, ManifestError> {
        let invalid = |field: &str, problem: String| ManifestError::Invalid {
            path: path.to_owned(),
            field: field.to_owned(),
            problem,
        };
        // What else the file is, said before any field of it is judged as a manifest's.
        let not_a_manifest = |what: String| {
            invalid(
                "",
                format!(
                    "not a krec manifest ({what}; a manifest is a {KIND} or {CLUSTER_KIND} of {API_VERSION})"
                ),
            )
        };
        match head(text) {
            // krec's group with a misspelt kind is judged as a manifest (naming the field).
            Head::Kind(kind, api_version)
                if kind != KIND && kind != CLUSTER_KIND && api_version != API_VERSION =>
            {
                return Err(not_a_manifest(format!("it is a {kind}")));
            }
            Head::NotAMapping => {
                return Err(not_a_manifest("it is not a YAML mapping".to_owned()));
            }
            _ => {}
        }
        let deserializer =
            krec_core::yaml::documents(text).map_err(|err| invalid("", err.to_string()))?;
        let raw: RawManifest = serde_path_to_error::deserialize(deserializer).map_err(|err| {
            let field = err.path().to_string();
            let field = if field == "." { String::new() } else { field };
            invalid(&field, strip_location(&err.inner().to_string()))
        })?;
        if raw.api_version != API_VERSION {
            return Err(invalid(
                "apiVersion",
                format!("expected {API_VERSION:?}, found {:?}", raw.api_version),
            ));
        }
        if raw.kind != KIND && raw.kind != CLUSTER_KIND {
            return Err(invalid(
                "kind",
                format!(
                    "expected {KIND:?} or {CLUSTER_KIND:?}, found {:?}",
                    raw.kind
                ),
            ));
        }
        if !is_dns_label(&raw.metadata.name) {
            return Err(invalid(
                "metadata.name",
                format!(
                    "{:?} is not a valid guest name: at most 63 lowercase letters, digits or '-', starting and ending alphanumeric",
                    raw.metadata.name
                ),
            ));
        }
        let mut spec = raw.spec;
        validate_spec(&spec).map_err(|FieldProblem(field, problem)| invalid(&field, problem))?;
        configure(&mut spec).map_err(|FieldProblem(field, problem)| invalid(&field, problem))?;
        match super::module_ref::reference(&spec.module) {
            Some(Err(problem)) => return Err(invalid("spec.module", problem.to_string())),
            // Pulled when the guest loads (see `guests::oci`).
            Some(Ok(_)) => {}
            None if spec.module.is_relative() => spec.module = module_base.join(&spec.module),
            None => {}
        }
        if let Some(rollout) = &mut spec.rollout {
            match super::module_ref::reference(&rollout.candidate) {
                Some(Err(problem)) => {
                    return Err(invalid("spec.rollout.candidate", problem.to_string()));
                }
                // Pulled when the guest loads, as `spec.module` is.
                Some(Ok(_)) => {}
                None if rollout.candidate.is_relative() => {
                    rollout.candidate = module_base.join(&rollout.candidate);
                }
                None => {}
            }
        }
        Ok(Manifest {
            path: path.to_owned(),
            name: raw.metadata.name,
            spec,
            pulled: None,
            candidate_pulled: None,
            tenant: None,
            candidate: false,
        })
    }

    /// Load every `*.yaml`/`*.yml` manifest under `dir` (recursively), sorted by path; fails on
    /// the first invalid one. Files that parse and whose `kind` is not `Reconciler` (CRDs, example
    /// objects) are skipped.
    pub fn load_dir(dir: &Path) -> Result<Vec<Manifest>, ManifestError> {
        Self::scan_dir(dir)?.into_iter().collect()
    }

    /// Every valid manifest under `dir` (or the one file `dir` names), as a host starts them:
    /// a bad manifest is logged, naming its file, and skipped.
    ///
    /// # Errors
    ///
    /// When `dir` cannot be read or holds no manifest at all.
    pub fn load_valid(dir: &Path) -> Result<Vec<Manifest>, ManifestError> {
        let scanned = Self::scan_dir(dir)?;
        if scanned.is_empty() {
            return Err(ManifestError::Invalid {
                path: dir.to_owned(),
                field: String::new(),
                problem: "no Reconciler manifests found".to_owned(),
            });
        }
        Ok(Self::valid(scanned))
    }

    /// Like [`load_valid`](Self::load_valid), where no manifest at all is fine (a host that
    /// also runs the guests registered in the cluster).
    ///
    /// # Errors
    ///
    /// When `dir` cannot be read.
    pub fn load_valid_or_none(dir: &Path) -> Result<Vec<Manifest>, ManifestError> {
        Ok(Self::valid(Self::scan_dir(dir)?))
    }

    /// The valid manifests of `scanned`; each bad one is logged, naming its file.
    fn valid(scanned: Vec<Result<Manifest, ManifestError>>) -> Vec<Manifest> {
        let mut manifests = Vec::new();
        for result in scanned {
            match result {
                Ok(manifest) => manifests.push(manifest),
                Err(err) => tracing::error!("skipping a manifest: {err}"),
            }
        }
        manifests
    }

    /// Like [`load_dir`](Self::load_dir), but with one result per manifest file, so that one bad
    /// manifest does not hide the others. Two manifests naming the same guest: the later is an
    /// error. Fails only if the directory cannot be read.
    pub fn scan_dir(dir: &Path) -> Result<Vec<Result<Manifest, ManifestError>>, ManifestError> {
        let files = Self::files(dir).map_err(|error| ManifestError::Read {
            path: dir.to_owned(),
            error,
        })?;
        let mut results: Vec<Result<Manifest, ManifestError>> = Vec::new();
        for file in files {
            let text = match read_manifest(&file) {
                Ok(text) => text,
                Err(source) => {
                    results.push(Err(ManifestError::Read {
                        path: file,
                        error: source,
                    }));
                    continue;
                }
            };
            if declares_other_kind(&text) {
                continue;
            }
            let result = Self::parse(&file, &text).and_then(|manifest| {
                let first = results.iter().flatten().find(|m| m.name == manifest.name);
                match first {
                    Some(first) => Err(ManifestError::Duplicate {
                        path: file.clone(),
                        name: manifest.name.clone(),
                        first: first.path.clone(),
                    }),
                    None => Ok(manifest),
                }
            });
            results.push(result);
        }
        Ok(results)
    }
}

/// A manifest file's text: a regular file of at most [`MAX_MANIFEST_BYTES`].
pub(super) fn read_manifest(path: &Path) -> std::io::Result<String> {
    crate::manifest::files::read_bounded_text(path, MAX_MANIFEST_BYTES)
}

/// Whether a YAML file clearly declares some other `kind` (a CRD, example objects) in its first
/// document. Files that do not parse, or have no `kind`, are treated as manifests so that their
/// errors are reported.
/// What the first YAML document of a file says it is.
enum Head {
    /// A mapping with this `kind` (and `apiVersion`, if any).
    Kind(String, String),
    /// A mapping without a `kind`.
    NoKind,
    /// Not a mapping (a scalar, a list), or no YAML at all.
    NotAMapping,
}

fn head(text: &str) -> Head {
    let Ok(mut documents) = krec_core::yaml::documents(text) else {
        // The parse error is reported as it is.
        return Head::NoKind;
    };
    let Some(first) = documents.next() else {
        return Head::NoKind;
    };
    match serde_json::Value::deserialize(first) {
        Ok(serde_json::Value::Object(map)) => match map.get("kind").and_then(|k| k.as_str()) {
            Some(kind) => Head::Kind(
                kind.to_owned(),
                map.get("apiVersion")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_owned(),
            ),
            None => Head::NoKind,
        },
        Ok(serde_json::Value::Null) | Err(_) => Head::NoKind,
        Ok(_) => Head::NotAMapping,
    }
}

pub(super) fn declares_other_kind(text: &str) -> bool {
    #[derive(Deserialize)]
    struct Head {
        kind: Option<String>,
    }
    // The first document decides: example files hold several objects.
    krec_core::yaml::documents(text)
        .into_iter()
        .flatten()
        .next()
        .and_then(|first| Head::deserialize(first).ok())
        .and_then(|h| h.kind)
        .is_some_and(|k| k != KIND && k != CLUSTER_KIND)
}

impl Manifest {
    /// The kinds the guest watches for their metadata alone: every mention of the kind in
    /// `for`, `owns` and `watches` says `metadataOnly` (one that does not asks for whole
    /// objects, which then serve every use).
    pub fn metadata_only_kinds(&self) -> Vec<Gvk> {
        let spec = &self.spec;
        let mentions: Vec<(Gvk, bool)> = spec
            .for_kind
            .iter()
            .chain(&spec.owns)
            .map(|k| (k.gvk(), k.metadata_only))
            .chain(
                spec.watches
                    .iter()
                    .map(|w| (w.kind_ref().gvk(), w.metadata_only)),
            )
            .collect();
        let mut kinds: Vec<Gvk> = Vec::new();
        for (gvk, metadata_only) in &mentions {
            if *metadata_only
                && !kinds.contains(gvk)
                && mentions.iter().all(|(g, m)| g != gvk || *m)
            {
                kinds.push(gvk.clone());
            }
        }
        kinds
    }

    /// The YAML files [`scan_dir`](Self::scan_dir) reads in `dir` (or `dir` itself, a single
    /// manifest file), sorted.
    ///
    /// # Errors
    ///
    /// When `dir` cannot be read.
    pub fn files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        // A single manifest file is a directory of one.
        if dir.is_file() {
            files.push(dir.to_owned());
        } else {
            collect_yaml(dir, &mut files)?;
        }
        files.sort();
        Ok(files)
    }
}

pub(super) fn collect_yaml(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        // `file_type` does not follow symlinks, so a link loop cannot recurse forever.
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            // Build output is never a manifest and can be large.
            if path
                .file_name()
                .is_some_and(|n| n == "target" || n == "src")
            {
                continue;
            }
            collect_yaml(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
    Ok(())
}

/// serde_yaml_ng prefixes its own (coarser) path, `spec.limits: `; drop it, since the error
/// already names the field, but keep its "at line X column Y", which helps.
pub(super) fn strip_location(message: &str) -> String {
    let message = message.trim();
    match message.split_once(": ") {
        Some((head, rest)) if !head.is_empty() && !head.contains(char::is_whitespace) => {
            rest.to_owned()
        }
        _ => message.to_owned(),
    }
}
