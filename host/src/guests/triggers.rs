//! What reloads: the manifest and module files changing (debounced), the guest objects'
//! specs changing, SIGHUP, a refused change's retry, the host's permissions granted, a
//! background load ending, and the modules' pull period.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::Manager;
use super::fingerprint::Fingerprint;
use super::reload::LOOP_WAIT;
use crate::guests::from_cluster::ObjectSource;
use crate::manifest::Manifest;

/// How often the files are looked at when the platform's watcher cannot start (inotify's
/// per-user instances used up by other programs).
pub const POLL_WITHOUT_EVENTS: Duration = Duration::from_secs(1);

/// How long file changes settle before a reload: editors and `cargo build` write in bursts.
pub const RELOAD_DEBOUNCE: Duration = Duration::from_millis(100);

/// The running manifest watcher of [`Manager::watch`].
#[derive(Debug)]
pub struct Watcher {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    /// Stop watching, letting a reload in progress finish first.
    pub async fn stop(self) {
        self.stop.send_replace(true);
        let _ = self.task.await;
    }
}

/// First wait before a refused reload is retried without a change to its files (a kind not
/// served yet may be by then); doubled after every refusal up to [`MAX_RELOAD_RETRY`].
pub const FIRST_RELOAD_RETRY: Duration = Duration::from_secs(1);

/// Longest wait between retries of a refused reload.
pub const MAX_RELOAD_RETRY: Duration = Duration::from_secs(300);

/// When a reload that refused something is tried again: after a delay that doubles with every
/// refusal (a change to the files reloads at once, and a reload that refuses nothing resets it).
#[derive(Default)]
pub(super) struct Retry {
    delay: Duration,
    at: Option<tokio::time::Instant>,
}

impl Retry {
    /// Schedule the next retry after a reload (`refused`: it refused something), or none.
    pub(super) fn after(&mut self, refused: bool) {
        if !refused {
            *self = Retry::default();
            return;
        }
        self.delay = if self.delay.is_zero() {
            FIRST_RELOAD_RETRY
        } else {
            (self.delay * 2).min(MAX_RELOAD_RETRY)
        };
        self.at = Some(tokio::time::Instant::now() + self.delay);
    }

