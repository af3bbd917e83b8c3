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

use krec_core::CallError;

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

    /// Until when a write starting now may go on: the current deadline while the fence is
    /// open. A write still unanswered then is abandoned (see [`Fence::write`]).
    ///
    /// # Errors
    ///
    /// [`CallError::Unavailable`] once the fence has closed.
    pub fn check(&self) -> Result<Instant, CallError> {
        let until = *self.until.lock().unwrap_or_else(|e| e.into_inner());
        match until {
            Some(until) if Instant::now() < until => Ok(until),
            _ => Err(self.refusal()),
        }
    }

    /// Run `write` if the fence is open, abandoning it at the deadline (a request not sent
    /// by then is never sent; one in flight is the margin the module docs describe).
    ///
    /// # Errors
    ///
    /// `write`'s own, or [`CallError::Unavailable`] when the fence is closed or closes first.
    pub async fn write<T>(
        &self,
        write: impl std::future::Future<Output = Result<T, CallError>>,
    ) -> Result<T, CallError> {
        let until = self.check()?;
        match tokio::time::timeout_at(until, write).await {
            Ok(result) => result,
            Err(_) => Err(self.refusal()),
        }
    }

    fn refusal(&self) -> CallError {
        CallError::Unavailable(format!(
            "guest {} is not held by this replica any more (its Lease was not renewed in time \
             or was handed over): write not sent",
            self.guest
        ))
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

    #[tokio::test(start_paused = true)]
    async fn a_write_should_be_abandoned_at_the_deadline() {
        let fence = Fence::closed("g");
        let quick = fence.write(async { Ok::<_, CallError>(1) }).await;
        assert!(quick.is_err(), "not even started while closed");
        fence.extend(Instant::now() + Duration::from_secs(2));
        assert_eq!(fence.write(async { Ok::<_, CallError>(1) }).await, Ok(1));
        let slow = fence
            .write(async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                Ok::<_, CallError>(2)
            })
            .await;
        assert!(slow.is_err(), "cut at the deadline: {slow:?}");
    }
}
