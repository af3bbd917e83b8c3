//! [`PatchType`]: how a patch body is applied — the one list of patch types the host, the guest
//! SDK's fake cluster and the API server share (each crate keeps only its mapping to its own
//! bindings: the WIT `patch-type`, kube's `Patch`).

/// How a patch body is to be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PatchType {
    /// RFC 7386 JSON merge patch, `application/merge-patch+json`.
    Merge,
    /// RFC 6902 JSON patch, `application/json-patch+json`.
    Json,
    /// Kubernetes strategic merge patch, `application/strategic-merge-patch+json`.
    Strategic,
    /// Server-side apply, `application/apply-patch+yaml`.
    Apply,
}

impl PatchType {
    /// Every patch type.
    pub const ALL: [PatchType; 4] = [
        PatchType::Merge,
        PatchType::Json,
        PatchType::Strategic,
        PatchType::Apply,
    ];

    /// The `Content-Type` a client sends it with.
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Json => "application/json-patch+json",
            PatchType::Strategic => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }

    /// The patch type of a `Content-Type` header (parameters ignored; an apply
    /// configuration may also come as `application/apply-patch+json`).
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        match content_type.split(';').next().unwrap_or("").trim() {
            "application/apply-patch+json" => Some(PatchType::Apply),
            bare => PatchType::ALL
                .into_iter()
                .find(|p| p.content_type() == bare),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_type_should_name_its_patch_type() {
        for patch in PatchType::ALL {
            assert_eq!(
                PatchType::from_content_type(patch.content_type()),
                Some(patch)
            );
        }
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+json"),
            Some(PatchType::Apply)
        );
        assert_eq!(PatchType::from_content_type("application/json"), None);
    }
}
