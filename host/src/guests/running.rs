//! The guest set's records: a running [`Guest`], a version on its way in ([`Prepared`],
//! [`Version`]), and the loads and pulls left to finish in the background.

use std::path::PathBuf;
use std::sync::Arc;

use super::report::StartError;
use crate::cluster::ClusterAccess;
use crate::cluster::cache::{Informer, InformerUse};
use crate::cluster::live::Reads;
use crate::controller::Controller;
use crate::guest::GuestModule;
use crate::manifest::Manifest;

/// One running guest.
pub(super) struct Guest {
    pub(super) controller: Arc<Controller>,
    pub(super) manifest: Arc<Manifest>,
    /// Digest of the module file it runs.
    pub(super) digest: String,
    /// Digest of its `spec.rollout` candidate's file, as loaded (empty: none, or not loaded).
    pub(super) candidate_digest: String,
    /// Its uses of the informers it watches: dropped, they stop the watches no guest needs.
    pub(super) informers: Vec<InformerUse>,
    /// The informers its reads go through, kept across its versions.
    pub(super) reads: Arc<Reads>,
}

/// A loaded, instantiated version of a guest, not yet running.
pub(super) struct Prepared {
    pub(super) module: Arc<GuestModule>,
    pub(super) cluster: Arc<dyn ClusterAccess>,
    /// `spec.rollout`'s candidate, loaded and instantiated as the module is — or why it could
    /// not be (the live version runs regardless).
    pub(super) candidate: Option<Result<Arc<GuestModule>, StartError>>,
}

/// A version of a guest ready to run: loaded, instantiated, its watches started and synced.
pub(super) struct Version {
    pub(super) manifest: Arc<Manifest>,
    pub(super) prepared: Prepared,
    pub(super) informers: Vec<InformerUse>,
    pub(super) for_informers: Vec<Arc<Informer>>,
    pub(super) reads: Arc<Reads>,
}

/// A pull going on in the background: the module's file and manifest digest, or why not.
pub(super) type PullTask = (
    tokio::task::JoinHandle<Result<(PathBuf, String), crate::guests::oci::OciError>>,
    Background,
);

/// Whether a pull or load was left to finish in the background: only then does its end wake
/// the watch loop (`loads_done`). A pull or load a reload waited for and took up itself must
/// not — the reload its end started would start the same again: a loop, hot when it fails.
///
/// The task's end and the reload's letting go meet in one atomic state: whichever comes
/// second wakes the loop, so an end falling between the two is never lost (it was: a task
/// ending as the reload let go of it told no one, and its version waited for the next change).
#[derive(Clone, Debug, Default)]
pub(super) struct Background(Arc<std::sync::atomic::AtomicU8>);

/// [`Background`]'s states: neither yet, let go of, ended.
const RUNNING: u8 = 0;
const DETACHED: u8 = 1;
const ENDED: u8 = 2;

impl Background {
    /// At the task's end: tell the watch loop, if the reload let go of it already.
    pub(super) fn ended(&self, done: &tokio::sync::watch::Sender<u64>) {
        if self.0.swap(ENDED, std::sync::atomic::Ordering::AcqRel) == DETACHED {
            done.send_modify(|n| *n += 1);
        }
    }

    /// Left to finish alone: its end wakes the watch loop — now, if it ended meanwhile, or if
    /// the task is `finished` without saying so (it panicked).
    pub(super) fn detach(&self, finished: bool, done: &tokio::sync::watch::Sender<u64>) {
        // A later reload can take a load up and let go of it again: already let go of, its
        // end will say so itself.
        let before = self.0.swap(DETACHED, std::sync::atomic::Ordering::AcqRel);
        if before == ENDED || (before == RUNNING && finished) {
            done.send_modify(|n| *n += 1);
        }
    }
}

/// A version a reload loads: its manifest, the read set of the guest it replaces (if any), and
/// its module's and candidate's digests.
pub(super) type ToLoad = (Manifest, Option<Arc<Reads>>, Arc<LoadDigests>);

