//! The ABI listing: `abi/kvtier.abi` lists, as include/kvtier.h declares
//! them, every exported function's signature (parameter types, return
//! type), every struct's fields in order with their types, every typedef
//! and every constant, under the version the header carries.  The check
//! fails, naming each difference, when the header's ABI differs from the
//! listing while `KVTIER_VERSION_MAJOR` and `KVTIER_VERSION_MINOR` are the
//! ones the listing records: a changed signature or layout must change the
//! minor version (before 1.0) so callers built against the old header are
//! told apart.  Once the version moved, `make abi`
//! (`KVTIER_REGENERATE_ABI=1 cargo test --test abi`) records the new ABI.
//!
//! The listing reads the header the way a C compiler does (comments out,
//! `#ifdef __cplusplus` parts out), so it works on any header, whatever
//! declarations it holds; parameter names are left out (renaming one does
//! not change the ABI), field names are kept.

use std::collections::BTreeSet;
use std::path::PathBuf;

const LISTING: &str = "abi/kvtier.abi";

// ---------------------------------------------------------------------------
// Reading the header

/// The header as a C compiler sees it: comments and preprocessor lines
/// out (the `__cplusplus` parts skipped), `#define`s of `KVTIER_` names
/// kept aside as (name, value).
fn c_view(header: &str) -> (String, Vec<(String, String)>) {
    let no_comments = strip_comments(header);
    // Join continued lines.
    let joined = no_comments.replace("\\\n", " ");
    let mut code = String::new();
    let mut defines = Vec::new();
    // Stack of (this branch active, condition was about __cplusplus).
    let mut stack: Vec<(bool, bool)> = Vec::new();
    let active = |stack: &[(bool, bool)]| stack.iter().all(|(a, _)| *a);
    for line in joined.lines() {
        let t = line.trim();
        if let Some(directive) = t.strip_prefix('#') {
            let mut words = directive.split_whitespace();
            let word = words.next().unwrap_or("");
            let rest: Vec<&str> = words.collect();
            let about_cpp = rest.first().is_some_and(|w| w.contains("__cplusplus"));
            match word {
                "ifdef" => stack.push((!about_cpp, about_cpp)),
                "ifndef" => stack.push((true, about_cpp)),
                "if" => stack.push((!about_cpp || rest.join(" ").contains('!'), about_cpp)),
                "elif" => {
                    if let Some(top) = stack.last_mut() {
                        *top = (false, top.1);
                    }
                }
                "else" => {
                    if let Some(top) = stack.last_mut() {
                        // Unknown conditions count as true: their else is out.
                        *top = (top.1 && !top.0, top.1);
                    }
                }
                "endif" => {
                    stack.pop();
                }
                "define" if active(&stack) => {
                    if let Some(name) = rest.first() {
                        let value = rest[1..].join(" ");
                        if name.starts_with("KVTIER_") && !value.is_empty() {
                            defines.push((name.to_string(), value));
                        }
                    }
                }
                _ => {}
            }
            continue;
        }
        if active(&stack) {
            code.push_str(line);
            code.push('\n');
        }
    }
    (code, defines)
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("/*") {
            let end = after.find("*/").map_or(after.len(), |i| i + 2);
            out.extend(after[..end.min(after.len())].chars().filter(|&c| c == '\n'));
            rest = &after[end.min(after.len())..];
        } else if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |i| &after[i..]);
        } else if rest.starts_with('"') {
            // A string literal, kept whole.
            let end = rest[1..].find('"').map_or(rest.len(), |i| i + 2);
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == '"' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += 1;
            }
            i = (i + 1).min(chars.len());
            out.push(chars[start..i].iter().collect());
        } else {
            // `<<`, `>>` and `::` stay one token; other punctuation is one char.
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            if ["<<", ">>", "::", "->"].contains(&two.as_str()) {
                out.push(two);
                i += 2;
            } else {
                out.push(c.to_string());
                i += 1;
            }
        }
    }
    out
}

