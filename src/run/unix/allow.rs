//! What `run --allow-unix` opens (docs/reference/command-line.md, `--allow-unix`): the
//! sockets and directories named, by device and inode, so a path is compared by the
//! file it is, never by its text.

use std::path::PathBuf;

/// The sockets and directories `--allow-unix` opens, by device and inode.
#[derive(Debug, Default, Clone)]
pub(crate) struct AllowUnix {
    sockets: Vec<(u64, u64)>,
    directories: Vec<(u64, u64)>,
}

impl AllowUnix {
    /// From the flags' paths: each must be a socket or a directory.
    pub(crate) fn new(paths: &[PathBuf]) -> Result<AllowUnix, String> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let mut allow = AllowUnix::default();
        for path in paths {
            let meta = std::fs::metadata(path)
                .map_err(|e| format!("--allow-unix {}: {e}", path.display()))?;
            let id = (meta.dev(), meta.ino());
            if meta.file_type().is_socket() {
                allow.sockets.push(id);
            } else if meta.is_dir() {
                allow.directories.push(id);
            } else {
                return Err(format!(
                    "--allow-unix {}: neither a socket nor a directory",
                    path.display()
                ));
            }
        }
        Ok(allow)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.sockets.is_empty() && self.directories.is_empty()
    }

    pub(super) fn socket(&self, stat: &libc::stat) -> bool {
        self.sockets.contains(&(stat.st_dev, stat.st_ino))
    }

    pub(super) fn directory(&self, stat: &libc::stat) -> bool {
        self.directories.contains(&(stat.st_dev, stat.st_ino))
    }
}
