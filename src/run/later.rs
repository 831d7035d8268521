//! Files that run later, inside writable places (docs/reference/confinement.md, "Files
//! that run later"): how a repository or a shell runs code outside the jail once CMD
//! has exited. Those that exist when `run` starts stay read-only for CMD (the jail's
//! init binds each on itself, read-only); those CMD creates are listed on `run`'s
//! standard error when it exits. `--writable-exact PATH` lifts this for one path.

use std::path::{Path, PathBuf};

/// Directly in each writable place, and what runs them.
pub(super) const NAMES: [(&str, &str); 16] = [
    (".git/hooks", "git runs a hook"),
    (".git/config", "git reads its configuration"),
    (".gitmodules", "git updates submodules"),
    (".gitconfig", "git reads it as a home's configuration"),
    (".bashrc", "bash starts"),
    (".bash_profile", "a login bash starts"),
    (".bash_login", "a login bash starts"),
    (".profile", "a login shell starts"),
    (".zshrc", "zsh starts"),
    (".zshenv", "zsh starts"),
    (".zprofile", "a login zsh starts"),
    (".envrc", "direnv enters the directory"),
    (".mcp.json", "an AI agent starts its MCP servers"),
    (".vscode", "VS Code opens the folder"),
    (".idea", "a JetBrains IDE opens the project"),
    (".devcontainer", "a dev container is built"),
];

/// In a repository's git directory (and each submodule's under `modules/`).
const IN_GIT_DIR: [(&str, &str); 2] = [
    ("hooks", "git runs a hook"),
    ("config", "git reads its configuration"),
];

/// How deep submodules of submodules are followed under `.git/modules`.
const MODULE_DEPTH: usize = 8;

/// The files that run later that exist now in `places` (each absolute), with what runs
/// them; none of `exact`.
pub(super) fn existing(places: &[PathBuf], exact: &[PathBuf]) -> Vec<(PathBuf, &'static str)> {
    let mut found = Vec::new();
    for place in places {
        for (name, why) in NAMES {
            let path = place.join(name);
            if std::fs::symlink_metadata(&path).is_ok() {
                found.push((path, why));
            }
        }
        let git = place.join(".git");
        if git.is_dir() && !git.is_symlink() {
            modules(&git.join("modules"), MODULE_DEPTH, &mut found);
        }
    }
    found.retain(|(path, _)| !exact.contains(path));
    found.sort();
    found.dedup();
    found
}

/// The hooks and configuration of each git directory below `modules` (a submodule's
/// name may hold `/`: a directory with a `HEAD` is a git directory, others are walked).
fn modules(dir: &Path, depth: usize, found: &mut Vec<(PathBuf, &'static str)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) || depth == 0 {
            continue;
        }
        if path.join("HEAD").is_file() {
            for (name, why) in IN_GIT_DIR {
                if std::fs::symlink_metadata(path.join(name)).is_ok() {
                    found.push((path.join(name), why));
                }
            }
            modules(&path.join("modules"), depth - 1, found);
        } else {
            modules(&path, depth - 1, found);
        }
    }
}

/// One line for each of `after` not in `before`: created by CMD.
pub(super) fn report(before: &[(PathBuf, &str)], after: &[(PathBuf, &str)]) -> Vec<String> {
    after
        .iter()
        .filter(|(path, _)| !before.iter().any(|(b, _)| b == path))
        .map(|(path, why)| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let dir = path.parent().unwrap_or(Path::new("/")).display();
            format!(
                "egress-proxy: run: note: the command created {name} in {dir}: it runs code \
                 outside the jail when {why}; read it before that happens"
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_a_place_and_in_submodules_are_found_and_new_ones_reported() {
        let dir = std::env::temp_dir().join(format!("later-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let sub = dir.join(".git/modules/libs/a");
        std::fs::create_dir_all(sub.join("hooks")).unwrap();
        std::fs::create_dir_all(dir.join(".git/hooks")).unwrap();
        std::fs::write(sub.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(dir.join(".bashrc"), "").unwrap();
        let places = [dir.clone()];
        let before = existing(&places, &[dir.join(".bashrc")]);
        let paths: Vec<&PathBuf> = before.iter().map(|(p, _)| p).collect();
        assert_eq!(paths, [&dir.join(".git/hooks"), &sub.join("hooks")]);
        std::fs::write(dir.join(".envrc"), "").unwrap();
        let lines = report(&before, &existing(&places, &[dir.join(".bashrc")]));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains(&format!("created .envrc in {}", dir.display())));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
