//! The API server's endpoints, as kube-apiserver's `pkg/endpoints`: what a path names
//! ([`router`]). The handlers per verb are in `http.rs` for now.

pub mod router;
