//! foo-trap: the sample foo-controller panicking once the Foo's Deployment exists.
const SAMPLE: &str = "foo-controller";
const CHANGES: &[(&str, &str)] = &[(
    "let current = deployment.spec",
    "if foo.spec.replicas.is_some() { panic!(\"a candidate's bug\"); }\n        let current = deployment.spec",
)];
include!("../variant.rs");
