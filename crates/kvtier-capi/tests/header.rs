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
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../include/kvtier.h"
    ));
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

/// Every identifier a C header declares at file scope: macros, types,
/// enum constants, functions and function-pointer types (struct fields are
/// scoped to their struct and are left out).
fn declared_names(header: &str) -> Vec<String> {
    // Comments out, keeping line breaks.
    let mut text = String::with_capacity(header.len());
    let mut rest = header;
    while let Some(start) = rest.find("/*") {
        text.push_str(&rest[..start]);
        let end = rest[start..]
            .find("*/")
            .map_or(rest.len(), |e| start + e + 2);
        text.extend(rest[start..end].chars().filter(|&c| c == '\n'));
        rest = &rest[end..];
    }
    text.push_str(rest);
    let ident = |s: &str| -> Option<String> {
        let s = s.trim_start();
        let n = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        (n > 0).then(|| s[..n].to_string())
    };
    let mut names = Vec::new();
    let (mut depth, mut in_enum) = (0i32, false);
    for line in text.lines() {
        let t = line.trim();
        // C++ linkage braces enclose the declarations; they are no scope.
        if t == "extern \"C\" {" || t.starts_with("}  // extern") {
            continue;
        }
        if let Some(d) = t.strip_prefix("#define") {
            names.extend(ident(d));
        } else if depth == 0 {
            if t.starts_with("typedef enum") {
                in_enum = true;
            }
            if let Some(p) = t.find("(*") {
                names.extend(ident(&t[p + 2..]));
            } else if let Some(d) = t
                .strip_prefix("typedef struct ")
                .filter(|d| d.ends_with(';'))
            {
                // `typedef struct X X;`: both names.
                names.extend(d.trim_end_matches(';').split_whitespace().map(String::from));
            } else if !t.starts_with('#') && !t.starts_with("typedef") && t.contains('(') {
                let before = &t[..t.find('(').unwrap_or(0)];
                names.extend(before.rsplit([' ', '*']).next().and_then(ident));
            }
        } else if in_enum && depth == 1 && !t.starts_with('}') {
            names.extend(ident(t));
        }
        if depth > 0 && t.starts_with('}') && depth == 1 {
            // `} name;` closes a typedef at file scope.
            names.extend(ident(t.trim_start_matches('}')));
            in_enum = false;
        }
        depth += t.matches('{').count() as i32 - t.matches('}').count() as i32;
    }
    names.retain(|n| !n.is_empty());
    names
}

/// The names of `header` that do not start with `kvtier_` or `KVTIER_`.
fn foreign_names(header: &str) -> Vec<String> {
    declared_names(header)
        .into_iter()
        .filter(|n| !(n.starts_with("kvtier_") || n.starts_with("KVTIER_")))
        .collect()
}

#[test]
fn every_name_the_header_declares_is_in_the_kvtier_namespace() {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../include/kvtier.h"
    ));
    let header = std::fs::read_to_string(path).expect("include/kvtier.h is readable");
    let names = declared_names(&header);
    assert!(
        names.iter().any(|n| n == "kvtier_manager_lookup")
            && names.iter().any(|n| n == "KVTIER_STATUS_OK")
            && names.iter().any(|n| n == "kvtier_key")
            && names.iter().any(|n| n == "kvtier_log_fn"),
        "the scanner finds functions, enum constants, types and callbacks: {names:?}"
    );
    let foreign = foreign_names(&header);
    assert!(
        foreign.is_empty(),
        "include/kvtier.h declares names outside kvtier_/KVTIER_: {foreign:?}"
    );
}

#[test]
fn the_namespace_check_names_each_kind_of_foreign_declaration() {
    let sample = "/* FAILED in a comment is fine */\n\
                  #define FAILED 16\n\
                  typedef struct Cause Cause;\n\
                  typedef enum {\n  KVTIER_STATUS_OK = 0,\n  DONE = 1,\n} outcome;\n\
                  typedef struct {\n  int32_t kind;\n} kvtier_tier_event;\n\
                  typedef void (*log_fn)(void *user_data);\n\
                  int32_t helper(const kvtier_tier_event *e);\n";
    assert_eq!(
        foreign_names(sample),
        [
            "FAILED", "Cause", "Cause", "DONE", "outcome", "log_fn", "helper"
        ]
    );
}
