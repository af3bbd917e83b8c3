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

use self::krec::reconciler::client::PatchType as WitPatchType;
pub use self::krec::reconciler::types::{
    Action as WitAction, Error as WitError, Gvk as WitGvk, Request as WitRequest,
};
use krec_core::CallError;

/// The conversions between [`CallError`] and the WIT `error` variant the guests see, from the
/// list of the cases.
macro_rules! cases {
    ($($case:ident),* $(,)?) => {
        impl From<CallError> for WitError {
            fn from(err: CallError) -> Self {
                match err {
                    $(CallError::$case(m) => WitError::$case(m),)*
                }
            }
        }

        impl From<WitError> for CallError {
            fn from(err: WitError) -> Self {
                match err {
                    $(WitError::$case(m) => CallError::$case(m),)*
                }
            }
        }
    };
}

krec_core::with_call_error_cases!(cases);

/// The conversions between [`PatchType`](krec_core::PatchType) and the other enums with the same cases — the WIT
/// `patch-type` the guests send, and the guest SDK's native `PatchType` (the native arm) — from
/// one list of the cases.
macro_rules! patch_cases {
    ($($case:ident),* $(,)?) => {
        impl From<WitPatchType> for krec_core::PatchType {
            fn from(how: WitPatchType) -> Self {
                match how {
                    $(WitPatchType::$case => krec_core::PatchType::$case,)*
                }
            }
        }

        #[cfg(feature = "native")]
        impl From<krec_guest::native::PatchType> for WitPatchType {
            fn from(how: krec_guest::native::PatchType) -> Self {
                match how {
                    $(krec_guest::native::PatchType::$case => WitPatchType::$case,)*
                }
            }
        }
    };
}

patch_cases!(Merge, Json, Strategic, Apply);

/// The host's bindings of the `guest` world (a reconciler and admission webhooks in one
/// component, what the SDK builds since WIT 0.1.1): its admission exports and the `reader`
/// import. The interfaces it shares with `reconciler` are the ones above.
pub mod guest {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "guest",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "krec:reconciler/types": super::krec::reconciler::types,
            "krec:reconciler/client": super::krec::reconciler::client,
            "krec:reconciler/events": super::krec::reconciler::events,
            "krec:reconciler/log": super::krec::reconciler::log,
        },
    });

    pub use self::krec::reconciler::admission_types::{
        AdmissionRequest as WitAdmissionRequest, Operation as WitOperation,
        UserInfo as WitUserInfo, Verdict as WitVerdict,
    };
}

/// The host's bindings of the `extensions` world (WIT 0.1.2, what the SDK builds since
/// krec-guest 0.1.2): the `init` and `map` exports.
pub mod extensions {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "extensions",
        exports: { default: async },
        with: {
            "krec:reconciler/types": super::krec::reconciler::types,
        },
    });
}