/// Splits `toks` at `sep` tokens outside any brackets.
fn split_top(toks: &[String], sep: &str) -> Vec<Vec<String>> {
    let mut parts = vec![Vec::new()];
    let mut depth = 0i32;
    for t in toks {
        match t.as_str() {
            "(" | "{" | "[" => depth += 1,
            ")" | "}" | "]" => depth -= 1,
            _ => {}
        }
        if depth == 0 && t == sep {
            parts.push(Vec::new());
        } else {
            parts.last_mut().unwrap().push(t.clone());
        }
    }
    parts.retain(|p| !p.is_empty());
    parts
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
}

/// Words that are part of a type, never a declarator's name.
const TYPE_WORDS: &[&str] = &[
    "void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "_Bool",
    "bool", "const", "volatile", "struct", "enum", "union", "restrict",
];

/// One declarator `tokens` as (type, name): the name left out of the type,
/// function-pointer parameter lists normalized the same way (their
/// parameter names dropped), arrays written after the type.
fn declarator(toks: &[String]) -> (String, String) {
    // A function pointer: `ret ( * name ) ( params )`.
    if let Some(p) = toks.windows(2).position(|w| w[0] == "(" && w[1] == "*") {
        let close = p + toks[p..]
            .iter()
            .position(|t| t == ")")
            .unwrap_or(toks.len() - p);
        let inner = &toks[p + 2..close];
        let name = inner
            .iter()
            .rev()
            .find(|t| is_ident(t))
            .cloned()
            .unwrap_or_default();
        let ret = join(&toks[..p]);
        let params_start = close + 1;
        let params = if params_start < toks.len() && toks[params_start] == "(" {
            let end = matching(toks, params_start);
            parameters(&toks[params_start + 1..end])
        } else {
            String::new()
        };
        let stars: Vec<String> = toks[p + 1..close]
            .iter()
            .filter(|t| *t == "*")
            .cloned()
            .collect();
        return (format!("{ret} ({})({params})", join(&stars)), name);
    }
    // Arrays: `type name [ n ]`.
    let mut core = toks.to_vec();
    let mut arrays = String::new();
    while core.last().is_some_and(|t| t == "]") {
        let open = core.iter().rposition(|t| t == "[").unwrap_or(0);
        arrays = format!("[{}]{arrays}", join(&core[open + 1..core.len() - 1]));
        core.truncate(open);
    }
    let named = core.len() >= 2
        && core
            .last()
            .is_some_and(|t| is_ident(t) && !TYPE_WORDS.contains(&t.as_str()));
    if named {
        let name = core.pop().unwrap();
        (format!("{}{arrays}", join(&core)), name)
    } else {
        (format!("{}{arrays}", join(&core)), String::new())
    }
}

