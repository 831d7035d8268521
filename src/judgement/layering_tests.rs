//! The judgement sits below every listener, and the listeners do not import each other
//! (docs/ARCHITECTURE.md, "Layers"): read from the source, so an import that points the
//! wrong way fails here rather than in review.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/<module>` (or the file `src/<module>.rs`).
fn sources(module: &str) -> Vec<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let file = src.join(format!("{module}.rs"));
    if file.is_file() {
        return vec![file];
    }
    let mut found = Vec::new();
    let mut dirs = vec![src.join(module)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a module directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found
}

/// The lines of `module`'s code (comments left out) that name `crate::<other>`.
fn imports_of(module: &str, other: &str) -> Vec<String> {
    let needle = format!("crate::{other}::");
    let bare = format!("crate::{other};");
    let braced = format!("crate::{{{other}");
    let mut lines = Vec::new();
    for path in sources(module) {
        let text = std::fs::read_to_string(&path).expect("a readable source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains(&needle) || code.contains(&bare) || code.contains(&braced) {
                lines.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    lines
}

#[test]
fn the_judgement_imports_no_listener_and_no_loader() {
    for above in [
        "proxy",
        "transparent",
        "dns",
        "admin",
        "workers",
        "load",
        "serve",
    ] {
        let found = imports_of("judgement", above);
        assert!(found.is_empty(), "judgement imports {above}: {found:#?}");
    }
}

#[test]
fn the_listeners_import_the_judgement_and_not_each_other() {
    let forbidden = [
        (
            "proxy",
            ["transparent", "dns", "admin", "workers"].as_slice(),
        ),
        ("dns", &["proxy", "transparent", "admin", "workers"]),
        ("admin", &["proxy", "transparent", "dns", "workers"]),
        // The transparent listener hands HTTP connections and tunnels to the proxy's
        // connection and tunnel code; it imports no other listener.
        ("transparent", &["dns", "admin", "workers"]),
    ];
    for (listener, others) in forbidden {
        assert!(
            !imports_of(listener, "judgement").is_empty(),
            "{listener} judges through crate::judgement"
        );
        for other in others {
            let found = imports_of(listener, other);
            assert!(found.is_empty(), "{listener} imports {other}: {found:#?}");
        }
    }
}
