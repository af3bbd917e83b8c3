//! `go-bindgen WIT_DIR OUT_DIR GO_PACKAGE`: the Go bindings (wit-bindgen-go) of the world
//! `controller` of the WIT package in WIT_DIR, organised as the library GO_PACKAGE, written
//! under OUT_DIR (its generated folders replaced; `export_wit_world`, written by hand, kept).

use anyhow::Context as _;
use wit_bindgen_core::wit_parser::Resolve;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [wit, out, package] = args.as_slice() else {
        anyhow::bail!("usage: go-bindgen WIT_DIR OUT_DIR GO_PACKAGE");
    };
    let mut resolve = Resolve::default();
    let (main, _) = resolve
        .push_dir(wit)
        .with_context(|| format!("reading {wit}"))?;
    let world = resolve.select_world(&[main], Some("controller"))?;
    let opts = wit_bindgen_go::Opts {
        pkg_name: Some(package.clone()),
        ..Default::default()
    };
    let mut files = wit_bindgen_core::Files::default();
    opts.build().generate(&mut resolve, world, &mut files)?;
    let out = std::path::Path::new(out);
    // What a previous run generated goes; the exports' implementation (written by hand, in
    // `export_wit_world`) and the WIT's hash stay.
    if out.exists() {
        for entry in std::fs::read_dir(out)? {
            let path = entry?.path();
            if path.is_dir() && !path.ends_with("export_wit_world") {
                std::fs::remove_dir_all(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
            }
        }
    }
    for (name, contents) in files.iter() {
        let path = out.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let contents = round_return_areas(&String::from_utf8_lossy(contents));
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}

/// wit-bindgen-go 0.62.0 sizes the exports' static return area without rounding it to its
/// alignment (`Allocate(&staticPinner, (8 + 13*4), 8)` for this world: 60 bytes at 8), and
/// its runtime panics on such a size when the package initialises — every guest would trap
/// at instantiation. Rounded up here, in Go's constant arithmetic.
fn round_return_areas(text: &str) -> String {
    const CALL: &str = "witRuntime.Allocate(&staticPinner, (";
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let rounded = line.find(CALL).and_then(|at| {
            let rest = &line[at + CALL.len()..];
            let (size, rest) = rest.split_once("), ")?;
            let (align, rest) = rest.split_once(')')?;
            align.trim().parse::<u32>().ok()?;
            Some(format!(
                "{}{CALL}({size})+{align}-1)/{align}*{align}, {align}){rest}",
                &line[..at]
            ))
        });
        out.push_str(rounded.as_deref().unwrap_or(line));
    }
    out
}
