//! `egress-proxy audit verify [--public-key FILE] LOG...` (docs/reference/audit-log.md,
//! "The chain"): checks that every line's `prev` is the SHA-256 of the line before it
//! and its `seq` the next number, across files given in order (each file's first line
//! goes on from the last line of the file before it), and with a public key that every
//! `audit.checkpoint` is signed by it. The first line that breaks the chain is named,
//! with what most likely happened to it: changed, removed, inserted, reordered or cut.
//! Both formats are read (`seq`/`prev`, or OCSF's `metadata.sequence`/`unmapped.prev`).

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;

use super::read::for_each_raw_line;
use super::SummaryError;
use crate::audit::chain::{hash, GENESIS};
use crate::audit::keys::{self, KeyError, Verifier};

/// Why `audit verify` could not run (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("{0}")]
    Read(#[from] SummaryError),
    #[error("{0}")]
    Key(#[from] KeyError),
}

/// `audit keygen DIR`: the private and public key files it wrote.
pub fn keygen(dir: &Path) -> Result<(PathBuf, PathBuf), KeyError> {
    keys::keygen(dir)
}

/// A line of a log: its file (an index into the files given) and its number in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    pub file: usize,
    pub line: u64,
}

/// The first break in the chain.
#[derive(Debug, PartialEq, Eq)]
pub enum Break {
    /// The line is not the one the next line names as its `prev`, or its own fields do
    /// not follow the line before it.
    Changed(Loc),
    /// Lines are missing before this one: its `seq` skips `missing`.
    Removed { before: Loc, missing: (u64, u64) },
    /// A line the chain does not hold: the next line goes on from the line before it.
    Inserted(Loc),
    /// Two lines swapped, or a line out of its place (`seq` goes back).
    Reordered { at: Loc, seq: u64, expected: u64 },
    /// The last line of a file ends without its newline: cut short.
    Cut(Loc),
    /// A file's first line does not go on from the last line of the file before it.
    NotAfter { at: Loc, previous_file: usize },
    /// A line without `seq` and `prev`.
    Unchained(Loc),
    /// A checkpoint whose signature does not verify with the key given.
    BadSignature(Loc),
    /// A checkpoint signed by another key (its id).
    OtherKey { at: Loc, key: String },
    /// A key was given and no checkpoint signed by it was found.
    NoCheckpoint,
}

/// What `audit verify` found.
#[derive(Debug)]
pub struct Report {
    pub files: Vec<String>,
    pub records: u64,
    pub checkpoints: u64,
    /// The key the checkpoints were verified with (its id), if one was given.
    pub key: Option<String>,
    pub last_checkpoint: Option<Loc>,
    /// Lines after the last checkpoint.
    pub after_checkpoint: u64,
    pub notes: Vec<String>,
    pub broken: Option<Break>,
}

impl Report {
    pub fn intact(&self) -> bool {
        self.broken.is_none()
    }

    fn at(&self, loc: Loc) -> String {
        format!("{}:{}", self.files[loc.file], loc.line)
    }
}

/// The chain's fields of one line, in either format.
#[derive(Deserialize)]
struct Fields<'a> {
    seq: Option<u64>,
    #[serde(borrow)]
    prev: Option<Cow<'a, str>>,
    #[serde(borrow)]
    event: Option<Cow<'a, str>>,
    #[serde(borrow)]
    key: Option<Cow<'a, str>>,
    #[serde(borrow)]
    signature: Option<Cow<'a, str>>,
    metadata: Option<Metadata>,
    #[serde(borrow)]
    unmapped: Option<Unmapped<'a>>,
}

#[derive(Deserialize)]
struct Metadata {
    sequence: Option<u64>,
}

#[derive(Deserialize)]
struct Unmapped<'a> {
    #[serde(borrow)]
    prev: Option<Cow<'a, str>>,
    #[serde(borrow)]
    event: Option<Cow<'a, str>>,
    #[serde(borrow)]
    key: Option<Cow<'a, str>>,
    #[serde(borrow)]
    signature: Option<Cow<'a, str>>,
}

/// One line, as the check needs it.
struct Entry {
    loc: Loc,
    first_in_file: bool,
    whole: bool,
    hash: [u8; 32],
    /// `None` when the line has no chain fields (or is not JSON).
    link: Option<(u64, [u8; 32])>,
    /// A checkpoint's key id and signature.
    checkpoint: Option<(String, Vec<u8>)>,
}

