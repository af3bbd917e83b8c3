//! A dev build's sources: `krec dev`'s edit loop for interpreted guests.
//!
//! A Python or TypeScript component carries its interpreter, its SDK and its dependencies,
//! pre-initialised — 12–18 MB that take seconds to build and seconds to compile. Its own source
//! is a few kilobytes. A *dev build* (`python -m krec_guest.build … --dev`) is the same
//! component with a loader in place of the application: it names the folder of the guest's
//! sources in a custom section ([`SECTION`]), and imports them when an instance starts, from
//! that folder, which `krec dev` — and nothing else — mounts read-only at [`MOUNT`]. An edit then
//! needs no build and no compile: the component's bytes are unchanged (the module cache
//! answers), the guest's version changes with its sources ([`identity`]), and the new version's
//! instances import the edited files.
//!
//! Outside `krec dev` the folder is not mounted and the loader refuses to start, naming the
//! build to make instead.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The custom section of a dev build: the absolute path of the guest's source folder, UTF-8.
pub const SECTION: &str = "krec-dev-source";

/// Where a dev build's instances find its source folder (read-only).
pub const MOUNT: &str = "/krec-dev-source";

/// The import a dev build's loader reads its sources through when its language cannot open
/// files from [`MOUNT`] (a TypeScript dev build: `krec-guest build --dev`): `read(path)` → the
/// text of a file of the source folder (`wit/dev/sources.wit`).
pub const INTERFACE: &str = "krec:dev/sources@0.1.0";

/// The largest file [`read`] hands a loader.
pub const MAX_READ: u64 = 32 << 20;

/// Folders never part of a guest's sources: tools' caches, dependencies, build output.
const SKIPPED: &[&str] = &[
    "__pycache__",
    "node_modules",
    "venv",
    "target",
    "dist",
    "build",
];

/// At most this many files make a source folder; more is not a guest's source.
const MAX_FILES: usize = 2_000;

/// Whether this process mounts dev builds' sources: set by `krec dev` only.
static MOUNTED: AtomicBool = AtomicBool::new(false);

/// Mount dev builds' sources in this process (`krec dev`).
pub fn mount_in_this_process() {
    MOUNTED.store(true, Ordering::Relaxed);
}

/// A dev build's source folder, as the host mounts and watches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevSource {
    /// The folder the build named.
    pub dir: PathBuf,
    /// Its files, as the version was loaded: what is watched.
    pub files: Vec<PathBuf>,
    /// A digest over their names and contents: a new one is a new version.
    pub stamp: String,
}

impl DevSource {
    /// The sources of `bytes` if they are a dev build and this process mounts sources.
    pub fn of(bytes: &[u8]) -> Option<DevSource> {
        if !MOUNTED.load(Ordering::Relaxed) {
            return None;
        }
        let dir = named_in(bytes)?;
        let mut files = Vec::new();
        list(&dir, &mut files);
        files.sort();
        let mut hasher = sha2::Sha256::default();
        for file in &files {
            use sha2::Digest as _;
            let relative = file.strip_prefix(&dir).unwrap_or(file);
            hasher.update(relative.to_string_lossy().as_bytes());
            hasher.update([0]);
            hasher.update(std::fs::read(file).unwrap_or_default());
            hasher.update([0]);
        }
        use sha2::Digest as _;
        let stamp = format!("src:{}", hex(&hasher.finalize()));
        Some(DevSource { dir, files, stamp })
    }
}

/// [`INTERFACE`]'s `read`: the text of `path`, relative to the source folder `dir` (the
/// version's, as the host mounted it), or why not — no folder (not under `krec dev`, or not a
/// dev build), a path leaving the folder, a file missing, too large or not UTF-8.
pub fn read(dir: Option<&Path>, path: &str) -> Result<String, String> {
    let Some(dir) = dir else {
        return Err(
            "no sources are mounted: a dev build runs only under `krec dev` \
                    (build without --dev for anything else)"
                .into(),
        );
    };
    let relative = Path::new(path);
    if relative.is_absolute()
        || relative
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(format!(
            "{path:?}: not a path inside the source folder {}",
            dir.display()
        ));
    }
    let file = dir.join(relative);
    let shown = file.display();
    let size = std::fs::metadata(&file)
        .map_err(|err| format!("{shown}: {err}"))?
        .len();
    if size > MAX_READ {
        return Err(format!(
            "{shown}: {size} bytes, more than a source file may hold ({MAX_READ})"
        ));
    }
    let bytes = std::fs::read(&file).map_err(|err| format!("{shown}: {err}"))?;
    String::from_utf8(bytes).map_err(|err| format!("{shown}: not UTF-8: {err}"))
}

/// What tells one version of a module from another: the digest of `bytes`, and for a dev
/// build under `krec dev` its sources' stamp too (`sha256:…+src:…`).
pub fn identity(bytes: &[u8]) -> String {
    version_of(bytes, &super::module_cache::digest(bytes)).1
}

/// The sources of `bytes` (whose digest is `digest`) if a dev build under `krec dev`, and the
/// digest that identifies the version: `digest`, with the sources' stamp added.
pub fn version_of(bytes: &[u8], digest: &str) -> (Option<std::sync::Arc<DevSource>>, String) {
    match DevSource::of(bytes) {
        Some(source) => {
            let version = format!("{digest}+{}", source.stamp);
            (Some(std::sync::Arc::new(source)), version)
        }
        None => (None, digest.to_owned()),
    }
}