    /// Resolves when the retry is due; never when none is scheduled.
    pub(super) async fn due(&self) {
        match self.at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

/// When the modules pulled by tag are next resolved again: a deadline kept across the watch
/// loop's turns, so that the loop waking for anything else (a status write, a file event that
/// changes nothing) never postpones it.
#[derive(Debug, Default)]
pub(super) struct Period {
    at: Option<tokio::time::Instant>,
}

impl Period {
    /// Keep the deadline for a period of `every` (none: no deadline); a period shorter than
    /// the one the deadline was set for brings it forward, never back.
    pub(super) fn arm(&mut self, every: Option<Duration>) {
        self.at = every.map(|every| {
            let next = tokio::time::Instant::now() + every;
            self.at.map_or(next, |at| at.min(next))
        });
    }

    /// The deadline has been met (the modules were resolved): the next one is a period on.
    pub(super) fn restart(&mut self) {
        self.at = None;
    }

    /// Resolves when the deadline is due; never when there is none.
    pub(super) async fn due(&self) {
        match self.at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

/// How often the manifests refused for the host's permissions are checked again (a few access
/// reviews each): a Role or binding that allows one starts it within this.
pub const PERMISSION_RECHECK: Duration = Duration::from_secs(2);

/// What woke the watch loop.
#[derive(Debug)]
enum Trigger {
    /// A manifest file, or a module file a manifest names, was written, added or removed.
    Files,
    /// A guest object was created or deleted, or its spec changed.
    Objects,
    /// SIGHUP.
    Hangup,
    /// A refused change is due to be tried again.
    Retry,
    /// The host may now do what the guest refused for its permissions asks.
    Permitted(String),
    /// A version loading in the background is done.
    LoadEnded,
    /// The files or objects changed between the last load and the watch's start.
    Missed,
    /// The modules pulled by tag are due to be resolved again.
    Resolve,
    /// The watcher was stopped.
    Stop,
}

/// The watch loop's triggers besides the files: the guest objects' changes, SIGHUP, the
/// watcher's stop, the background loads' ends, and the retry and resolve deadlines.
struct Triggers {
    objects: Option<tokio::sync::watch::Receiver<u64>>,
    #[cfg(unix)]
    hangup: Option<tokio::signal::unix::Signal>,
    stopped: tokio::sync::watch::Receiver<bool>,
    loads_ended: tokio::sync::watch::Receiver<u64>,
    retry: Retry,
    resolve: Period,
}

impl Triggers {
    /// The next trigger, from `files` or any of these.
    async fn next(&mut self, manager: &Manager, files: &mut FileWatch) -> Trigger {
        #[cfg(unix)]
        let hup = async {
            match self.hangup.as_mut() {
                Some(h) => {
                    h.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let hup = std::future::pending::<()>();
        let object_changed = async {
            match self.objects.as_mut() {
                Some(changes) => {
                    if changes.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                    // Let a burst of edits (kubectl apply -f of a directory) settle.
                    tokio::time::sleep(RELOAD_DEBOUNCE).await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = self.stopped.wait_for(|s| *s) => Trigger::Stop,
            () = self.resolve.due() => Trigger::Resolve,
            changed = files.changed() => if changed { Trigger::Files } else { Trigger::Stop },
            () = object_changed => Trigger::Objects,
            () = hup => Trigger::Hangup,
            () = self.retry.due() => Trigger::Retry,
            guest = manager.permission_granted() => Trigger::Permitted(guest),
            _ = self.loads_ended.changed() => Trigger::LoadEnded,
        }
    }

    /// A reload starts: the object changes and background loads seen so far are its to take
    /// up, and only later ones trigger another.
    fn settle(&mut self) {
        if let Some(changes) = self.objects.as_mut() {
            changes.mark_unchanged();
        }
        self.loads_ended.borrow_and_update();
    }
}

/// The manifest directory and the module files its manifests name, watched for changes: the
/// file system's events, debounced ([`RELOAD_DEBOUNCE`]), those of YAML files and of the
/// modules that matter.
struct FileWatch {
    /// `None` when the files are polled instead: asked to ([`ManagerOptions::poll_files`]), or
    /// the platform's watcher could not start.
    ///
    /// [`ManagerOptions::poll_files`]: super::ManagerOptions::poll_files
    debouncer: Option<notify_debouncer_mini::Debouncer<notify::RecommendedWatcher>>,
    /// How often the files are looked at without a watcher.
    poll: Duration,
    events: tokio::sync::mpsc::UnboundedReceiver<()>,
    /// The module files whose events matter (as named, and canonical).
    relevant: Arc<RwLock<BTreeSet<PathBuf>>>,
    dir: Option<PathBuf>,
    /// Folders of modules outside `dir`, watched for them.
    watched_dirs: BTreeSet<PathBuf>,
}

impl FileWatch {
    /// Watch `dir` (recursively), if any: by the file system's events, or by looking every
    /// `poll`.
    fn start(dir: Option<&Path>, poll: Option<Duration>) -> Self {
        use notify::RecursiveMode;
        let (events_tx, events) = tokio::sync::mpsc::unbounded_channel::<()>();
        let relevant = Arc::new(RwLock::new(BTreeSet::<PathBuf>::new()));
        if let Some(poll) = poll {
            tracing::info!("looking at the manifests and modules every {poll:?}");
            return FileWatch {
                debouncer: None,
                poll,
                events,
                relevant,
                dir: dir.map(Path::to_owned),
                watched_dirs: BTreeSet::new(),
            };
        }
        let filter = relevant.clone();
        let debouncer = notify_debouncer_mini::new_debouncer(
            RELOAD_DEBOUNCE,
            move |result: notify_debouncer_mini::DebounceEventResult| match result {
                Ok(events) => {
                    let modules = filter.read().unwrap_or_else(|e| e.into_inner());
                    let matters = events.iter().any(|e| {
                        let yaml = e
                            .path
                            .extension()
                            .is_some_and(|x| x == "yaml" || x == "yml");
                        yaml || modules.contains(&e.path)
                    });
                    if matters {
                        let _ = events_tx.send(());
                    }
                }
                Err(err) => tracing::warn!("watching for manifest and module changes: {err}"),
            },
        );
        let mut debouncer = match debouncer {
            Ok(d) => Some(d),
            Err(err) => {
                tracing::error!(
                    "cannot watch files for changes ({err}): looking at them every {POLL_WITHOUT_EVENTS:?} instead"
                );
                None
            }
        };
        if let (Some(debouncer), Some(dir)) = (&mut debouncer, dir)
            && let Err(err) = debouncer.watcher().watch(dir, RecursiveMode::Recursive)
        {
            tracing::error!("cannot watch {}: {err}", dir.display());
        }
        FileWatch {
            debouncer,
            poll: POLL_WITHOUT_EVENTS,
            events,
            relevant,
            dir: dir.map(Path::to_owned),
            watched_dirs: BTreeSet::new(),
        }
    }

    /// Watch `modules` too: their events matter, and the folders of those outside the
    /// directory are watched. Files only: a module in a registry (`oci://…`) is watched by its
    /// pull period.
    fn refresh(&mut self, modules: Vec<PathBuf>) {
        let Some(debouncer) = &mut self.debouncer else {
            return;
        };
        let absolute: BTreeSet<PathBuf> = modules
            .iter()
            .filter(|m| crate::guests::oci::reference(m).is_none())
            .map(|m| std::fs::canonicalize(m).unwrap_or_else(|_| m.clone()))
            .collect();
        for module in &absolute {
            if let Some(parent) = module.parent()
                && !self.dir.as_ref().is_some_and(|dir| parent.starts_with(dir))
                && self.watched_dirs.insert(parent.to_owned())
                && let Err(err) = debouncer
                    .watcher()
                    .watch(parent, notify::RecursiveMode::NonRecursive)
            {
                tracing::warn!("cannot watch {}: {err}", parent.display());
            }
        }
        let mut paths: BTreeSet<PathBuf> = modules.into_iter().collect();
        paths.extend(absolute);
        *self.relevant.write().unwrap_or_else(|e| e.into_inner()) = paths;
    }

    /// Resolves when files that matter changed: `true`; `false` when no events can come any
    /// more. Without a watcher (polling, or the user's inotify instances used up), every
    /// `poll`: the loop compares the files' fingerprint itself.
    async fn changed(&mut self) -> bool {
        if self.debouncer.is_none() {
            tokio::time::sleep(self.poll).await;
            return true;
        }
        self.events.recv().await.is_some()
    }

    /// Forget the events so far: a reload starts, and takes them up.
    fn drain(&mut self) {
        while self.events.try_recv().is_ok() {}
    }
}

impl Manager {
    /// Reload on changes to the manifest files in `dir` or the modules they name (debounced by
    /// [`RELOAD_DEBOUNCE`]) and on SIGHUP, until the returned task is aborted.
    pub fn watch(&self, dir: PathBuf) -> Watcher {
        self.watch_sources(Some(dir))
    }

    /// Like [`watch`](Self::watch) for the manifests in `dir` (if any) and, with
    /// [`from_cluster`](super::ManagerOptions::from_cluster), the guest objects: an object created,
    /// deleted or whose spec changed (its generation) reloads too.
    pub fn watch_sources(&self, dir: Option<PathBuf>) -> Watcher {
        let manager = self.clone();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move { manager.watch_loop(dir, stopped).await });
        Watcher { stop, task }
    }

    pub(super) async fn watch_loop(
        &self,
        dir: Option<PathBuf>,
        stopped: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut files = FileWatch::start(dir.as_deref(), self.inner.poll_files);
        let mut triggers = Triggers {
            objects: self.inner.objects.as_ref().map(ObjectSource::changes),
            #[cfg(unix)]
            hangup: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok(),
            stopped,
            loads_ended: self.inner.loads_done.subscribe(),
            retry: Retry::default(),
            resolve: Period::default(),
        };
        let mut modules = self.module_paths(dir.as_deref()).await;
        files.refresh(modules.clone());
        // What the files looked like at the last reload, told from their metadata alone:
        // opening them (as a reload does) is itself an event, which must not start another.
        let mut seen = Fingerprint::of(dir.as_deref(), &modules);
        // What the objects were: status writes and label edits do not reload.
        let mut seen_objects = self.generations();
        // Only now are events noticed: a file written or an object changed since the guests
        // were last loaded (by the start, or a reload before this watch) is taken up at once.
        let mut missed = self
            .inner
            .loaded_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .changed_since()
            || *self.inner.applied.read().unwrap_or_else(|e| e.into_inner()) != seen_objects;
        let what = match (&dir, &self.inner.objects) {
            (Some(dir), None) => dir.display().to_string(),
            (Some(dir), Some(_)) => format!("{} and the guest objects", dir.display()),
            (None, _) => "the guest objects".to_owned(),
        };
        loop {
            // Modules pulled by tag: resolved again as their `pull.every` says, whatever else
            // wakes the loop meanwhile.
            triggers.resolve.arm(self.pull_interval().await);
            // A reload in progress always completes: stopping is only noticed here, between
            // reloads.
            let trigger = if std::mem::take(&mut missed) {
                Trigger::Missed
            } else {
                triggers.next(self, &mut files).await
            };
            // Whether neither the files nor the objects changed since the last reload. Both are
            // compared whichever woke the loop: a file event that changes nothing can win the
            // race with an object's change (and drop its debounce), which must not be lost.
            let unchanged = || {
                Fingerprint::of(dir.as_deref(), &modules) == seen
                    && self.generations() == seen_objects
            };
            match trigger {
                Trigger::Stop => return,
                Trigger::Files | Trigger::Objects if unchanged() => continue,
                Trigger::Files | Trigger::Objects => {}
                Trigger::Resolve => tracing::debug!("resolving the modules' tags again"),
                Trigger::Hangup => tracing::info!("SIGHUP: reloading {what}"),
                Trigger::Retry => tracing::info!(
                    "retrying the changes refused {:?} ago",
                    triggers.retry.delay
                ),
                Trigger::Permitted(guest) => {
                    tracing::info!("guest {guest}: the host may now do what it asks; loading it")
                }
                Trigger::LoadEnded => {
                    tracing::debug!("a version loading in the background is done: taking it up");
                }
                Trigger::Missed => {
                    tracing::info!("{what} changed since the guests were loaded: reloading");
                }
            }
            // What woke the loop until now is taken up by this reload; what happens from here
            // on starts another.
            files.drain();
            triggers.settle();
            modules = self.module_paths(dir.as_deref()).await;
            seen = Fingerprint::of(dir.as_deref(), &modules);
            seen_objects = self.generations();
            let refused = self.reload_logged(dir.as_deref(), &what).await;
            // A reload resolves every tag: the next resolve is a period from now.
            triggers.resolve.restart();
            triggers.retry.after(refused);
            files.refresh(modules.clone());
        }
    }

    /// Resolves (with its name) once the host may do everything some guest refused for its
    /// permissions asks for: checked every [`PERMISSION_RECHECK`]; never while none is refused.
    pub(super) async fn permission_granted(&self) -> String {
        loop {
            tokio::time::sleep(PERMISSION_RECHECK).await;
            let refused = self
                .inner
                .permission_refused
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            for manifest in refused {
                if crate::cluster::permissions::first_missing(self.inner.cache.api(), &manifest)
                    .await
                    .is_none()
                {
                    return manifest.name.clone();
                }
            }
        }
    }

    /// Reload and log what changed; whether anything was refused.
    pub(super) async fn reload_logged(&self, dir: Option<&Path>, what: &str) -> bool {
        let result = self.reload_within(dir, LOOP_WAIT).await;
        let counted = match &result {
            Ok(report) if report.is_empty() => "unchanged",
            Ok(report) if report.rejected.is_empty() => "changed",
            _ => "refused",
        };
        self.inner
            .metrics
            .reloads
            .get_or_create(&crate::process::metrics::ReloadLabels {
                result: counted.into(),
            })
            .inc();
        match result {
            Ok(report) if report.is_empty() => false,
            Ok(report) => {
                tracing::info!(
                    "reloaded {what}: started {:?}, swapped {:?}, removed {:?}, rejected {}",
                    report.started,
                    report.swapped,
                    report.removed,
                    report.rejected.len()
                );
                !report.rejected.is_empty()
            }
            Err(err) => {
                tracing::error!("reloading {what}: {err}; nothing changed");
                true
            }
        }
    }

    /// The module files that matter to a reload of `dir`: those the running guests run (and
    /// a dev build's source files) and those the manifests in `dir` name now (a guest refused
    /// so far starts when its module is rebuilt).
    pub(super) async fn module_paths(&self, dir: Option<&Path>) -> Vec<PathBuf> {
        let files = dir
            .and_then(|dir| Manifest::scan_dir(dir).ok())
            .unwrap_or_default();
        let objects = self
            .inner
            .objects
            .as_ref()
            .map(ObjectSource::scan)
            .unwrap_or_default();
        let mut paths: BTreeSet<PathBuf> = files
            .into_iter()
            .chain(objects)
            .flatten()
            .map(|m| m.spec.module)
            .collect();
        let guests = self.inner.guests.lock().await;
        paths.extend(guests.values().map(|g| g.manifest.module_file().to_owned()));
        // A dev build's sources are its module as much as its file is.
        for guest in guests.values() {
            if let Some(source) = guest.controller.module().dev_source() {
                paths.extend(source.files.iter().cloned());
            }
        }
        paths.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_pull_period_should_fire_on_time_whatever_else_wakes_the_loop() {
        // The watch loop's turns as they go with a busy guest: a status write every second
        // wakes it (and changes nothing), and each turn arms the period again.
        let every = Duration::from_secs(60);
        let start = tokio::time::Instant::now();
        let mut period = Period::default();
        let mut status_writes = tokio::time::interval(Duration::from_secs(1));
        let fired = loop {
            period.arm(Some(every));
            tokio::select! {
                () = period.due() => break tokio::time::Instant::now(),
                _ = status_writes.tick() => {}
            }
        };
        assert_eq!(fired - start, every);
        // Resolved: the next deadline is a period on; a shorter period brings it forward.
        period.restart();
        period.arm(Some(every));
        period.arm(Some(Duration::from_secs(5)));
        period.arm(Some(every));
        let before = tokio::time::Instant::now();
        period.due().await;
        assert_eq!(tokio::time::Instant::now() - before, Duration::from_secs(5));
        period.arm(None);
        assert!(
            tokio::time::timeout(Duration::from_secs(3600), period.due())
                .await
                .is_err(),
            "no module pulled by tag: never due"
        );
    }
}