impl Entry {
    fn parse(loc: Loc, line: &[u8], whole: bool) -> Entry {
        let fields = serde_json::from_slice::<Fields>(line).ok();
        let (link, checkpoint) = fields.map_or((None, None), |f| {
            let unmapped = f.unmapped;
            let (u_prev, u_event, u_key, u_sig) = match unmapped {
                Some(u) => (u.prev, u.event, u.key, u.signature),
                None => (None, None, None, None),
            };
            let seq = f.seq.or(f.metadata.and_then(|m| m.sequence));
            let prev = f.prev.or(u_prev).and_then(|p| unhex(&p));
            let link = seq.zip(prev);
            let is_checkpoint = f.event.or(u_event).as_deref() == Some("audit.checkpoint");
            let checkpoint = is_checkpoint.then(|| {
                let key = f.key.or(u_key).unwrap_or_default().into_owned();
                let sig = f.signature.or(u_sig).unwrap_or_default();
                let sig = base64::engine::general_purpose::STANDARD
                    .decode(sig.as_bytes())
                    .unwrap_or_default();
                (key, sig)
            });
            (link, checkpoint)
        });
        Entry {
            loc,
            first_in_file: loc.line == 1,
            whole,
            hash: hash(line),
            link,
            checkpoint,
        }
    }
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if text.len() != 64 {
        return None;
    }
    data_encoding::HEXLOWER_PERMISSIVE
        .decode_mut(text.as_bytes(), &mut out)
        .ok()?;
    Some(out)
}

/// A line the chain accepted.
#[derive(Clone, Copy)]
struct Seen {
    loc: Loc,
    hash: [u8; 32],
    seq: u64,
}

struct Checker<'k> {
    key: Option<&'k Verifier>,
    last: Option<Seen>,
    before_last: Option<Seen>,
    report: Report,
}

/// Checks the chain of the logs in `files`, in order, and with `public_key` the
/// checkpoints' signatures.
pub fn verify(files: &[PathBuf], public_key: Option<&Path>) -> Result<Report, VerifyError> {
    let key = public_key.map(Verifier::load).transpose()?;
    let mut checker = Checker {
        key: key.as_ref(),
        last: None,
        before_last: None,
        report: Report {
            files: files.iter().map(|f| f.display().to_string()).collect(),
            records: 0,
            checkpoints: 0,
            key: key.as_ref().map(|k| k.id().to_string()),
            last_checkpoint: None,
            after_checkpoint: 0,
            notes: Vec::new(),
            broken: None,
        },
    };
    let mut window: VecDeque<Entry> = VecDeque::with_capacity(3);
    for (file, path) in files.iter().enumerate() {
        let mut line = 0u64;
        let warnings = for_each_raw_line(path, |bytes, whole| {
            if checker.report.broken.is_some() {
                return;
            }
            line += 1;
            window.push_back(Entry::parse(Loc { file, line }, bytes, whole));
            if window.len() == 3 {
                checker.check(&mut window);
            }
        })?;
        checker.report.notes.extend(warnings);
    }
    while !window.is_empty() && checker.report.broken.is_none() {
        checker.check(&mut window);
    }
    let report = &mut checker.report;
    if report.broken.is_none() && report.key.is_some() && report.checkpoints == 0 {
        report.broken = Some(Break::NoCheckpoint);
    }
    Ok(checker.report)
}

