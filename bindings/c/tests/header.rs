//! The committed header is exactly what cbindgen makes from the crate, and its version
//! constants are the crate's. `VR_BLESS_HEADER=1` rewrites the header instead of comparing.

use std::error::Error;
use std::path::PathBuf;

fn generate() -> Result<String, Box<dyn Error>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))?;
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(config)
        .generate()?
        .write(&mut out);
    Ok(String::from_utf8(out)?)
}

#[test]
fn committed_header_matches_the_crate() -> Result<(), Box<dyn Error>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../include/velvet_rope.h");
    let fresh = generate()?;
    if std::env::var_os("VR_BLESS_HEADER").is_some() {
        std::fs::write(&path, &fresh)?;
        return Ok(());
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/velvet_rope.h is stale: run `make header` and commit it"
    );
    Ok(())
}

#[test]
fn header_version_is_the_crate_version() -> Result<(), Box<dyn Error>> {
    let h = generate()?;
    for (name, value) in [
        ("VR_VERSION_MAJOR", env!("CARGO_PKG_VERSION_MAJOR")),
        ("VR_VERSION_MINOR", env!("CARGO_PKG_VERSION_MINOR")),
        ("VR_VERSION_PATCH", env!("CARGO_PKG_VERSION_PATCH")),
    ] {
        let line = format!("#define {name} {value}");
        assert!(h.contains(&line), "header lacks `{line}`");
    }
    Ok(())
}
