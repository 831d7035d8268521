//! The layers of docs/ARCHITECTURE.md, checked against the code: every module of `src/`
//! has a layer in the document's table, and refers (`use crate::…`, `crate::…::`) only
//! to modules of the layers below its own. So the document stays true: an import that
//! points up fails here, and so does a module the table does not place.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crate's root: `CARGO_MANIFEST_DIR`.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Each module's layer, from the document's table: the rows after the `| layer |`
/// header, whose first cell is a number and whose second names `src/NAME/`,
/// `src/NAME.rs` or `crates/NAME/` in backticks.
fn layers(doc: &str) -> BTreeMap<String, u32> {
    let mut layers = BTreeMap::new();
    let rows = doc
        .lines()
        .skip_while(|l| !l.starts_with("| layer |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (Some(layer), Some(modules)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Ok(layer) = layer.parse::<u32>() else {
            continue;
        };
        for name in modules.split('`').skip(1).step_by(2) {
            // `src/NAME/`, `src/NAME.rs`, or `crates/NAME/`: a crate of the workspace the
            // proxy crate re-exports under that name (`crates/policy/` is `policy`).
            let Some(path) = name
                .strip_prefix("src/")
                .or_else(|| name.strip_prefix("crates/"))
            else {
                continue;
            };
            let module = path.trim_end_matches('/').trim_end_matches(".rs");
            layers.insert(module.to_string(), layer);
        }
    }
    layers
}

/// The top-level modules a source file refers to through `crate::`, line comments left
/// out. A group (`use crate::{a::B, c}`) names each of its items' first segment.
fn modules_used(source: &str) -> BTreeSet<String> {
    let code: String = source
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut used = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let macro_crate = rest[..at].ends_with('$');
        rest = &rest[at + "crate::".len()..];
        if macro_crate {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => item_start = true,
                    c if item_start && depth == 1 && !c.is_whitespace() => {
                        item_start = false;
                        let name = ident(&group[i..]);
                        if !name.is_empty() && name != "self" {
                            used.insert(name);
                        }
                    }
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                used.insert(name);
            }
        }
    }
    used
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_module_refers_only_to_modules_of_the_layers_below_it() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let layers = layers(&doc);
    assert!(!layers.is_empty(), "no layer table in docs/ARCHITECTURE.md");
    let src = root().join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut problems = BTreeSet::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = top.trim_end_matches(".rs");
        // The crate's root and the binary's are above every layer.
        if matches!(module, "lib" | "main") {
            continue;
        }
        let Some(&layer) = layers.get(module) else {
            problems.insert(format!("src/{module}: no layer in docs/ARCHITECTURE.md"));
            continue;
        };
        let source = std::fs::read_to_string(&file).unwrap();
        for used in modules_used(&source) {
            if used == module {
                continue;
            }
            let problem = match layers.get(&used) {
                Some(&below) if below < layer => continue,
                Some(&other) => format!(
                    "src/{} (layer {layer}) refers to `{used}` (layer {other})",
                    rel.display()
                ),
                None => format!(
                    "src/{} refers to `{used}`, which has no layer",
                    rel.display()
                ),
            };
            problems.insert(problem);
        }
    }
    assert!(
        problems.is_empty(),
        "the code and docs/ARCHITECTURE.md's layers disagree:\n{}",
        problems.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// The reader of imports itself: a group, a path in code, a macro's `$crate`, a comment.
#[test]
fn the_layer_check_reads_every_spelling_of_an_import() {
    let source = "use crate::{proxy::State, audit::{self, Via}, self};\n\
                  pub(crate) fn f() { crate::dns::answer(); }\n\
                  macro_rules! m { () => { $crate::hidden::x() } }\n\
                  // crate::commented::out\n\
                  use crate::net;";
    let used: Vec<String> = modules_used(source).into_iter().collect();
    assert_eq!(used, ["audit", "dns", "net", "proxy"]);
    let doc = "| layer | modules | what |\n|---|---|---|\n\
               | 1 | `src/net/`, `src/audit.rs` | x |\n| 2 | `src/proxy/` | y |\n\
               | 0 | `crates/policy/` (a crate) | z |\n\nafter";
    let layers = layers(doc);
    assert_eq!(layers.get("net"), Some(&1));
    assert_eq!(layers.get("audit"), Some(&1));
    assert_eq!(layers.get("proxy"), Some(&2));
    assert_eq!(layers.get("policy"), Some(&0));
    assert_eq!(layers.len(), 4);
}

/// The external crates a source file refers to among `names`, line comments left out:
/// `use NAME…` and `NAME::` in code.
fn crates_used<'a>(source: &str, names: &[&'a str]) -> BTreeSet<&'a str> {
    let mut used = BTreeSet::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or("");
        for &name in names {
            let path = format!("{name}::");
            let found = code.match_indices(&path).any(|(at, _)| {
                // A path's first segment, not the tail of another (`crate::x::hyper::`).
                at == 0
                    || !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':')
            });
            if found || code.trim_start().starts_with(&format!("use {name};")) {
                used.insert(name);
            }
        }
    }
    used
}

/// The judgement speaks no protocol (docs/ARCHITECTURE.md, "One judgement"): every
/// listener reads its own wire into the judgement's question, so nothing under
/// `src/judgement/` uses an HTTP library.
#[test]
fn the_judgement_imports_no_http_library() {
    let dir = root().join("src/judgement");
    let mut files = Vec::new();
    sources(&dir, &mut files);
    assert!(files.len() > 5, "src/judgement/ has its files");
    let protocols = ["hyper", "http", "hyper_util", "http_body_util", "h2"];
    let found: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let used = crates_used(&std::fs::read_to_string(file).unwrap(), &protocols);
            (!used.is_empty()).then(|| format!("{}: {used:?}", file.display()))
        })
        .collect();
    assert!(found.is_empty(), "the judgement uses HTTP: {found:#?}");
    // The reader itself finds each spelling.
    let sample =
        "use hyper::Request;\nfn f() { http::StatusCode::OK; }\n// h2::x\nuse crate::x::h2::y;";
    let used: Vec<&str> = crates_used(sample, &protocols).into_iter().collect();
    assert_eq!(used, ["http", "hyper"]);
}
