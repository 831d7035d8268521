//! The writer's batch: whole audit lines waiting to be written, and the write that
//! resumes where a short write stopped, so every line reaches the file whole
//! (docs/reference/audit-log.md, "When records are written"); the file it goes to.

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;

use super::Record;

/// Whole lines waiting to be written, and how far into them the file already holds.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) bytes: Vec<u8>,
    pub(super) lines: u64,
    /// Bytes of `bytes` already in the file (a write can stop part-way).
    pub(super) written: usize,
}

impl Batch {
    pub(super) fn push(&mut self, rec: &Record) {
        // A Record always serialises: every field is a string, number, bool or null.
        if serde_json::to_writer(&mut self.bytes, rec).is_ok() {
            self.bytes.push(b'\n');
            self.lines += 1;
        }
    }

    /// Whole lines among the bytes already written.
    pub(super) fn complete_lines(&self) -> u64 {
        self.bytes[..self.written]
            .iter()
            .filter(|&&b| b == b'\n')
            .count() as u64
    }

    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.lines = 0;
        self.written = 0;
    }
}

/// Write `bytes[*at..]`, moving `at` past what was written, so a write that stops
/// part-way is resumed where it stopped and every line reaches the file whole.
pub(super) fn write_from(file: &mut File, bytes: &[u8], at: &mut usize) -> io::Result<()> {
    while *at < bytes.len() {
        match file.write(&bytes[*at..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => *at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The log's file, opened for appending (created with mode 0600 if missing).
pub(super) fn open_append(path: &PathBuf) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.append(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// Standard output as a file: a duplicate of descriptor 1, so the writer owns its handle
/// and never contends with `print!`'s lock.
#[cfg(unix)]
pub(super) fn stdout_file() -> io::Result<File> {
    use std::os::fd::AsFd;
    let fd = io::stdout().as_fd().try_clone_to_owned()?;
    Ok(File::from(fd))
}

#[cfg(not(unix))]
pub(super) fn stdout_file() -> io::Result<File> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "an audit log on standard output needs a Unix system",
    ))
}
