//! The admission server: guests' `validate`, `mutate` and `convert` exports served over HTTPS as
//! controller-runtime's webhook server serves Go handlers — `POST /validate/{guest}` and
//! `POST /mutate/{guest}` answer `admission.k8s.io/v1` `AdmissionReview`s, `POST
//! /convert/{guest}` answers `apiextensions.k8s.io/v1` `ConversionReview`s — and the webhook
//! configurations that register them with an API server.
//!
//! Each review runs the guest's current version (a hot swap changes verdicts at once) in a fresh
//! instance under its manifest's limits; a trap or a timeout is answered as an HTTP 500, so the
//! API server applies the webhook's `failurePolicy`, and is logged and counted. A mutating
//! guest returns the object as it should be; the host answers the JSON patch to it.
//!
//! The wing's rooms: [`server`] (routes, the bounds on concurrent reviews, the HTTPS server),
//! `review` (the `AdmissionReview` codec: the request a guest is asked about, the response
//! its verdict becomes), [`registrations`] (the webhook configurations and CRD conversions that
//! point an API server at it) and [`tls`] (its serving certificate). Guests are found in the
//! guest set ([`Manager::reviewer`](crate::guests::Manager::reviewer)).

pub mod registrations;
mod review;
pub mod server;
pub mod tls;

pub use registrations::{
    BadService, CONTROL_PLANE_NAMESPACES, FIELD_MANAGER, INJECT_CA_FROM, Reach, configurations,
    conversion, inject_ca_from, protected_namespaces, register, registration_yaml, set_conversion,
    set_conversion_with,
};
pub use server::{MAX_REVIEW_TIME, WebhookServer, router};
pub use tls::{CertSource, TlsFiles, TlsOptions};

/// Largest review body accepted (kube-apiserver's request limit).
const MAX_REVIEW_BYTES: usize = 3 << 20;

/// Reviews run at once, at most (each in an instance of its own, with its guest's memory
/// limit): more wait, so a flood of requests cannot make the host allocate without bound.
pub const MAX_CONCURRENT_REVIEWS: usize = 32;

/// Reviews of one guest run at once, at most: its share of [`MAX_CONCURRENT_REVIEWS`]. A guest
/// whose reviews are slow (or a flood of requests for one guest) waits within its share, and
/// the other guests' reviews go on.
pub const MAX_CONCURRENT_REVIEWS_PER_GUEST: usize = crate::manifest::KEPT_REVIEW_INSTANCES as usize;

/// Reviews of one tenant's guests (a namespace's `Reconciler`s; the files and
/// `ClusterReconciler`s are one more tenant) run at once, at most: more than one guest's share,
/// well under the host's, so neither one guest nor one tenant's storm of slow reviews leaves
/// another tenant's guests without a place before their callers' timeouts.
pub const MAX_CONCURRENT_REVIEWS_PER_TENANT: usize = 12;
