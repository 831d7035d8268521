//! `unix-sockets`: the daemons a sandbox must not reach through the file system
//! (docs/reference/command-line.md, "probe"): the well-known sockets, and every socket
//! under `/tmp`, `/run/user/UID` and `$HOME` to depth 3. A connect that is accepted is
//! `open`; nothing is written.

use std::collections::BTreeSet;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::UnixStream;
use tokio::task::JoinSet;
use tokio::time::{timeout_at, Instant};

use super::Part;

/// How deep the walk goes below each directory.
const DEPTH: usize = 3;
/// At most this many directory entries are looked at, and this many sockets tried.
const MAX_ENTRIES: usize = 20_000;
const MAX_SOCKETS: usize = 256;

/// The sockets of daemons that give whoever reaches them the host.
fn well_known(uid: u32) -> Vec<PathBuf> {
    [
        "/var/run/docker.sock".to_string(),
        "/run/containerd/containerd.sock".to_string(),
        "/run/podman/podman.sock".to_string(),
        "/run/dbus/system_bus_socket".to_string(),
        format!("/tmp/tmux-{uid}/default"),
        "/tmp/.X11-unix/X0".to_string(),
    ]
    .into_iter()
    .map(PathBuf::from)
    .collect()
}

/// The sockets to try: the well-known ones that exist and those the walk finds.
fn candidates() -> BTreeSet<PathBuf> {
    let uid = nix::unistd::getuid().as_raw();
    let mut found: BTreeSet<PathBuf> = well_known(uid)
        .into_iter()
        .filter(|p| is_socket(p))
        .collect();
    let mut roots = vec![
        PathBuf::from("/tmp"),
        PathBuf::from(format!("/run/user/{uid}")),
    ];
    roots.extend(std::env::var_os("HOME").map(PathBuf::from));
    let mut budget = MAX_ENTRIES;
    for root in roots {
        walk(&root, DEPTH, &mut budget, &mut found);
    }
    found
}

fn is_socket(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// The sockets under `dir`, `depth` levels down, symbolic links not followed.
fn walk(dir: &Path, depth: usize, budget: &mut usize, found: &mut BTreeSet<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if *budget == 0 || found.len() >= MAX_SOCKETS {
            return;
        }
        *budget -= 1;
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_socket() {
            found.insert(entry.path());
        } else if kind.is_dir() && depth > 0 {
            walk(&entry.path(), depth - 1, budget, found);
        }
    }
}

pub(super) async fn sockets(t: Duration) -> Vec<Part> {
    let deadline = Instant::now() + t;
    let found = match tokio::task::spawn_blocking(candidates).await {
        Ok(found) => found,
        Err(e) => return vec![Part::unknown(format!("the walk failed: {e}"))],
    };
    if found.is_empty() {
        return vec![Part::closed("no Unix socket found")];
    }
    let tried = found.len();
    let mut tasks = JoinSet::new();
    for path in found {
        tasks.spawn(async move {
            let accepted = matches!(
                timeout_at(deadline, UnixStream::connect(&path)).await,
                Ok(Ok(_))
            );
            (path, accepted)
        });
    }
    let mut accepted = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        if let Ok((path, true)) = joined {
            accepted.push(path.display().to_string());
        }
    }
    accepted.sort();
    if accepted.is_empty() {
        return vec![Part::closed(format!(
            "{tried} socket(s) tried, none accepted"
        ))];
    }
    let shown = accepted
        .iter()
        .take(8)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    vec![Part::open(format!(
        "accepted: {shown} ({} of {tried} tried)",
        accepted.len()
    ))]
}
