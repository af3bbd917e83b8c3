//! The sample foo-controller with one deliberate change (see `build.rs`): a candidate version
//! for the rollout tests.
#![allow(missing_docs, clippy::disallowed_names)]

include!(concat!(env!("OUT_DIR"), "/variant.rs"));
