//! Request paths in the one form rules compare (docs/reference/policy-files.md, "Paths").
//!
//! [`normalize`] applies RFC 3986 6.2.2 (percent-encoding in upper case, unreserved
//! characters decoded, dot segments removed) and refuses, as `invalid_request`, what
//! could mean one path here and another at the origin:
//!
//! - `%2F`, `%5C`, `%00`: an encoded slash, backslash or NUL;
//! - an encoded `%` before two hex digits (`%252F`): decoded twice by some servers;
//! - a backslash, or any byte outside RFC 3986's path characters;
//! - an empty segment (`//`): servers differ on whether it collapses, and a `..` after
//!   it removes a different segment depending on that;
//! - a `;` (raw or `%3B`): servers that take path parameters read `/a/..;/b` as `/b`;
//! - a `..` that climbs above the root;
//! - an encoded control character, or bytes that are not UTF-8 once decoded.
//!
//! The query is not part of the path. The proxy forwards the normalised path, so what
//! the origin receives is what was judged.

use std::fmt;

/// A path that survived [`normalize`]: starts with `/`, holds no dot segments, no empty
/// segments, and only upper-case percent escapes of reserved or non-ASCII bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NormalPath(String);

impl NormalPath {
    /// The normal form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NormalPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a path does not normalise (the refusal's detail; the reason is `invalid_request`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Not starting with `/` (origin-form paths only).
    #[error("the path must start with `/`")]
    NotAbsolute,
    /// `%2F`, `%5C` or `%00`, as written.
    #[error("the path holds `{0}`, an encoded slash, backslash or NUL")]
    EncodedSeparator(String),
    /// `%25` before two hex digits, as written.
    #[error("the path holds `{0}`, an encoded percent sign before hex digits (double encoding)")]
    DoubleEncoded(String),
    /// A `%` not followed by two hex digits.
    #[error("the path holds a malformed percent escape")]
    BadEscape,
    /// A character a path may not hold (a control, a space, `\\` ...).
    #[error("the path holds the character {0:?}, which a path may not")]
    BadCharacter(char),
    /// `//`.
    #[error("the path holds an empty segment (`//`)")]
    EmptySegment,
    /// `;`: path parameters are not judged.
    #[error("the path holds `;` (path parameters are not judged)")]
    Parameter,
    /// More `..` than segments.
    #[error("the path climbs above the root with `..`")]
    AboveRoot,
    /// Escapes that do not decode to UTF-8.
    #[error("the path is not UTF-8 once decoded")]
    NotUtf8,
}

/// The path of `path_and_query` (the query cut off), normalised; an empty path is `/`.
pub fn normalize(path_and_query: &str) -> Result<NormalPath, PathError> {
    let path = path_and_query
        .split_once('?')
        .map_or(path_and_query, |(p, _)| p);
    if path.is_empty() {
        return Ok(NormalPath("/".into()));
    }
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    let decoded = decode_unreserved(path)?;
    let mut out: Vec<&str> = Vec::new();
    // Skip the leading `/`: the segments are what follows each slash.
    let segments: Vec<&str> = decoded[1..].split('/').collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." => {}
            ".." => {
                if out.pop().is_none() {
                    return Err(PathError::AboveRoot);
                }
            }
            // The last segment may be empty: `/a/` is a path of its own.
            "" if i != last => return Err(PathError::EmptySegment),
            s => {
                out.push(s);
                continue;
            }
        }
        // A final `.` or `..` leaves a directory: `/a/b/..` is `/a/`.
        if i == last {
            out.push("");
        }
    }
    Ok(NormalPath(format!("/{}", out.join("/"))))
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 `pchar` without `%` (handled apart), plus `/`; `;` is refused on its own.
fn is_path_char(b: u8) -> bool {
    is_unreserved(b)
        || matches!(
            b,
            b'/' | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b'='
                | b':'
                | b'@'
        )
}

fn hex(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

/// Checks every byte, decodes escaped unreserved characters and writes every other
/// escape in upper case. Every escape is also decoded into a scratch buffer, so bytes
/// that are not UTF-8 once decoded are refused too.
fn decode_unreserved(path: &str) -> Result<String, PathError> {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut decoded = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b != b'%' {
            match b {
                b';' => return Err(PathError::Parameter),
                _ if is_path_char(b) => {}
                _ => return Err(PathError::BadCharacter(bad_char(path, i))),
            }
            out.push(char::from(b));
            decoded.push(b);
            i += 1;
            continue;
        }
        let (Some(hi), Some(lo)) = (
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) else {
            return Err(PathError::BadEscape);
        };
        let v = hi * 16 + lo;
        let written = || path[i..i + 3].to_string();
        match v {
            b'/' | b'\\' | 0 => return Err(PathError::EncodedSeparator(written())),
            b';' => return Err(PathError::Parameter),
            b'%' if double_encoded(bytes, i + 3) => {
                return Err(PathError::DoubleEncoded(path[i..i + 5].to_string()))
            }
            0x01..=0x1f | 0x7f => return Err(PathError::BadCharacter(char::from(v))),
            _ if is_unreserved(v) => out.push(char::from(v)),
            _ => {
                out.push('%');
                out.push_str(&format!("{v:02X}"));
            }
        }
        decoded.push(v);
        i += 3;
    }
    if std::str::from_utf8(&decoded).is_err() {
        return Err(PathError::NotUtf8);
    }
    // A `%25` whose following hex digits were themselves escaped (`%25a%61`) is the same
    // double encoding once they are decoded: judged on the decoded form, so that a
    // normalised path normalises to itself.
    let written = out.as_bytes();
    for (at, _) in out.match_indices("%25") {
        if double_encoded(written, at + 3) {
            return Err(PathError::DoubleEncoded(out[at..at + 5].to_string()));
        }
    }
    Ok(out)
}

/// Two hex digits at `at`: the `%25` before them decodes into an escape.
fn double_encoded(bytes: &[u8], at: usize) -> bool {
    let is_hex = |i: usize| bytes.get(i).is_some_and(|b| b.is_ascii_hexdigit());
    is_hex(at) && is_hex(at + 1)
}

/// The character at byte `i` of `s` (a non-ASCII one whole).
fn bad_char(s: &str, i: usize) -> char {
    let mut start = i;
    while !s.is_char_boundary(start) {
        start -= 1;
    }
    s[start..].chars().next().unwrap_or('\u{fffd}')
}

#[cfg(test)]
#[path = "path_tests.rs"]
mod tests;