impl Checker<'_> {
    /// Check the window's first line against the lines before it (and, to tell what
    /// happened, the two after it), then drop it from the window.
    fn check(&mut self, window: &mut VecDeque<Entry>) {
        let cur = &window[0];
        let next = window.get(1);
        if let Some(b) = self.judge(cur, next) {
            self.report.broken = Some(b);
            return;
        }
        let cur = window.pop_front().expect("the window has a line");
        let (seq, prev) = cur.link.expect("an accepted line is chained");
        if let Some((key_id, signature)) = &cur.checkpoint {
            if let Some(key) = self.key {
                if key_id != key.id() {
                    let key = key_id.clone();
                    self.report.broken = Some(Break::OtherKey { at: cur.loc, key });
                    return;
                }
                if !key.verifies(seq, &prev, signature) {
                    self.report.broken = Some(Break::BadSignature(cur.loc));
                    return;
                }
            }
            self.report.checkpoints += 1;
            self.report.last_checkpoint = Some(cur.loc);
            self.report.after_checkpoint = 0;
        } else {
            self.report.records += 1;
            self.report.after_checkpoint += 1;
        }
        self.before_last = self.last;
        self.last = Some(Seen {
            loc: cur.loc,
            hash: cur.hash,
            seq,
        });
    }

    /// `None` when `cur` goes on from the last line accepted, else the break.
    fn judge(&mut self, cur: &Entry, next: Option<&Entry>) -> Option<Break> {
        if !cur.whole {
            return Some(Break::Cut(cur.loc));
        }
        let Some(last) = self.last else {
            // The first line given starts the check, wherever it is in the chain.
            let Some((seq, prev)) = cur.link else {
                return Some(Break::Unchained(cur.loc));
            };
            if seq != 1 || prev != GENESIS {
                let at = self.report.at(cur.loc);
                self.report.notes.push(format!(
                    "{at}: the check starts at seq {seq}, after a line not given"
                ));
            }
            return None;
        };
        let expected = if cur.first_in_file {
            (1, last.hash)
        } else {
            (last.seq + 1, last.hash)
        };
        let follows = |e: &Entry| e.link == Some(expected);
        if follows(cur) {
            return None;
        }
        let (eseq, eprev) = expected;
        if next.is_some_and(follows) {
            let next = next.expect("checked");
            return Some(if cur.link == Some((eseq + 1, next.hash)) {
                Break::Reordered {
                    at: cur.loc,
                    seq: eseq + 1,
                    expected: eseq,
                }
            } else {
                Break::Inserted(cur.loc)
            });
        }
        let Some((seq, prev)) = cur.link else {
            // Not JSON, or without the chain's fields: a line changed past reading.
            return Some(Break::Changed(cur.loc));
        };
        if cur.first_in_file {
            return Some(Break::NotAfter {
                at: cur.loc,
                previous_file: last.loc.file,
            });
        }
        if seq == eseq {
            // `prev` is not the hash of the line before: that line changed, unless the
            // next line does not name this one either (then this one changed).
            let next_names_cur = next.is_none_or(|n| n.link.map(|l| l.1) == Some(cur.hash));
            return Some(Break::Changed(if next_names_cur {
                last.loc
            } else {
                cur.loc
            }));
        }
        if let Some(before) = self.before_last {
            if seq == last.seq && prev == before.hash {
                // Two lines claim one place: the one the next line names is the chain's.
                let next_names_cur = next.is_some_and(|n| n.link.map(|l| l.1) == Some(cur.hash));
                return Some(if next_names_cur {
                    Break::Inserted(last.loc)
                } else {
                    Break::Reordered {
                        at: cur.loc,
                        seq,
                        expected: eseq,
                    }
                });
            }
        }
        if prev == eprev {
            // It follows the line before, but not with the next number.
            return Some(Break::Changed(cur.loc));
        }
        if seq > eseq {
            return Some(Break::Removed {
                before: cur.loc,
                missing: (eseq, seq - 1),
            });
        }
        Some(Break::Reordered {
            at: cur.loc,
            seq,
            expected: eseq,
        })
    }
}

/// The report as text: one line saying intact or where it broke, then the notes.
pub fn text(report: &Report) -> String {
    let mut out = match &report.broken {
        Some(b) => format!("broken: {}\n", Described(report, b)),
        None => intact_line(report),
    };
    for note in &report.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

fn intact_line(r: &Report) -> String {
    let mut out = format!(
        "intact: {} in {}",
        count(r.records, "record"),
        count(r.files.len() as u64, "file")
    );
    match (&r.key, r.last_checkpoint) {
        (Some(key), Some(last)) => out.push_str(&format!(
            "; {} signed by key {key}, the last at {} ({} records after it not yet signed)",
            count(r.checkpoints, "checkpoint"),
            r.at(last),
            r.after_checkpoint
        )),
        (None, _) if r.checkpoints > 0 => out.push_str(&format!(
            "; {} not checked (give --public-key)",
            count(r.checkpoints, "checkpoint")
        )),
        _ => {}
    }
    out.push('\n');
    out
}

/// `1 record`, `2 records`.
fn count(n: u64, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

struct Described<'a>(&'a Report, &'a Break);

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.0;
        match self.1 {
            Break::Changed(at) => write!(f, "{}: this line was changed (the chain does not hold it as written)", r.at(*at)),
            Break::Removed { before, missing } if missing.0 == missing.1 => write!(f, "{}: a line was removed before this one (seq {} is missing)", r.at(*before), missing.0),
            Break::Removed { before, missing } => write!(f, "{}: lines were removed before this one (seq {} to {} are missing)", r.at(*before), missing.0, missing.1),
            Break::Inserted(at) => write!(f, "{}: this line was inserted (the line after it goes on from the line before it)", r.at(*at)),
            Break::Reordered { at, seq, expected } => write!(f, "{}: this line is out of order (seq {seq} where {expected} was due)", r.at(*at)),
            Break::Cut(at) => write!(f, "{}: this line was cut (it ends without its newline)", r.at(*at)),
            Break::NotAfter { at, previous_file } => write!(f, "{}: the file does not go on from the last line of {} (a file missing or out of order, that line changed, or a chain the proxy began anew on an empty file: verify that file on its own)", r.at(*at), r.files[*previous_file]),
            Break::Unchained(at) => write!(f, "{}: this line has no seq and prev (not a record of the chain)", r.at(*at)),
            Break::BadSignature(at) => write!(f, "{}: this checkpoint's signature does not verify with the key given", r.at(*at)),
            Break::OtherKey { at, key } => write!(f, "{}: this checkpoint was signed by key {key}, not the key given ({})", r.at(*at), r.key.as_deref().unwrap_or("")),
            Break::NoCheckpoint => write!(f, "no checkpoint signed by key {} in the logs: nothing could be verified with it", r.key.as_deref().unwrap_or("")),
        }
    }
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
