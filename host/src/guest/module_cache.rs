//! [`ModuleCache`]: compiled guest components on disk, so a restart or a swap back to a version
//! seen before does not compile again.
//!
//! Entries are keyed by the SHA-256 of the component's bytes and a hash of the engine's
//! compilation settings (wasmtime version, target, Cranelift flags), so an engine never loads
//! code compiled for another. Entries are written to a temporary file and renamed into place,
//! so a crash never leaves a half-written entry under a valid name. An entry that fails to load
//! (corrupt, or from an incompatible engine) is compiled again and replaced.
//!
//! Within one process, guests that run the same module share its compiled code: a component
//! loaded for one guest is handed to the next as long as any guest still runs it, so a thousand
//! guests of one module map its code once.
//!
//! # Trust
//!
//! Loading an entry runs native code from the cache directory: the directory must be writable
//! only by the host's user. It is created with mode 0700.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where a component came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Compiled now (and stored, if the cache is enabled).
    Compiled,
    /// Loaded from the cache.
    Cached,
    /// Not a component: code compiled into the host (see [`super::Runner`]).
    Native,
    /// Already loaded in this process for another guest, and shared.
    Shared,
}

/// Components loaded in this process, by module digest, while some guest runs them.
type Loaded = Arc<Mutex<HashMap<String, Weak<Component>>>>;

/// The on-disk cache of compiled components. See the [module docs](self).
#[derive(Clone, Debug, Default)]
pub struct ModuleCache {
    dir: Option<PathBuf>,
    loaded: Loaded,
}

/// `sha256:<hex>` of `bytes`: the identity of a module version.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

impl ModuleCache {
    /// A cache in `dir`, created (mode 0700) if missing.
    ///
    /// # Errors
    ///
    /// When the directory cannot be created.
    pub fn new(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(ModuleCache {
            dir: Some(dir.to_owned()),
            loaded: Loaded::default(),
        })
    }

    /// No cache: every load compiles.
    pub fn disabled() -> Self {
        ModuleCache {
            dir: None,
            loaded: Loaded::default(),
        }
    }

    /// The default directory: `$XDG_CACHE_HOME/krec/modules`, else `~/.cache/krec/modules`.
    pub fn default_dir() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("krec").join("modules"))
    }

    /// The cache directory, if enabled.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The entry of the module of `digest` (`sha256:<hex>`) compiled by `engine`.
    fn entry(&self, engine: &Engine, digest: &str) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let mut hasher = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let module = digest.strip_prefix("sha256:").unwrap_or(digest);
        Some(dir.join(format!("{module}-{:016x}.cwasm", hasher.finish())))
    }

    /// The compiled form of the component of `digest` (its bytes' [`digest`]), shared with
    /// the other guests of this cache that run it (see the [module docs](self)); else from the
    /// disk cache if there, otherwise `compile`d and stored. Keep the returned `Arc` as long as
    /// the component is in use: that is what keeps it shared.
    ///
    /// # Errors
    ///
    /// What `compile` returns.
    pub fn shared_component<E>(
        &self,
        engine: &Engine,
        digest: &str,
        compile: impl FnOnce() -> Result<Component, E>,
    ) -> Result<(Arc<Component>, Origin), E> {
        let key = digest.to_owned();
        {
            let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
            loaded.retain(|_, weak| weak.strong_count() > 0);
            if let Some(component) = loaded.get(&key).and_then(Weak::upgrade)
                && Engine::same(component.engine(), engine)
            {
                return Ok((component, Origin::Shared));
            }
        }
        let (component, origin) = self.component(engine, digest, compile)?;
        let component = Arc::new(component);
        self.loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, Arc::downgrade(&component));
        Ok((component, origin))
    }

    /// The compiled form of the component of `digest` (its bytes' [`digest`]): from the
    /// cache if there, otherwise `compile`d and stored. Cache problems are logged, never fatal.
    ///
    /// # Errors
    ///
    /// What `compile` returns.
    pub fn component<E>(
        &self,
        engine: &Engine,
        digest: &str,
        compile: impl FnOnce() -> Result<Component, E>,
    ) -> Result<(Component, Origin), E> {
        let Some(entry) = self.entry(engine, digest) else {
            return compile().map(|c| (c, Origin::Compiled));
        };
        if entry.exists() {
            match load(engine, &entry) {
                Ok(component) => return Ok((component, Origin::Cached)),
                Err(err) => tracing::warn!(
                    "module cache entry {} is unusable, compiling again: {err:#}",
                    entry.display()
                ),
            }
        }
        let component = compile()?;
        if let Err(err) = store(&component, &entry) {
            tracing::warn!(
                "cannot write module cache entry {}: {err:#}",
                entry.display()
            );
        }
        Ok((component, Origin::Compiled))
    }
}

