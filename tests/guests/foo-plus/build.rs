//! foo-plus: the sample foo-controller scaling its Deployment to `spec.replicas + 1`.
const SAMPLE: &str = "foo-controller";
const CHANGES: &[(&str, &str)] = &[
    ("current != Some(wanted)", "current != Some(wanted + 1)"),
    ("replicas = Some(wanted);", "replicas = Some(wanted + 1);"),
];
include!("../variant.rs");
