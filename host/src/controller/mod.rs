//! Controllers: turning watch events into reconcile requests for a guest.
//!
//! [`handlers`] maps events on the `for`, `owns` and `watches` kinds of a manifest to requests
//! and applies its predicates. The workers that take requests from the guest's
//! [`WorkQueue`](crate::queue::WorkQueue) and run the guest come with the host core.

pub mod handlers;
