//! The calls to the host: the WIT imports in a component, the installed `native::Host`
//! elsewhere. Both have the generated bindings' signatures.

#[cfg(target_arch = "wasm32")]
pub(crate) use crate::bindings::krec::reconciler::{client, events, log};
#[cfg(not(target_arch = "wasm32"))]
pub(crate) use crate::host::{client, events, log};
