//! Version `b` of the mirror test guest (see `../mirror.rs`): copies labelled `by: b`.

/// This build labels its copies `mirror.krec.dev/by: b`.
const LABELLED_BY: Option<&str> = Some("b");

include!("../../mirror.rs");
