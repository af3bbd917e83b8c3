//! How krec's servers meet the network — the embedded API server, the host's admission server
//! and its admin port alike: which connections they accept and for how long
//! ([`connections`]), and the certificates they serve and trust ([`tls`]).

pub mod client_certs;
pub mod connections;
mod error;
pub mod tls;