/// Load a cache entry.
#[allow(unsafe_code)]
fn load(engine: &Engine, entry: &Path) -> wasmtime::Result<Component> {
    // SAFETY: `deserialize_file` trusts that the file holds code wasmtime compiled. Entries are
    // written only by `store` below, from `Component::serialize`, into a directory the host
    // created with mode 0700 (see the module docs); wasmtime checks the header and that the
    // entry was compiled by a compatible engine, and refuses it otherwise.
    unsafe { Component::deserialize_file(engine, entry) }
}

/// Write a cache entry atomically: a temporary file renamed into place. The temporary file's
/// name is this process's and this write's own, so two loads of one module at once (two
/// guests of it, or two processes) never write into each other's file.
fn store(component: &Component, entry: &Path) -> anyhow::Result<()> {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let serialized = component
        .serialize()
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = entry.with_extension(format!("tmp{}-{write}", std::process::id()));
    std::fs::write(&tmp, serialized)?;
    if let Err(err) = std::fs::rename(&tmp, entry) {
        let _ = std::fs::remove_file(&tmp);
        return Err(err.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(engine: &Engine) -> Result<Component, wasmtime::Error> {
        Component::new(engine, "(component)")
    }

    #[test]
    fn writes_of_one_entry_at_once_should_each_land_whole() {
        let engine = Engine::default();
        let dir = tempfile::tempdir().expect("tempdir");
        let entry = dir.path().join("entry.cwasm");
        let component = compile(&engine).expect("compiled");
        std::thread::scope(|scope| {
            let writers: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| store(&component, &entry)))
                .collect();
            for writer in writers {
                writer.join().expect("writer").expect("stored");
            }
        });
        load(&engine, &entry).expect("a whole entry");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(left, ["entry.cwasm"], "no temporary file left behind");
    }

    #[test]
    fn a_module_should_be_compiled_once_then_loaded_or_shared() {
        let engine = Engine::default();
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes = &digest(b"the module's bytes");
        let first = ModuleCache::new(dir.path()).expect("cache");
        let (held, origin) = first
            .shared_component(&engine, bytes, || compile(&engine))
            .expect("compiled");
        assert_eq!(origin, Origin::Compiled);
        // Another guest of the same module, while the first runs: the same code.
        let (_, origin) = first
            .shared_component(&engine, bytes, || -> Result<Component, wasmtime::Error> {
                panic!("must not compile again")
            })
            .expect("shared");
        assert_eq!(origin, Origin::Shared);
        drop(held);
        // A restart (a new cache over the same directory): loaded, not compiled.
        let restarted = ModuleCache::new(dir.path()).expect("cache");
        let (_, origin) = restarted
            .shared_component(&engine, bytes, || -> Result<Component, wasmtime::Error> {
                panic!("must not compile again")
            })
            .expect("loaded");
        assert_eq!(origin, Origin::Cached);
        // Another module is compiled; an engine with other settings does not reuse the entry.
        let (_, origin) = restarted
            .shared_component(&engine, &digest(b"other bytes"), || compile(&engine))
            .expect("compiled");
        assert_eq!(origin, Origin::Compiled);
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let other_engine = Engine::new(&config).expect("engine");
        let (_, origin) = ModuleCache::new(dir.path())
            .expect("cache")
            .shared_component(&other_engine, bytes, || compile(&other_engine))
            .expect("compiled");
        assert_eq!(origin, Origin::Compiled);
    }
}
