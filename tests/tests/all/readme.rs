//! The README's guest example is real: identical to `sample-guests/readme-example`, and it
//! reconciles.

use krec::cluster::ClusterCalls;
use krec::guest::Action;
use krec_tests::{Harness, cm_gvk, repo_root, sample_manifest};
use serde_json::json;

/// The fenced block of `lang` that follows the heading `## A guest` in the README.
fn readme_block(lang: &str) -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let section = readme
        .split("## A guest")
        .nth(1)
        .expect("README has a `## A guest` section");
    let start = section.find(&format!("```{lang}\n")).expect("fenced block") + lang.len() + 4;
    let end = start + section[start..].find("```").expect("closing fence");
    section[start..end].to_owned()
}

#[test]
fn readme_example_should_match_the_built_crate() {
    let root = repo_root().join("sample-guests/readme-example");
    let code = std::fs::read_to_string(root.join("src/lib.rs")).expect("lib.rs");
    let manifest = std::fs::read_to_string(root.join("manifest.yaml")).expect("manifest");
    assert_eq!(
        readme_block("rust"),
        code,
        "README code differs from sample-guests/readme-example/src/lib.rs"
    );
    assert_eq!(
        readme_block("yaml"),
        manifest,
        "README manifest differs from sample-guests/readme-example/manifest.yaml"
    );
}

#[tokio::test]
async fn readme_example_should_reconcile() {
    let mut h = Harness::with_manifest(sample_manifest("readme-example"));
    h.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "hello", "namespace": "default"}}))
        .await;
    assert_eq!(
        h.reconcile(Some("default"), "hello").await,
        Ok(Action::Done)
    );
    let cm = h
        .cluster
        .get(&cm_gvk(), Some("default"), "hello")
        .await
        .expect("cm");
    assert_eq!(
        cm["metadata"]["annotations"]["example.com/greeted"],
        "hello"
    );
    assert_eq!(h.reconcile(Some("default"), "gone").await, Ok(Action::Done));
}
