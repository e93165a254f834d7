//! The committed header must equal what cbindgen generates from the sources.
//!
//! Regenerate with `make header` (which runs this test with
//! `KVTIER_REGENERATE_HEADER=1`).

use std::path::PathBuf;

fn generate() -> String {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("cbindgen.toml is readable");
    config.after_includes = Some(format!(
        "\n#define KVTIER_VERSION_MAJOR {}\n#define KVTIER_VERSION_MINOR {}\n#define KVTIER_VERSION_PATCH {}\n",
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_PATCH"),
    ));
    let bindings = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("header is UTF-8")
}

#[test]
fn committed_header_is_up_to_date() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include/kvtier.h");
    let fresh = generate();
    if std::env::var_os("KVTIER_REGENERATE_HEADER").is_some() {
        std::fs::write(&path, &fresh).expect("include/kvtier.h is writable");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != fresh {
        let line = committed
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .map(|i| i + 1)
            .unwrap_or_else(|| committed.lines().count().min(fresh.lines().count()) + 1);
        panic!(
            "include/kvtier.h is out of date (first difference at line {line}).\n\
             Regenerate it with:  make header\n\
             (or: KVTIER_REGENERATE_HEADER=1 cargo test --test header)"
        );
    }
}
