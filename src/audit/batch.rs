//! The writer's batch: whole audit lines waiting to be written, each sealed by the chain
//! (`super::chain`), and the write that resumes where a short write stopped, so every
//! line reaches the file whole (docs/reference/audit-log.md, "When records are
//! written"); the file it goes to.

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;

use super::chain::{read_tail, Chain, Format, Position, Tail};
use super::Record;

/// Whole lines waiting to be written, and how far into them the file already holds.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) bytes: Vec<u8>,
    pub(super) lines: u64,
    /// Bytes of `bytes` already in the file (a write can stop part-way).
    pub(super) written: usize,
    /// Each line's place, so a line not yet written can be sealed again.
    marks: Vec<Mark>,
}

/// Where a line starts, where its body ends (the chain's fields follow), and whether it
/// is a checkpoint (sealed with a signature).
#[derive(Clone, Copy)]
struct Mark {
    /// The `seq` and `prev` it was sealed with.
    position: Position,
    start: usize,
    body_end: usize,
    checkpoint: bool,
}

impl Batch {
    /// Add `rec` as a line sealed by `chain`; returns the line's index in the batch.
    pub(super) fn push(&mut self, rec: &Record, chain: &mut Chain) -> Option<usize> {
        let start = self.bytes.len();
        // A Record always serialises: every field is a string, number, bool or null.
        let body = match chain.format() {
            Format::Json => serde_json::to_writer(&mut self.bytes, rec)
                .map(|()| {
                    // The closing brace: the chain's fields close the object.
                    self.bytes.pop();
                })
                .is_ok(),
            Format::Ocsf => super::ocsf::write_body(&mut self.bytes, rec).is_ok(),
        };
        if !body {
            self.bytes.truncate(start);
            return None;
        }
        Some(self.seal(start, chain, false))
    }

    /// Add an `audit.checkpoint` line signed by `chain`'s key; returns its index in the
    /// batch.
    pub(super) fn push_checkpoint(&mut self, chain: &mut Chain) -> usize {
        let start = self.bytes.len();
        let ts = super::now_rfc3339();
        let key = chain.key_id().unwrap_or_default().to_string();
        match chain.format() {
            Format::Json => {
                let body = serde_json::json!({"ts": ts, "event": "audit.checkpoint", "key": key});
                serde_json::to_writer(&mut self.bytes, &body).expect("a JSON value serialises");
                self.bytes.pop();
            }
            Format::Ocsf => super::ocsf::write_checkpoint_body(&mut self.bytes, &ts, &key),
        }
        self.seal(start, chain, true)
    }

    fn seal(&mut self, start: usize, chain: &mut Chain, checkpoint: bool) -> usize {
        let body_end = self.bytes.len();
        let position = chain.position();
        chain.seal(&mut self.bytes, start, checkpoint);
        self.marks.push(Mark {
            position,
            start,
            body_end,
            checkpoint,
        });
        self.lines += 1;
        self.marks.len() - 1
    }

    /// The bytes of line `index`, with its newline.
    pub(super) fn line(&self, index: usize) -> std::ops::Range<usize> {
        let start = self.marks[index].start;
        let end = self
            .marks
            .get(index + 1)
            .map_or(self.bytes.len(), |m| m.start);
        start..end
    }

    /// The position of the first line not yet written, if there is one.
    pub(super) fn unwritten_position(&self) -> Option<Position> {
        self.first_unwritten().map(|i| self.marks[i].position)
    }

    fn first_unwritten(&self) -> Option<usize> {
        self.marks.iter().position(|m| m.start >= self.written)
    }

    /// Seal again, from `chain`'s position, every line not yet written (after the file
    /// was reopened under them: they go on in the new file, with its numbers).
    pub(super) fn reseal_unwritten(&mut self, chain: &mut Chain) {
        let Some(first) = self.first_unwritten() else {
            return;
        };
        let unsigned = chain.unsigned_count();
        let from = self.marks[first].start;
        let tail = self.bytes.split_off(from);
        let marks = self.marks.split_off(first);
        self.lines -= marks.len() as u64;
        for mark in &marks {
            let start = self.bytes.len();
            self.bytes
                .extend_from_slice(&tail[mark.start - from..mark.body_end - from]);
            self.seal(start, chain, mark.checkpoint);
        }
        if !marks.iter().any(|m| m.checkpoint) {
            // Those lines were counted when first sealed.
            chain.set_unsigned_count(unsigned);
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
        self.marks.clear();
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
/// The file at `path` opened for appending, and its last line.
pub(super) async fn open_at_tail(path: PathBuf) -> io::Result<(File, Option<Tail>)> {
    tokio::task::spawn_blocking(move || {
        let file = open_append(&path)?;
        Ok((file, read_tail(&path)?))
    })
    .await
    .map_err(io::Error::other)?
}

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
