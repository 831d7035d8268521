//! Exfiltration seen (docs/reference/dlp.md): canaries, values planted in a sandbox
//! that no legitimate request sends, and secret detectors (known token shapes, the
//! organization's patterns, the `[[credentials]]` values), looked for in every byte a
//! client sends that the proxy can read before sending it on. Pure: the values in, a
//! [`Scanner`] (canaries) or [`Detectors`] out, and a scan of bytes or of a name giving
//! the first [`Hit`]. No record, answer, metric or
//! log line ever holds a value: a hit names the canary's id, kind and the encoding it
//! was found in, never the bytes.

mod detect;
pub(crate) mod forms;
mod index;
mod kinds;
mod lookout;
mod scanner;

use std::sync::Arc;

use zeroize::Zeroizing;

pub(crate) use detect::{Detectors, Rule};
pub(crate) use forms::Encoding;
pub(crate) use kinds::Kind;
pub(crate) use lookout::Lookout;
pub(crate) use scanner::Scanner;

/// Where a match was found: the record's `dlp.found_in`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FoundIn {
    Target,
    Header,
    Url,
    Body,
    Websocket,
    Dns,
    Sni,
    FirstBytes,
}

impl FoundIn {
    /// As the record spells it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FoundIn::Target => "target",
            FoundIn::Header => "header",
            FoundIn::Url => "url",
            FoundIn::Body => "body",
            FoundIn::Websocket => "websocket",
            FoundIn::Dns => "dns",
            FoundIn::Sni => "sni",
            FoundIn::FirstBytes => "first_bytes",
        }
    }
}

/// A canary: its id (`org:1`, `c1`), its kind, and its value, wiped when dropped.
#[derive(Clone)]
pub struct Canary {
    pub id: Arc<str>,
    pub kind: Arc<str>,
    value: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for Canary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the value.
        write!(f, "Canary({}, {})", self.id, self.kind)
    }
}

impl Canary {
    pub fn new(id: &str, kind: &str, value: Vec<u8>) -> Canary {
        Canary {
            id: Arc::from(id),
            kind: Arc::from(kind),
            value: Zeroizing::new(value),
        }
    }

    pub(crate) fn value(&self) -> &[u8] {
        &self.value
    }
}

/// What a scan found: which canary (or secret detector), in what encoding, where.
/// Never the value.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Hit {
    pub id: Arc<str>,
    pub kind: Arc<str>,
    pub encoding: Encoding,
    pub found_in: FoundIn,
    /// What found it, which says what it does; not part of the record's `dlp`.
    #[serde(skip)]
    pub by: By,
}

/// What found a [`Hit`] (docs/reference/dlp.md, "What happens"): a canary
/// (`exfiltration_detected`), a secret detector that refuses (`secret_detected`), or
/// one whose match is let through and recorded (`egress.flagged`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum By {
    #[default]
    Canary,
    Secret,
    Reported,
}

/// A canary value must be 16 to 256 printable ASCII bytes (docs/reference/dlp.md): long
/// enough that no legitimate request carries it by chance.
pub(crate) fn check_value(value: &[u8]) -> Result<(), String> {
    if !(16..=256).contains(&value.len()) {
        return Err(format!(
            "a canary is 16 to 256 bytes, this one is {}",
            value.len()
        ));
    }
    if !value.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return Err("a canary is printable ASCII without spaces".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
