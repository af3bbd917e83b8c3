//! How many watches one user holds open at once.
//!
//! kube-apiserver bounds what one client can make it do with API Priority and Fairness; a
//! watch takes its seats only while it starts, so kube has no cap on how many stay open, and a
//! view-only ServiceAccount could open watches until the server ran out of memory and file
//! descriptors (11 000 held 422 MB here). This is the missing bound: past
//! [`DEFAULT_MAX_PER_USER`] open watches a user's next one is answered as APF answers a request
//! it sheds — `429 Too many requests, please try again later.` with `Retry-After: 1`, which
//! client-go's reflectors and kube-rs's watchers back off from. Members of `system:masters`
//! (APF's `exempt` priority level) are not counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::admission::UserInfo;
use crate::authorization;

/// Open watches one user may hold by default: far more than a controller's informers (one per
/// kind), far fewer than exhaust the server.
pub const DEFAULT_MAX_PER_USER: usize = 1000;

/// The open watches per user.
#[derive(Debug)]
pub struct Watchers {
    max_per_user: usize,
    open: Mutex<HashMap<String, usize>>,
}

impl Default for Watchers {
    fn default() -> Self {
        Watchers::new(DEFAULT_MAX_PER_USER)
    }
}

/// A watch counted against its user until dropped.
#[derive(Debug)]
pub struct Held {
    watchers: Arc<Watchers>,
    user: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut open = self.watchers.lock();
        if let Some(count) = open.get_mut(&self.user) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.user);
            }
        }
    }
}

impl Watchers {
    /// At most `max_per_user` open watches per user.
    pub fn new(max_per_user: usize) -> Self {
        Watchers {
            max_per_user,
            open: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        // Counts only; a poisoned lock still holds usable numbers.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count a new watch of `user`'s: `Ok(None)` for an exempt user, [`Shed`] when the user
    /// holds its most already.
    pub fn admit(self: &Arc<Self>, user: &UserInfo) -> Result<Option<Held>, Shed> {
        if authorization::unrestricted(user) {
            return Ok(None);
        }
        let mut open = self.lock();
        let count = open.entry(user.username.clone()).or_default();
        if *count >= self.max_per_user {
            tracing::debug!(
                user = %user.username,
                "refused a watch: the user holds {} open (the most allowed)",
                count
            );
            return Err(Shed);
        }
        *count += 1;
        Ok(Some(Held {
            watchers: self.clone(),
            user: user.username.clone(),
        }))
    }
}

/// A watch refused: its user holds the most allowed. Answered as kube-apiserver answers a
/// request its fairness sheds (`tooManyRequests` in its filters).
#[derive(Debug)]
pub struct Shed;

impl IntoResponse for Shed {
    fn into_response(self) -> Response {
        (
            StatusCode::TOO_MANY_REQUESTS,
            [
                (header::RETRY_AFTER, "1"),
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            ],
            "Too many requests, please try again later.\n",
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            username: name.to_owned(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..UserInfo::default()
        }
    }

    #[test]
    fn a_users_watches_past_the_cap_should_be_refused_until_one_ends() {
        let watchers = Arc::new(Watchers::new(2));
        let reader = user(
            "system:serviceaccount:a:reader",
            &["system:serviceaccounts"],
        );
        let first = watchers.admit(&reader).expect("first");
        let _second = watchers.admit(&reader).expect("second");
        let refused = watchers.admit(&reader).expect_err("third").into_response();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
        // Another user is not held by the first's watches; the admin is not counted.
        assert!(watchers.admit(&user("bob", &[])).is_ok());
        let admin = user("admin", &["system:masters"]);
        for _ in 0..5 {
            assert!(matches!(watchers.admit(&admin), Ok(None)));
        }
        drop(first);
        assert!(watchers.admit(&reader).is_ok());
    }
}