/// The digests of the module and candidate files a load read, each set when it is read (a swap
/// knows them before: the reload compared them with the running version's). A new guest's
/// files are read once, by its load, not again by the reload that starts it.
#[derive(Debug, Default)]
pub(super) struct LoadDigests {
    pub(super) module: std::sync::OnceLock<String>,
    pub(super) candidate: std::sync::OnceLock<String>,
}

impl LoadDigests {
    /// Digests known already.
    pub(super) fn known(module: String, candidate: String) -> Arc<Self> {
        let digests = LoadDigests::default();
        let _ = digests.module.set(module);
        let _ = digests.candidate.set(candidate);
        Arc::new(digests)
    }

    /// Whether the load read `manifest`'s files as they are now: each file it read has the
    /// digest it read; one it has not read yet it will read as it is now.
    pub(super) fn current(&self, manifest: &Manifest) -> bool {
        let module = self
            .module
            .get()
            .is_none_or(|d| *d == module_digest(manifest));
        let candidate = self
            .candidate
            .get()
            .is_none_or(|d| *d == candidate_digest(manifest));
        module && candidate
    }
}

/// The digest of `manifest`'s rollout candidate's file (empty: none, or unreadable).
pub(super) fn candidate_digest(manifest: &Manifest) -> String {
    manifest
        .candidate_file()
        .and_then(|file| crate::guest::read_module(file).ok())
        .map(|b| crate::guest::dev_source::identity(&b))
        .unwrap_or_default()
}

/// The digest of `manifest`'s module file (empty: unreadable).
pub(super) fn module_digest(manifest: &Manifest) -> String {
    crate::guest::read_module(manifest.module_file())
        .map(|b| crate::guest::dev_source::identity(&b))
        .unwrap_or_default()
}

/// A version still loading after the reload that started it.
pub(super) struct Loading {
    /// The manifest it loads, and its module's and candidate's digests: a reload wanting the
    /// same takes it up, one wanting another starts again.
    pub(super) manifest: Manifest,
    pub(super) digests: Arc<LoadDigests>,
    pub(super) task: tokio::task::JoinHandle<Result<Version, StartError>>,
    pub(super) background: Background,
}

#[cfg(test)]
mod tests {
    use super::Background;

    /// How many times the watch loop is woken when the task ends and the reload lets go of it,
    /// the end first or not, the task seen `finished` or not.
    fn wakes(end_first: bool, finished: bool) -> u64 {
        let (done, seen) = tokio::sync::watch::channel(0u64);
        let background = Background::default();
        if end_first {
            background.ended(&done);
            background.detach(finished, &done);
        } else {
            background.detach(finished, &done);
            background.ended(&done);
        }
        *seen.borrow()
    }

    #[test]
    fn a_background_end_should_wake_the_loop_once_whichever_comes_first() {
        // The end before the letting go: the reload saw the task not yet finished (the race
        // that lost a swap on CI), or finished.
        assert_eq!(wakes(true, false), 1);
        assert_eq!(wakes(true, true), 1);
        // Let go of, then ended; let go of twice (two reloads), then ended.
        assert_eq!(wakes(false, false), 1);
        let (done, seen) = tokio::sync::watch::channel(0u64);
        let background = Background::default();
        background.detach(false, &done);
        background.detach(false, &done);
        assert_eq!(*seen.borrow(), 0);
        background.ended(&done);
        assert_eq!(*seen.borrow(), 1);
        // Ended without being let go of (the reload took it up itself): no wake.
        let (done, seen) = tokio::sync::watch::channel(0u64);
        Background::default().ended(&done);
        assert_eq!(*seen.borrow(), 0);
        // A task finished without saying so (it panicked): woken at the letting go.
        let (done, seen) = tokio::sync::watch::channel(0u64);
        Background::default().detach(true, &done);
        assert_eq!(*seen.borrow(), 1);
    }
}
