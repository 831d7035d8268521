//! The audit log's chain (docs/reference/audit-log.md, "The chain"): every line ends with
//! `"seq"` (from 1, per file) and `"prev"`, the SHA-256 (hex) of the line before it
//! (of the last line of the file before it across a reopen, else 64 zeros). With a
//! signing key, an `audit.checkpoint` line every [`CHECKPOINT_EVERY`] records, every
//! [`CHECKPOINT_INTERVAL`] and at shutdown signs its own `seq` and `prev`.
//!
//! The writer task seals each line as it puts it in its batch, so the request path only
//! queues the record as before. A line is a body (the record's JSON object, left open)
//! and the chain's fields that close it: a line not yet written can be sealed again with
//! other numbers when the file is reopened under it.

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;

use super::keys::Signer;

/// Records between two checkpoints at most.
pub(crate) const CHECKPOINT_EVERY: u64 = 1000;

/// The longest time between a record and the checkpoint that covers it.
pub(crate) const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(60);

/// The `prev` of the first line of a chain.
pub(crate) const GENESIS: [u8; 32] = [0; 32];

/// How records are written (`--audit-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// The proxy's own JSON object (docs/reference/audit-log.md, "Fields").
    #[default]
    Json,
    /// An OCSF 1.5 event (docs/reference/audit-log.md, "OCSF").
    Ocsf,
}

/// The SHA-256 of a line's bytes (without its newline); also what is kept of a session
/// token (`crate::session::hash_token`) and of a watched file (`crate::admin::watch`).
pub(crate) fn hash(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// A line's `seq` and `prev`.
pub(super) type Position = (u64, [u8; 32]);

/// Where the chain stands: the next line's `seq` and `prev`.
#[derive(Debug)]
pub(super) struct Chain {
    format: Format,
    next_seq: u64,
    prev: [u8; 32],
    signer: Option<Arc<Signer>>,
    /// Records sealed since the last checkpoint.
    unsigned: u64,
}

impl Chain {
    pub(super) fn new(format: Format, signer: Option<Arc<Signer>>) -> Chain {
        Chain {
            format,
            next_seq: 1,
            prev: GENESIS,
            signer,
            unsigned: 0,
        }
    }

    pub(super) fn format(&self) -> Format {
        self.format
    }

    /// The chain goes on in a file whose last line is `tail`: after that line, or, for
    /// an empty file (`None`), from seq 1 after `before`'s `prev`, the last line written
    /// to the file before it. `before` is where the first line not yet written stands.
    pub(super) fn continue_in(&mut self, tail: Option<Tail>, before: Position) {
        let (seq, prev) = match tail {
            Some(tail) => (tail.seq.map_or(1, |s| s.saturating_add(1)), tail.hash),
            None => (1, before.1),
        };
        self.next_seq = seq;
        self.prev = prev;
    }

    /// The next line's `seq` and `prev`.
    pub(super) fn position(&self) -> Position {
        (self.next_seq, self.prev)
    }

    /// Records sealed since the last checkpoint (kept across a reseal).
    pub(super) fn unsigned_count(&self) -> u64 {
        self.unsigned
    }

    pub(super) fn set_unsigned_count(&mut self, n: u64) {
        self.unsigned = n;
    }

    /// A checkpoint is due by count.
    pub(super) fn checkpoint_due(&self) -> bool {
        self.signer.is_some() && self.unsigned >= CHECKPOINT_EVERY
    }

    /// Records since the last checkpoint, with a key to sign one.
    pub(super) fn unsigned(&self) -> u64 {
        if self.signer.is_some() {
            self.unsigned
        } else {
            0
        }
    }

    pub(super) fn signs(&self) -> bool {
        self.signer.is_some()
    }

    /// The signing key's id, for a checkpoint's body.
    pub(super) fn key_id(&self) -> Option<&str> {
        self.signer.as_deref().map(Signer::id)
    }

    /// Close the body at `out[start..]` with the chain's fields (and, for a checkpoint,
    /// its signature), hash the line and end it with a newline.
    pub(super) fn seal(&mut self, out: &mut Vec<u8>, start: usize, checkpoint: bool) {
        let (seq, prev) = (self.next_seq, self.prev);
        let mut hex = [0u8; 64];
        data_encoding::HEXLOWER.encode_mut(&prev, &mut hex);
        let signature = match (&self.signer, checkpoint) {
            (Some(signer), true) => Some(signer.sign(seq, &prev)),
            _ => None,
        };
        let mut seq_text = itoa_buf(seq);
        let seq_text = seq_text.as_str();
        match self.format {
            Format::Json => {
                out.extend_from_slice(b",\"seq\":");
                out.extend_from_slice(seq_text.as_bytes());
                out.extend_from_slice(b",\"prev\":\"");
                out.extend_from_slice(&hex);
                out.push(b'"');
                push_signature(out, signature);
                out.push(b'}');
            }
            Format::Ocsf => {
                // The body ends inside `unmapped`; `metadata` comes last.
                out.extend_from_slice(b",\"prev\":\"");
                out.extend_from_slice(&hex);
                out.push(b'"');
                push_signature(out, signature);
                out.extend_from_slice(b"},\"metadata\":");
                out.extend_from_slice(super::ocsf::METADATA_OPEN.as_bytes());
                out.extend_from_slice(b",\"sequence\":");
                out.extend_from_slice(seq_text.as_bytes());
                out.extend_from_slice(b"}}");
            }
        }
        self.prev = hash(&out[start..]);
        out.push(b'\n');
        self.next_seq = seq.saturating_add(1);
        if checkpoint {
            self.unsigned = 0;
        } else {
            self.unsigned += 1;
        }
    }
}

fn push_signature(out: &mut Vec<u8>, signature: Option<[u8; 64]>) {
    if let Some(sig) = signature {
        out.extend_from_slice(b",\"signature\":\"");
        let mut text = [0u8; 88];
        let n = base64::engine::general_purpose::STANDARD
            .encode_slice(sig, &mut text)
            .expect("64 bytes are 88 base64 characters");
        out.extend_from_slice(&text[..n]);
        out.push(b'"');
    }
}

/// `n` in decimal, without an allocation.
struct Itoa {
    buf: [u8; 20],
    at: usize,
}

impl Itoa {
    fn as_str(&mut self) -> &str {
        std::str::from_utf8(&self.buf[self.at..]).expect("digits are ASCII")
    }
}

fn itoa_buf(mut n: u64) -> Itoa {
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    Itoa { buf, at }
}

/// The last line of a file the chain goes on in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tail {
    /// Its `seq` (`metadata.sequence` in OCSF), if it has one.
    seq: Option<u64>,
    hash: [u8; 32],
}