/// The source folder a dev build names: its top-level [`SECTION`] (nested modules are skipped
/// unread, so this is cheap on an 18 MB component).
pub fn named_in(bytes: &[u8]) -> Option<PathBuf> {
    use wasmparser::{Chunk, Parser, Payload};
    let mut parser = Parser::new(0);
    let mut data = bytes;
    loop {
        let (payload, consumed) = match parser.parse(data, true).ok()? {
            Chunk::Parsed { consumed, payload } => (payload, consumed),
            Chunk::NeedMoreData(_) => return None,
        };
        data = data.get(consumed..)?;
        match payload {
            Payload::ModuleSection {
                unchecked_range, ..
            }
            | Payload::ComponentSection {
                unchecked_range, ..
            } => data = data.get(unchecked_range.len()..)?,
            Payload::CodeSectionStart { size, .. } => {
                parser.skip_section();
                data = data.get(usize::try_from(size).ok()?..)?;
            }
            Payload::CustomSection(section) if section.name() == SECTION => {
                let dir = std::str::from_utf8(section.data()).ok()?;
                let dir = PathBuf::from(dir);
                return dir.is_absolute().then_some(dir);
            }
            Payload::End(_) => return None,
            _ => {}
        }
    }
}

/// The files under `dir`, skipping hidden entries and [`SKIPPED`] folders, at most
/// [`MAX_FILES`].
fn list(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if files.len() >= MAX_FILES {
            return;
        }
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name.ends_with(".wasm") {
            continue;
        }
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() && !SKIPPED.contains(&name.as_ref()) => list(&path, files),
            Ok(kind) if kind.is_file() => files.push(path),
            _ => {}
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bytes` as a section of id `id`: its id, its length (one LEB128 byte, short sections
    /// only) and its bytes.
    fn section(id: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![id, u8::try_from(bytes.len()).expect("short")];
        out.extend_from_slice(bytes);
        out
    }

    /// A component with a nested empty module, then a custom section named `name` holding
    /// `data`.
    fn component_with(name: &str, data: &[u8]) -> Vec<u8> {
        let mut component = b"\0asm\x0d\x00\x01\x00".to_vec();
        component.extend(section(1, b"\0asm\x01\x00\x00\x00"));
        let mut custom = vec![u8::try_from(name.len()).expect("short")];
        custom.extend_from_slice(name.as_bytes());
        custom.extend_from_slice(data);
        component.extend(section(0, &custom));
        component
    }

    #[test]
    fn the_import_should_be_the_one_its_wit_declares() {
        let wit = include_str!("../../../wit/dev/sources.wit");
        let (package, rest) = INTERFACE.split_once('/').expect("package/interface");
        let (interface, version) = rest.split_once('@').expect("a version");
        assert!(
            wit.contains(&format!("package {package}@{version};")),
            "{wit}"
        );
        assert!(wit.contains(&format!("interface {interface} {{")), "{wit}");
        assert!(
            wit.contains("read: func(path: string) -> result<string, string>;"),
            "{wit}"
        );
    }

    #[test]
    fn a_loader_should_read_files_of_its_folder_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("sub/guest.js"), "module.exports = 1;").expect("write");
        std::fs::write(dir.path().join("binary"), [0xff, 0xfe]).expect("write");
        let folder = Some(dir.path());
        assert_eq!(
            read(folder, "sub/guest.js").as_deref(),
            Ok("module.exports = 1;")
        );
        for outside in [
            "../etc/passwd",
            "/etc/passwd",
            "sub/../../x",
            "./sub/guest.js",
        ] {
            let err = read(folder, outside).expect_err(outside);
            assert!(err.contains("not a path inside the source folder"), "{err}");
        }
        assert!(
            read(folder, "missing.js")
                .expect_err("missing")
                .contains("missing.js")
        );
        assert!(
            read(folder, "binary")
                .expect_err("binary")
                .contains("not UTF-8")
        );
        let err = read(None, "sub/guest.js").expect_err("not mounted");
        assert!(err.contains("only under `krec dev`"), "{err}");
    }

    #[test]
    fn a_dev_build_should_name_its_source_folder_and_others_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().to_string_lossy().into_owned();
        assert_eq!(
            named_in(&component_with(SECTION, path.as_bytes())),
            Some(dir.path().to_owned())
        );
        assert_eq!(named_in(&component_with("other", path.as_bytes())), None);
        assert_eq!(named_in(&component_with(SECTION, b"relative/dir")), None);
        assert_eq!(named_in(b"not wasm"), None);
    }

    #[test]
    fn the_stamp_should_change_with_a_source_file_and_not_with_caches() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("app.py"), "x = 1\n").expect("write");
        std::fs::create_dir(dir.path().join("__pycache__")).expect("mkdir");
        let bytes = component_with(SECTION, dir.path().to_string_lossy().as_bytes());
        mount_in_this_process();
        let first = DevSource::of(&bytes).expect("a dev build");
        assert_eq!(first.files, [dir.path().join("app.py")]);
        std::fs::write(dir.path().join("__pycache__/app.pyc"), "cache").expect("write");
        std::fs::write(dir.path().join("app.wasm"), "built").expect("write");
        assert_eq!(
            DevSource::of(&bytes).expect("a dev build").stamp,
            first.stamp
        );
        std::fs::write(dir.path().join("app.py"), "x = 2\n").expect("write");
        let second = DevSource::of(&bytes).expect("a dev build");
        assert_ne!(second.stamp, first.stamp);
        assert!(identity(&bytes).ends_with(&second.stamp));
    }
}
