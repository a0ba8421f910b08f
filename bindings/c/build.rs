//! Gives the shared library its soname: `libvelvet_rope.so.0.<minor>` while the version is
//! 0.x (every minor release may change the C ABI, see docs/compatibility.md), then
//! `libvelvet_rope.so.<major>`. Programs linked against it record that name, so an
//! incompatible library is never picked up in its place.

fn main() {
    let major: u32 = env("CARGO_PKG_VERSION_MAJOR");
    let minor: u32 = env("CARGO_PKG_VERSION_MINOR");
    let soname = if major == 0 {
        format!("libvelvet_rope.so.0.{minor}")
    } else {
        format!("libvelvet_rope.so.{major}")
    };
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}

/// A version number cargo gives every build script.
fn env(name: &str) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("cargo sets {name}"))
}
