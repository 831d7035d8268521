//! No circle inside a folder (docs/development.md, "Small files, a written layout"): two modules of one folder
//! that each use the other (directly or round a ring) are one module in two files, and
//! neither can be read or changed alone. Each `crate::`, `super::` and `self::` path is
//! resolved to the module it names; a module's own files (`a.rs` and `a/`) count as it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A source file's module path: `src/tunnel/relay.rs` is `["tunnel", "relay"]`,
/// `src/tunnel/mod.rs` is `["tunnel"]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    parts
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The absolute module paths a file at `module` names (line comments left out): the
/// path's segments after `crate::`, `super::` (each one level up) or `self::`; a group
/// (`super::{a, b::C}`) names each item.
fn paths_named(module: &[String], source: &str) -> Vec<Vec<String>> {
    let code: String = source
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut named = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let word_start = at == 0
            || !(bytes[at - 1].is_ascii_alphanumeric()
                || bytes[at - 1] == b'_'
                || bytes[at - 1] == b'$');
        let (base, mut tail) = if !word_start {
            (None, rest)
        } else if let Some(tail) = rest.strip_prefix("crate::") {
            (Some(Vec::new()), tail)
        } else if let Some(tail) = rest.strip_prefix("self::") {
            (Some(module.to_vec()), tail)
        } else if rest.starts_with("super::") {
            let mut base = module.to_vec();
            let mut tail = rest;
            while let Some(t) = tail.strip_prefix("super::") {
                base.pop();
                tail = t;
            }
            (Some(base), tail)
        } else {
            (None, rest)
        };
        let Some(base) = base else {
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let mut path = base;
        if let Some(group) = tail.strip_prefix('{') {
            let items = group.split('}').next().unwrap_or("");
            for item in items.split(',') {
                let first = ident(item.trim());
                if !first.is_empty() && first != "self" {
                    let mut p = path.clone();
                    p.push(first.to_string());
                    named.push(p);
                }
            }
        } else {
            loop {
                let seg = ident(tail);
                if seg.is_empty() {
                    break;
                }
                path.push(seg.to_string());
                match tail[seg.len()..].strip_prefix("::") {
                    Some(t) => tail = t,
                    None => break,
                }
            }
            named.push(path);
        }
        at = code.len() - rest.len() + 1;
    }
    named
}

/// Every circle among the modules of one folder, as `folder: a -> b -> a`; `files` are
/// (module path, source) pairs.
fn circles(files: &[(Vec<String>, String)]) -> Vec<String> {
    // folder -> module -> modules of the same folder it uses
    let mut edges: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let folders: BTreeSet<Vec<String>> = files
        .iter()
        .flat_map(|(m, _)| (0..m.len()).map(|n| m[..n].to_vec()))
        .collect();
    for (module, source) in files {
        for path in paths_named(module, source) {
            for folder in &folders {
                let n = folder.len();
                let (Some(from), Some(to)) = (module.get(n), path.get(n)) else {
                    continue;
                };
                if module[..n] == folder[..] && path[..n] == folder[..] && from != to {
                    let is_module = files
                        .iter()
                        .any(|(m, _)| m.len() > n && m[..=n] == path[..=n]);
                    if is_module {
                        let folder_edges = edges.entry(folder.clone()).or_default();
                        folder_edges
                            .entry(from.clone())
                            .or_default()
                            .insert(to.clone());
                    }
                }
            }
        }
    }
    let mut found = Vec::new();
    for (folder, graph) in &edges {
        let mut seen = BTreeSet::new();
        for start in graph.keys() {
            if let Some(ring) = ring_from(graph, start, &mut vec![start.clone()], &mut seen) {
                found.push(format!("{}: {}", folder.join("/"), ring.join(" -> ")));
                break;
            }
        }
    }
    found
}

/// A path from the last of `trail` back to one of `trail` (depth first).
fn ring_from(
    graph: &BTreeMap<String, BTreeSet<String>>,
    at: &str,
    trail: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    for next in graph.get(at).into_iter().flatten() {
        if let Some(i) = trail.iter().position(|t| t == next) {
            let mut ring = trail[i..].to_vec();
            ring.push(next.clone());
            return Some(ring);
        }
        if done.contains(next) {
            continue;
        }
        trail.push(next.clone());
        if let Some(ring) = ring_from(graph, next, trail, done) {
            return Some(ring);
        }
        trail.pop();
    }
    done.insert(at.to_string());
    None
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A test module's file (`tests.rs`, `NAME_tests.rs`, `test_NAME.rs`): what a test uses
/// is not what its module uses.
fn is_test_file(file: &Path) -> bool {
    let name = file.file_stem().unwrap().to_string_lossy();
    name == "tests" || name.ends_with("_tests") || name.starts_with("test_")
}

/// `source` without its inline test module (`#[cfg(test)] mod tests { ... }`, last in a
/// file by the crate's habit).
fn without_tests(mut source: String) -> String {
    if let Some(at) = source.find("#[cfg(test)]\nmod tests {") {
        source.truncate(at);
    }
    source
}

#[test]
fn no_folder_has_a_circle_among_its_modules() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let files: Vec<(Vec<String>, String)> = files
        .iter()
        .filter(|f| !is_test_file(f))
        .map(|f| {
            (
                module_path(&src, f),
                without_tests(std::fs::read_to_string(f).unwrap()),
            )
        })
        .collect();
    assert!(files.len() > 100, "read the crate's sources");
    let found = circles(&files);
    assert!(
        found.is_empty(),
        "modules of one folder use each other:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_circle_finder_finds_a_circle_however_it_is_spelled() {
    let file = |m: &[&str], s: &str| (m.iter().map(|p| p.to_string()).collect(), s.to_string());
    // Through `super::` one way and `crate::` the other.
    let two = [
        file(&["x"], "mod a; mod b;"),
        file(&["x", "a"], "use super::b::Thing;"),
        file(&["x", "b"], "use crate::x::a::f; // super::c"),
    ];
    assert_eq!(circles(&two), ["x: a -> b -> a"]);
    // A ring of three, a group and a file inside a module's own folder.
    let three = [
        file(&["x", "a"], "use super::{b, other};"),
        file(&["x", "b"], "fn f() { crate::x::c::g() }"),
        file(&["x", "c", "inner"], "use super::super::a;"),
        file(&["x", "other"], ""),
    ];
    assert_eq!(circles(&three), ["x: a -> b -> c -> a"]);
    // One way only, a comment, and a parent using its child: no circle.
    let none = [
        file(&["x"], "use self::a::A; fn f() { b::g() }"),
        file(&["x", "a"], "use super::b; use super::Item;"),
        file(&["x", "b"], "// use super::a;"),
    ];
    assert!(circles(&none).is_empty());
}
