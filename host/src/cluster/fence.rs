//! Write fencing for sharded guests: a replica's writes for a guest stop before any other
//! replica can believe it owns the guest.
//!
//! A replica that renews a guest's Lease at local time `t` (the moment the request is sent)
//! extends the guest's [`Fence`] to `t + renew_deadline`. Another replica takes the Lease over
//! only after it has seen the Lease unchanged for `lease_duration` on its own clock, starting no
//! earlier than the renewal reached the API server — so after `t + lease_duration`. With
//! `renew_deadline < lease_duration` (validated), the fenced replica's last write is sent at
//! least `lease_duration − renew_deadline` before the taker's first (default 5 s, the margin
//! for a request in flight and for clock *rates* differing; clock offsets do not matter).

use std::sync::Mutex;

use tokio::time::Instant;

use super::AccessError;

/// Until when a guest's writes may go out from this replica. See the [module docs](self).
#[derive(Debug)]
pub struct Fence {
    guest: String,
    until: Mutex<Option<Instant>>,
}

impl Fence {
    /// A closed fence for `guest`: no write goes out until [`extend`](Self::extend).
    pub fn closed(guest: &str) -> Self {
        Fence {
            guest: guest.to_owned(),
            until: Mutex::new(None),
        }
    }

    /// Let writes go out until `until` (a later deadline than the current one only).
    pub fn extend(&self, until: Instant) {
        let mut current = self.until.lock().unwrap_or_else(|e| e.into_inner());
        if current.is_none_or(|c| c < until) {
            *current = Some(until);
        }
    }

    /// Stop writes now (the Lease was released or lost).
    pub fn close(&self) {
        *self.until.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Whether a write may go out now.
    pub fn is_open(&self) -> bool {
        self.until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|until| Instant::now() < until)
    }

    /// `Ok` while writes may go out; otherwise the error the guest's write gets (retried with
    /// backoff by the replica that owns the guest next).
    ///
    /// # Errors
    ///
    /// [`AccessError::Unavailable`] once the fence has closed.
    pub fn check(&self) -> Result<(), AccessError> {
        if self.is_open() {
            Ok(())
        } else {
            Err(AccessError::Unavailable(format!(
                "guest {} is not held by this replica any more (its Lease was not renewed in \
                 time or was handed over): write not sent",
                self.guest
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn writes_should_pass_only_until_the_deadline() {
        let fence = Fence::closed("g");
        assert!(fence.check().is_err(), "closed until extended");
        fence.extend(Instant::now() + Duration::from_secs(10));
        assert!(fence.check().is_ok());
        fence.extend(Instant::now() + Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(
            fence.check().is_ok(),
            "an earlier deadline does not shorten it"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        let err = fence.check().expect_err("past the deadline");
        assert!(err.to_string().contains("guest g"), "{err}");
        fence.extend(Instant::now() + Duration::from_secs(10));
        fence.close();
        assert!(fence.check().is_err(), "closed at once on release");
    }
}
