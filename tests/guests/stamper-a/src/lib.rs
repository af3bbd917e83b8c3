//! Version `a` of the stamper test guest (see `../stamper.rs`), for the hot-swap tests.

/// This build's version.
const VERSION: &str = "a";

include!("../../stamper.rs");
