//! pod-counter-plus: the sample pod-counter counting one pod too many.
const SAMPLE: &str = "pod-counter";
const CHANGES: &[(&str, &str)] = &[(
    "ctx.list::<PartialObjectMeta<Pod>>(&params)?.len().to_string()",
    "(ctx.list::<PartialObjectMeta<Pod>>(&params)?.len() + 1).to_string()",
)];
include!("../variant.rs");
