//! The host's bindings of the `krec:reconciler` world, generated from `wit/` by wasmtime.
//!
//! Every import is async (it may await the API server) and trappable (a host bug or a guest
//! breaking a limit ends the reconcile with a trap rather than an error value).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "reconciler",
    imports: { default: async | trappable },
    exports: { default: async },
});

pub use self::krec::reconciler::types::{
    Action as WitAction, Error as WitError, Gvk as WitGvk, Request as WitRequest,
};
