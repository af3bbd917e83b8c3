//! Version `a` of the mirror test guest (see `../mirror.rs`): copies unlabelled by version.

/// This build labels its copies with no version.
const LABELLED_BY: Option<&str> = None;

include!("../../mirror.rs");