/// The longest last line [`read_tail`] looks for.
const TAIL_WINDOW: u64 = 1 << 20;

/// The last whole line of the file at `path`, or `None` when it is empty (or missing).
pub(super) fn read_tail(path: &std::path::Path) -> std::io::Result<Option<Tail>> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(None);
    }
    let from = len.saturating_sub(TAIL_WINDOW);
    file.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::with_capacity((len - from) as usize);
    file.read_to_end(&mut bytes)?;
    let whole = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => &bytes[..end],
        // No whole line: the chain starts again after these bytes.
        None => &bytes[..],
    };
    let line = match whole.iter().rposition(|&b| b == b'\n') {
        Some(i) => &whole[i + 1..],
        None => whole,
    };
    Ok(Some(Tail {
        seq: line_seq(line),
        hash: hash(line),
    }))
}

/// A line's `seq` (or OCSF's `metadata.sequence`).
fn line_seq(line: &[u8]) -> Option<u64> {
    #[derive(Deserialize)]
    struct Meta {
        sequence: Option<u64>,
    }
    #[derive(Deserialize)]
    struct Seq {
        seq: Option<u64>,
        metadata: Option<Meta>,
    }
    let parsed: Seq = serde_json::from_slice(line).ok()?;
    parsed.seq.or(parsed.metadata.and_then(|m| m.sequence))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed(chain: &mut Chain, body: &str) -> String {
        let mut out = body.as_bytes().to_vec();
        chain.seal(&mut out, 0, false);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn each_line_names_its_seq_and_the_hash_of_the_line_before() {
        let mut chain = Chain::new(Format::Json, None);
        let first = sealed(&mut chain, "{\"event\":\"a\"");
        assert_eq!(
            first,
            format!(
                "{{\"event\":\"a\",\"seq\":1,\"prev\":\"{}\"}}\n",
                "0".repeat(64)
            )
        );
        let second = sealed(&mut chain, "{\"event\":\"b\"");
        let prev = data_encoding::HEXLOWER.encode(&hash(first.trim_end().as_bytes()));
        assert_eq!(
            second,
            format!("{{\"event\":\"b\",\"seq\":2,\"prev\":\"{prev}\"}}\n")
        );
        assert_eq!(line_seq(second.trim_end().as_bytes()), Some(2));
    }

    #[test]
    fn itoa_writes_decimal() {
        for n in [0, 7, 10, 999, 1000, u64::MAX] {
            assert_eq!(itoa_buf(n).as_str(), n.to_string());
        }
    }
}
