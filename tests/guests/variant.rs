// Shared by the build scripts of the variant test guests (`foo-plus`, `foo-trap`,
// `pod-counter-plus`): a sample guest with one deliberate change, made at build time so that the
// variant never drifts from the sample. `SAMPLE` (the sample's directory) and `CHANGES` (text in
// the sample, its replacement) are defined by the including build script.

fn main() {
    let sample = format!(
        "{}/../../../sample-guests/{SAMPLE}/src/lib.rs",
        env!("CARGO_MANIFEST_DIR")
    );
    println!("cargo::rerun-if-changed={sample}");
    let mut source = std::fs::read_to_string(sample).expect("read the sample");
    for (from, to) in CHANGES {
        assert!(source.contains(from), "the sample no longer contains {from:?}: update the variant");
        source = source.replace(from, to);
    }
    // Inner doc comments cannot be `include!`d.
    let source: String = source
        .lines()
        .filter(|line| !line.starts_with("//!"))
        .map(|line| format!("{line}\n"))
        .collect();
    let out = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("variant.rs");
    std::fs::write(out, source).expect("write the variant");
}