/// The index of the bracket closing the one at `open`.
fn matching(toks: &[String], open: usize) -> usize {
    let mut depth = 0;
    for (i, t) in toks.iter().enumerate().skip(open) {
        match t.as_str() {
            "(" | "{" | "[" => depth += 1,
            ")" | "}" | "]" => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    toks.len() - 1
}

/// A parameter list's types, names left out.
fn parameters(toks: &[String]) -> String {
    split_top(toks, ",")
        .iter()
        .map(|p| declarator(p).0)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Tokens as C is usually written: `char **`, `(1 << 30)`, `-1`.
fn join(toks: &[String]) -> String {
    let mut out = String::new();
    let mut previous = "";
    for t in toks {
        let tight = previous.is_empty()
            || (t == "*" && previous == "*")
            || previous == "("
            || t == ")"
            || (previous == "-" && out.len() == 1);
        if !tight {
            out.push(' ');
        }
        out.push_str(t);
        previous = t;
    }
    out
}

/// The ABI the header declares, one line per item (see `listing`).
fn items(header: &str) -> (Option<(u64, u64)>, BTreeSet<String>) {
    let (code, defines) = c_view(header);
    let mut out = BTreeSet::new();
    let (mut major, mut minor) = (None, None);
    for (name, value) in defines {
        match name.as_str() {
            "KVTIER_VERSION_MAJOR" => major = value.parse().ok(),
            "KVTIER_VERSION_MINOR" => minor = value.parse().ok(),
            "KVTIER_VERSION_PATCH" => {}
            _ => {
                out.insert(format!("const {name} = {}", join(&tokens(&value))));
            }
        }
    }
    for decl in split_top(&tokens(&code), ";") {
        item(&decl, &mut out);
    }
    (major.zip(minor), out)
}

/// Adds the lines of one top-level declaration.
fn item(decl: &[String], out: &mut BTreeSet<String>) {
    let typedef = decl.first().is_some_and(|t| t == "typedef");
    let body = if typedef { &decl[1..] } else { decl };
    let kind = body.first().map(String::as_str).unwrap_or("");
    let brace = body.iter().position(|t| t == "{");
    if let Some(open) = brace.filter(|_| ["struct", "union", "enum"].contains(&kind)) {
        let close = matching(body, open);
        let tag = body[1..open].iter().find(|t| is_ident(t)).cloned();
        // `enum tag : int32_t {` (C++ only, but harmless): the base type.
        let base = body[1..open]
            .iter()
            .position(|t| t == ":")
            .map(|c| join(&body[1 + c + 1..open]));
        let after = &body[close + 1..];
        let name = if typedef {
            after.iter().rev().find(|t| is_ident(t)).cloned().or(tag)
        } else {
            tag
        }
        .unwrap_or_else(|| "(anonymous)".into());
        let inner = &body[open + 1..close];
        if kind == "enum" {
            if let Some(base) = base {
                out.insert(format!("enum {name} : {base}"));
            }
            let mut next: Option<i64> = Some(0);
            for e in split_top(inner, ",") {
                let constant = e[0].clone();
                let value = if let Some(eq) = e.iter().position(|t| t == "=") {
                    let text = join(&e[eq + 1..]);
                    next = text.replace(' ', "").parse::<i64>().ok().map(|v| v + 1);
                    text
                } else {
                    let v = next.map_or("(previous + 1)".to_string(), |v| v.to_string());
                    next = next.map(|v| v + 1);
                    v
                };
                out.insert(format!("enum {name}: {constant} = {value}"));
            }
        } else {
            let fields = split_top(inner, ";");
            if fields.is_empty() {
                out.insert(format!("{kind} {name} (empty)"));
            }
            for (i, f) in fields.iter().enumerate() {
                let text = if f.iter().any(|t| t == "{") {
                    join(f)
                } else {
                    let (ty, field) = declarator(f);
                    format!("{ty} {field}")
                };
                out.insert(format!("{kind} {name}: {i:03} {text}"));
            }
        }
        return;
    }
    if ["struct", "union", "enum"].contains(&kind) {
        // `typedef struct tag name` or `struct tag`: an opaque type.
        let name = body
            .iter()
            .rev()
            .find(|t| is_ident(t))
            .cloned()
            .unwrap_or_default();
        out.insert(format!("{kind} {name} (opaque)"));
        return;
    }
    if typedef {
        let (ty, name) = declarator(body);
        out.insert(format!("typedef {name} = {ty}"));
        return;
    }
    // A function: `ret name ( params )`; anything else as written.
    if let Some(open) = decl.iter().position(|t| t == "(")
        && open >= 1
        && is_ident(&decl[open - 1])
        && decl[..open].iter().all(|t| t != "*" || open >= 2)
    {
        let close = matching(decl, open);
        if close == decl.len() - 1 {
            let name = &decl[open - 1];
            let ret = join(
                &decl[..open - 1]
                    .iter()
                    .filter(|t| *t != "extern")
                    .cloned()
                    .collect::<Vec<_>>(),
            );
            let params = parameters(&decl[open + 1..close]);
            out.insert(format!("fn {name}({params}) -> {ret}"));
            return;
        }
    }
    out.insert(format!("declaration {}", join(decl)));
}

/// The listing of `header`: a comment, the version, then every item.
fn listing(header: &str) -> String {
    let (version, items) = items(header);
    let (major, minor) = version.expect("the header defines KVTIER_VERSION_MAJOR and _MINOR");
    let mut text = String::from(
        "# The ABI of include/kvtier.h, from crates/kvtier-capi/tests/abi.rs: regenerate with `make abi`.\n\
         # A difference while the version is the same fails the test.\n",
    );
    text.push_str(&format!("version {major}.{minor}\n"));
    for i in items {
        text.push_str(&i);
        text.push('\n');
    }
    text
}

fn recorded_version(listing: &str) -> Option<(u64, u64)> {
    let v = listing.lines().find_map(|l| l.strip_prefix("version "))?;
    let (a, b) = v.trim().split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn entries(listing: &str) -> BTreeSet<&str> {
    listing
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("version ") && !l.trim().is_empty())
        .collect()
}

/// Compares the recorded listing with the header's: `Err` names every
/// difference when the version is unchanged (or went back); `Ok` carries a
/// note when the version moved on (the listing is then out of date until
/// `make abi`).
fn check(recorded: &str, header: &str) -> Result<Option<String>, String> {
    let fresh = listing(header);
    let was = recorded_version(recorded).ok_or("the listing records no version")?;
    let now = recorded_version(&fresh).expect("listing() writes the version");
    let old = entries(recorded);
    let new = entries(&fresh);
    let mut diff = String::new();
    for gone in old.difference(&new) {
        diff.push_str(&format!("  - {gone}\n"));
    }
    for added in new.difference(&old) {
        diff.push_str(&format!("  + {added}\n"));
    }
    if now < was {
        return Err(format!(
            "the header's version {}.{} is older than the listing's {}.{}",
            now.0, now.1, was.0, was.1
        ));
    }
    if diff.is_empty() {
        return Ok((now != was).then(|| {
            format!(
                "the version moved from {}.{} to {}.{}; `make abi` records it",
                was.0, was.1, now.0, now.1
            )
        }));
    }
    if now == was {
        return Err(format!(
            "include/kvtier.h changed the ABI while its version is still {}.{} (- listed, + now):\n{diff}\
             Change the minor version in Cargo.toml (KVTIER_VERSION_MINOR), regenerate the header, \
             then record the new ABI with `make abi`; or undo the change.",
            now.0, now.1
        ));
    }
    Ok(Some(format!(
        "the ABI changed with the version moving from {}.{} to {}.{}; record it with `make abi`:\n{diff}",
        was.0, was.1, now.0, now.1
    )))
}

// ---------------------------------------------------------------------------
// The check

/// The repository's root, where `include/` and `abi/` are.
fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn the_header_abi_matches_the_listing_unless_the_version_changed() {
    let header = std::fs::read_to_string(root().join("include/kvtier.h")).expect("the header");
    let path = root().join(LISTING);
    if std::env::var_os("KVTIER_REGENERATE_ABI").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, listing(&header)).expect("abi/kvtier.abi is writable");
        return;
    }
    let recorded = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{LISTING} is missing: create it with `make abi`"));
    match check(&recorded, &header) {
        Ok(None) => {}
        Ok(Some(note)) => eprintln!("note: {note}"),
        Err(why) => panic!("{why}"),
    }
}

#[test]
fn the_check_fails_on_a_changed_declaration_at_the_same_version() {
    let header = std::fs::read_to_string(root().join("include/kvtier.h")).expect("the header");
    let recorded = listing(&header);
    assert_eq!(check(&recorded, &header), Ok(None));
    // A parameter's type changes: named in the failure.
    let changed = header.replacen(
        "const char *kvtier_version(void);",
        "const char *kvtier_version(int32_t flags);",
        1,
    );
    assert!(
        changed != header,
        "the header declares kvtier_version(void)"
    );
    let e = check(&recorded, &changed).unwrap_err();
    assert!(
        e.contains("- fn kvtier_version(void) -> const char *"),
        "{e}"
    );
    assert!(
        e.contains("+ fn kvtier_version(int32_t) -> const char *"),
        "{e}"
    );
    assert!(e.contains("still"), "{e}");
    // The same change with the minor version moved on is allowed.
    let minor = header
        .lines()
        .find_map(|l| l.strip_prefix("#define KVTIER_VERSION_MINOR "))
        .expect("the header defines the minor version");
    let next = (minor.trim().parse::<u64>().unwrap() + 1).to_string();
    let bumped = changed.replacen(
        &format!("#define KVTIER_VERSION_MINOR {minor}"),
        &format!("#define KVTIER_VERSION_MINOR {next}"),
        1,
    );
    let note = check(&recorded, &bumped).unwrap().expect("a note");
    assert!(
        note.contains("make abi") && note.contains("kvtier_version"),
        "{note}"
    );
    // A field's type changes: named too.
    let layout = header.replacen("  size_t struct_size;", "  uint32_t struct_size;", 1);
    assert!(
        layout != header,
        "an options struct starts with struct_size"
    );
    let e = check(&recorded, &layout).unwrap_err();
    assert!(
        e.contains(": 000 size_t struct_size") && e.contains(": 000 uint32_t struct_size"),
        "{e}"
    );
}

#[test]
fn the_listing_reads_every_kind_of_declaration() {
    let header = r#"
/* A comment with a fake declaration: int nope(void); */
#ifndef H
#define H
#include <stdint.h>
#define KVTIER_VERSION_MAJOR 1
#define KVTIER_VERSION_MINOR 4
#define KVTIER_VERSION_PATCH 9
#define KVTIER_BIG (1 << 30)
#define KVTIER_MINUS -1
#define KVTIER_GUARDED
enum kvtier_color
#ifdef __cplusplus
  : int32_t
#endif
{
  KVTIER_COLOR_RED = 0,
  KVTIER_COLOR_BLUE,
};
#ifndef __cplusplus
typedef int32_t kvtier_color;
#endif
typedef struct kvtier_thing kvtier_thing;
typedef struct {
  size_t struct_size;
  uint8_t bytes[64];
  int32_t (*callback)(void *user_data, const char *name);
} kvtier_options;
typedef void (*kvtier_log_fn)(void *user_data, int32_t level);
#ifdef __cplusplus
extern "C" {
#endif // __cplusplus
kvtier_status kvtier_thing_new(const kvtier_options *options, kvtier_thing **thing_out);
const char *kvtier_name(void);
void kvtier_take(int32_t (*cb)(void *), unsigned int);
#ifdef __cplusplus
}  // extern "C"
#endif
#endif
"#;
    let (version, items) = items(header);
    assert_eq!(version, Some((1, 4)));
    let want = [
        "const KVTIER_BIG = (1 << 30)",
        "const KVTIER_MINUS = -1",
        "enum kvtier_color: KVTIER_COLOR_RED = 0",
        "enum kvtier_color: KVTIER_COLOR_BLUE = 1",
        "typedef kvtier_color = int32_t",
        "struct kvtier_thing (opaque)",
        "struct kvtier_options: 000 size_t struct_size",
        "struct kvtier_options: 001 uint8_t[64] bytes",
        "struct kvtier_options: 002 int32_t (*)(void *, const char *) callback",
        "typedef kvtier_log_fn = void (*)(void *, int32_t)",
        "fn kvtier_thing_new(const kvtier_options *, kvtier_thing **) -> kvtier_status",
        "fn kvtier_name(void) -> const char *",
        "fn kvtier_take(int32_t (*)(void *), unsigned int) -> void",
    ];
    let got: Vec<&String> = items.iter().collect();
    for w in want {
        assert!(items.contains(w), "missing {w:?} in {got:#?}");
    }
    assert_eq!(items.len(), want.len(), "{got:#?}");
}
