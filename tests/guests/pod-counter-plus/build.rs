//! pod-counter-plus: the sample pod-counter counting one pod too many.
const SAMPLE: &str = "pod-counter";
const CHANGES: &[(&str, &str)] = &[(
    "let count = pods.len().to_string();",
    "let count = (pods.len() + 1).to_string();",
)];
include!("../variant.rs");
