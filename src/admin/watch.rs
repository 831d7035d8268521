//! `serve --watch-policy`: reload when the `--org` or `--policy` file changes
//! (docs/scale-out.md, "Policy changes"), in addition to SIGHUP.
//!
//! A Kubernetes ConfigMap volume is updated by writing a new hidden directory and
//! swapping the `..data` symlink to it: the file the proxy was given (`org.toml ->
//! ..data/org.toml`) never changes itself, and inotify on it sees nothing. So each file
//! is polled: the path it resolves to now and the hash of its content, once a second.
//! Policy files are small, so reading them is cheap, and a change of target, content,
//! or both is seen whatever way it was made (symlink swap, rename over, rewrite in
//! place). A file missing for a moment (mid-swap) is not a change; a file that does not
//! load is a reload that fails, leaving the running policies in force.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::reload::Reloader;

/// How often the files are looked at.
pub(crate) const POLL: Duration = Duration::from_secs(1);

/// What a file is now: the path it resolves to and its content's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    target: PathBuf,
    hash: [u8; 32],
}

fn look(path: &Path) -> Option<Seen> {
    let target = std::fs::canonicalize(path).ok()?;
    let content = std::fs::read(&target).ok()?;
    Some(Seen {
        target,
        hash: crate::audit::chain::hash(&content),
    })
}

/// Poll `files` and reload through `reloader` whenever one of them changes.
pub(crate) async fn watch(files: Vec<PathBuf>, reloader: Arc<Reloader>) {
    let mut seen: Vec<Option<Seen>> = files.iter().map(|f| look(f)).collect();
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut changed = false;
        for (file, last) in files.iter().zip(seen.iter_mut()) {
            let Some(now) = look(file) else {
                tracing::debug!(file = %file.display(), "a watched policy file cannot be read now; looking again");
                continue;
            };
            if last.as_ref() != Some(&now) {
                tracing::info!(file = %file.display(), target = %now.target.display(), "a watched policy file changed: reloading");
                *last = Some(now);
                changed = true;
            }
        }
        if changed {
            let _ = reloader.reload().await;
        }
    }
}
