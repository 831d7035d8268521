//! Reading audit logs (docs/reference/audit-log.md): plain or gzip JSON Lines, told apart
//! by their magic bytes, so rotated `.gz` files mix with the live one, each line the
//! record's own JSON or an OCSF event (`--audit-format ocsf`, read back as the former).
//! The one reader of `audit summarize`, `audit suggest` and `audit replay`.

use std::borrow::Cow;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::Deserialize;

use super::SummaryError;
use crate::audit::ocsf;
use crate::load::LoadError;
use crate::policy::Reason;

/// Why `audit suggest` or `audit replay` could not run (exit 2): a policy that does not
/// load, or a log that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{0}")]
    Load(#[from] LoadError),
    #[error("{0}")]
    Read(#[from] SummaryError),
}

/// Call `f` with each record of the log at `path` as the record's own JSON line (without
/// its `\n`): an OCSF line is read back as one (docs/reference/audit-log.md, "OCSF"). A
/// cut gzip stream (a log rotated mid-write) ends the file, not the run: the returned
/// warnings say so.
pub fn for_each_line(path: &Path, mut f: impl FnMut(&[u8])) -> Result<Vec<String>, SummaryError> {
    for_each_raw_line(path, |line, _| {
        if !ocsf::is_ocsf(line) {
            return f(line);
        }
        // An OCSF line that does not read back is passed on as it is: malformed.
        match ocsf::to_native(line) {
            Some(native) => f(&native),
            None => f(line),
        }
    })
}

/// Each line as it is in the file (OCSF or not), also telling `f` whether it ended with
/// its `\n` (only the last line of a file can lack it): what `audit verify` hashes.
pub fn for_each_raw_line(
    path: &Path,
    mut f: impl FnMut(&[u8], bool),
) -> Result<Vec<String>, SummaryError> {
    let name = path.display().to_string();
    let io = |source| SummaryError::Io {
        path: name.clone(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut magic = [0u8; 2];
    let n = file.read(&mut magic).map_err(io)?;
    let head = std::io::Cursor::new(magic[..n].to_vec());
    let raw = head.chain(file);
    let mut reader: Box<dyn BufRead> = if magic[..n] == [0x1f, 0x8b] {
        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(raw)))
    } else {
        Box::new(BufReader::with_capacity(1 << 16, raw))
    };
    let mut warnings = Vec::new();
    let mut line = Vec::new();
    let mut i = 0usize;
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {
                match line.strip_suffix(b"\n") {
                    Some(l) => f(l, true),
                    None => f(&line, false),
                }
                i += 1;
            }
            Err(e) => {
                warnings.push(format!("{name}: stopped reading after line {i}: {e}"));
                break;
            }
        }
    }
    Ok(warnings)
}

/// The fields of an audit record that re-deciding its destination needs.
#[derive(Debug, Deserialize)]
pub struct Attempt<'a> {
    /// Borrowed from the line unless it holds escapes.
    #[serde(borrow)]
    pub event: Cow<'a, str>,
    #[serde(default, borrow)]
    pub request_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub host: Option<Cow<'a, str>>,
    #[serde(default)]
    pub port: Option<u16>,
    /// The request's method: `CONNECT` for a tunnel, `DNS` for a query, else an
    /// inspected or plain HTTP request's.
    #[serde(default, borrow)]
    pub method: Option<Cow<'a, str>>,
    /// `http://...` for plain HTTP, `https://...` inside an intercepted tunnel.
    #[serde(default, borrow)]
    pub url: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub reason: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub resolved_ip: Option<Cow<'a, str>>,
}

/// The attempt one line of an audit log records, for `suggest` and `replay`: `None` for a
/// blank line (not counted) and for one that is not a JSON object with an `event`
/// (skipped, and counted in `malformed`).
pub fn attempt<'l>(line: &'l [u8], malformed: &mut u64) -> Option<Attempt<'l>> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let parsed = serde_json::from_slice::<Attempt>(line).ok();
    *malformed += u64::from(parsed.is_none());
    parsed
}

/// The method and the path (with its query) of a logged HTTP request: `None` for a
/// tunnel, a DNS query, or a record without a URL.
pub fn request_line<'r>(a: &'r Attempt) -> Option<(&'r str, &'r str)> {
    let method = a
        .method
        .as_deref()
        .filter(|m| !matches!(*m, "CONNECT" | "DNS"))?;
    let url = a.url.as_deref()?;
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path = rest.find('/').map_or("/", |i| &rest[i..]);
    Some((method, path))
}

/// The events that record a decision about a destination.
pub const ALLOWED: &str = "egress.allowed";
pub const DENIED: &str = "egress.denied";
pub const WOULD_DENY: &str = "egress.would_deny";

/// Denial reasons a destination alone decides, so the record can be judged again.
const DESTINATION_REASONS: [Reason; 9] = [
    Reason::NotInOrgAllowlist,
    Reason::NotInRequestPolicy,
    Reason::NetworkDisabled,
    Reason::DeniedDomain,
    Reason::PortNotAllowed,
    Reason::SharedHosting,
    Reason::PrivateAddress,
    // Only with the record's method and path.
    Reason::MethodNotAllowed,
    Reason::PathNotAllowed,
];

/// The reason a record names, when it is one a destination alone decides (its spelling
/// is the policy core's, [`Reason::as_str`]).
pub fn destination_reason(reason: Option<&str>) -> Option<Reason> {
    let reason = reason?;
    DESTINATION_REASONS
        .into_iter()
        .find(|r| r.as_str() == reason)
}

/// Whether a destination reason needs the record's method and path to be judged again.
pub fn needs_request(reason: Reason) -> bool {
    matches!(reason, Reason::MethodNotAllowed | Reason::PathNotAllowed)
}

#[cfg(test)]
#[path = "read_tests.rs"]
mod tests;
