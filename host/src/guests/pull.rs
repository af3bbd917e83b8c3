//! Modules named `oci://…`: pulled before a reload compares, each guest's with its own
//! credentials, a slow registry holding its own guests only.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Manager;
use super::running::Background;
use crate::manifest::{Manifest, ManifestError, PulledModule};

/// How long the host's start waits for the modules it pulls before it starts without the guests
/// whose registries are slower (the watch loop starts them once pulled).
pub const START_PULL_WAIT: Duration = Duration::from_secs(30);

/// The longest a pull may take in all (a registry answering a byte at a time): past it, the
/// pull fails as a registry that does not answer does.
pub const PULL_DEADLINE: Duration = Duration::from_secs(120);

impl Manager {
    /// `scanned` with every `oci://` module resolved and pulled: its [`Manifest::pulled`] the local
    /// file, or the manifest refused (`PullFailed`), so a running version stays.
    pub(super) async fn pull_modules(
        &self,
        scanned: Vec<Result<Manifest, ManifestError>>,
        wait: Duration,
    ) -> Vec<Result<Manifest, ManifestError>> {
        // All at once: a slow registry holds none of the others.
        futures::future::join_all(scanned.into_iter().map(|result| async move {
            match result {
                Ok(manifest) => self.pull_module(manifest, wait).await,
                refused => refused,
            }
        }))
        .await
    }

    /// `manifest` with its `oci://` module (and `spec.rollout`'s candidate) pulled: each
    /// resolved to the local file, `spec` left as written.
    pub(super) async fn pull_module(
        &self,
        mut manifest: Manifest,
        wait: Duration,
    ) -> Result<Manifest, ManifestError> {
        let module = manifest.spec.module.clone();
        if let Some((file, digest)) = self.pull(&manifest, &module, "spec.module", wait).await? {
            manifest.pulled = Some(PulledModule {
                reference: module,
                file,
                artifact_digest: Some(digest),
            });
        }
        if let Some(candidate) = manifest.spec.rollout.as_ref().map(|r| r.candidate.clone())
            && let Some((file, _)) = self
                .pull(&manifest, &candidate, "spec.rollout.candidate", wait)
                .await?
        {
            manifest.candidate_pulled = Some(PulledModule {
                reference: candidate,
                file,
                artifact_digest: None,
            });
        }
        Ok(manifest)
    }

    /// The local file of `module` (named at `field`) if it is an `oci://` reference: pulled
    /// with `manifest`'s credentials and pull policy.
    pub(super) async fn pull(
        &self,
        manifest: &Manifest,
        module: &Path,
        field: &'static str,
        wait: Duration,
    ) -> Result<Option<(PathBuf, String)>, ManifestError> {
        let Some(Ok(reference)) = crate::guests::oci::reference(module) else {
            return Ok(None);
        };
        let auth = crate::guests::oci::pull_secret_auth(
            self.inner.cache.api(),
            manifest.spec.pull_secret.as_ref(),
            reference.resolve_registry(),
        )
        .await
        .map_err(|err| ManifestError::Pull {
            path: manifest.path.clone(),
            field: "spec.pullSecret",
            problem: err.to_string(),
        })?;
        let key = format!("{}\u{0}{}", manifest.name, module.display());
        let pending = self
            .inner
            .pulling
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        // A pull already going on is not waited for again.
        let ((mut task, background), wait) = match pending {
            Some(task) => (task, Duration::ZERO),
            None => {
                let registries = self.inner.registries.clone();
                let pull = manifest.spec.pull.clone();
                let done = self.inner.loads_done.clone();
                let background = Background::default();
                let ended = background.clone();
                let task = tokio::spawn(async move {
                    let fetched = tokio::time::timeout(
                        PULL_DEADLINE,
                        registries.fetch(&reference, &auth, &pull),
                    )
                    .await
                    .unwrap_or_else(|_| {
                        Err(crate::guests::oci::OciError::Registry {
                            reference: reference.whole(),
                            problem: format!(
                                "the registry did not finish the pull within {PULL_DEADLINE:?}"
                            ),
                        })
                    });
                    ended.ended(&done);
                    fetched
                });
                ((task, background), wait)
            }
        };
        // A slow registry holds this guest only: past the wait, the pull goes on alone.
        let joined = if task.is_finished() || !wait.is_zero() {
            tokio::time::timeout(wait.max(Duration::from_millis(1)), &mut task)
                .await
                .ok()
        } else {
            None
        };
        let Some(joined) = joined else {
            background.detach(task.is_finished(), &self.inner.loads_done);
            self.inner
                .pulling
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, (task, background));
            return Err(ManifestError::Pulling {
                path: manifest.path.clone(),
                field,
                reference: module.display().to_string(),
            });
        };
        match joined {
            Ok(Ok(pulled)) => Ok(Some(pulled)),
            Ok(Err(err)) => Err(ManifestError::Pull {
                path: manifest.path.clone(),
                field,
                problem: err.to_string(),
            }),
            Err(stopped) => Err(ManifestError::Pull {
                path: manifest.path.clone(),
                field,
                problem: format!("the pull stopped: {stopped}"),
            }),
        }
    }

    /// How often the running guests' module tags are to be resolved again (the shortest
    /// `pull.every` of those pulled by tag with the policy `Always`), if any are.
    pub(super) async fn pull_interval(&self) -> Option<Duration> {
        let guests = self.inner.guests.lock().await;
        guests
            .values()
            .filter(|g| {
                g.manifest.spec.pull.policy == crate::manifest::PullPolicy::Always
                    && g.manifest
                        .pulled_module()
                        .is_some_and(|p| !p.reference.to_string_lossy().contains('@'))
            })
            .map(|g| g.manifest.spec.pull.every)
            .min()
    }
}
