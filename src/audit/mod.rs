//! The audit log (docs/reference/audit-log.md).
//!
//! One JSON object per line for every denied attempt (and allowed connection with
//! `--audit-allowed`): the record ([`Record`]), its time format and request ids here;
//! the queue and the task that writes the file in [`writer`], on its own thread
//! ([`thread`]); the chain of `seq` and
//! `prev` every line carries, and its signed checkpoints, in [`chain`] and [`keys`]; a
//! record as an OCSF event (`--audit-format ocsf`), and back, in [`ocsf`]; each line as
//! written, for the OpenTelemetry export, in [`export`], with what it needs beyond the
//! record in [`trace`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use time::{OffsetDateTime, PrimitiveDateTime};

mod batch;
pub(crate) mod chain;
mod export;
pub(crate) mod keys;
mod live;
pub(crate) mod ocsf;
mod thread;
mod trace;
mod writer;
pub(crate) use chain::Format;
pub(crate) use export::{ExportQueue, Written};
pub(crate) use live::LiveRecord;
pub(crate) use trace::Trace;
pub(crate) use writer::{AuditLog, AuditOptions, OnFailure};

/// Longest query string kept in `url`, in bytes.
pub(crate) const MAX_QUERY_BYTES: usize = 256;

/// One audit event, serialised as one JSON line.
///
/// There is deliberately no field for credentials: session tokens, the admin token and
/// `Proxy-Authorization` have nowhere to go, so they cannot leak into the log. `url` must
/// be built from the request target, without userinfo; [`clip_url`] also strips any.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Record {
    /// RFC 3339 UTC with milliseconds, see [`now_rfc3339`].
    pub ts: String,
    /// `egress.denied`, `egress.allowed`, `egress.would_deny`, `session.revoked`,
    /// `session.ended`,
    /// `websocket.opened`, `websocket.closed` or `approval.allowed`, `approval.denied`,
    /// `approval.expired`.
    pub event: &'static str,
    pub request_id: String,
    pub session: Option<String>,
    /// The client's `ip:port`.
    pub client: String,
    pub method: String,
    pub host: String,
    /// `None` for a DNS query (it names no port).
    pub port: Option<u16>,
    /// Plain HTTP only; see [`clip_url`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub url_truncated: bool,
    /// A reason from the closed set (docs/reference/answers.md, "Reasons").
    pub reason: Option<&'static str>,
    /// The policy entry that decided, if any.
    pub rule: Option<String>,
    /// `org`, `request` or `address`.
    pub policy_level: Option<&'static str>,
    pub shared_hosting: bool,
    pub resolved_ip: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_up: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_down: Option<u64>,
    /// What a canary (or a secret detector) found: id, kind, encoding, where; never the
    /// value (docs/reference/dlp.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dlp: Option<crate::dlp::Hit>,
    /// Why a session ended (`session.ended`): `canary`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<&'static str>,
    /// An intercepted tunnel's record: its bytes are those of the requests inside.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub intercepted: bool,
    /// Which listener the attempt came through.
    pub via: Via,
    /// The approval a held request waited on (`approval.*` records only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// How it was decided: `allow-once`, `allow-session`, `deny` or `expired`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<&'static str>,
    /// The request's start and its client's `traceparent`, for the OpenTelemetry
    /// export only: never written (docs/reference/opentelemetry.md).
    #[serde(skip)]
    pub trace: Option<Trace>,
}

/// The listener an attempt came through: the audit record's `via`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Via {
    /// The explicit proxy port (`--listen`).
    #[default]
    Proxy,
    /// A connection redirected to the transparent listener.
    Transparent,
    /// A query to the DNS listener.
    Dns,
    /// A SOCKS5 `CONNECT` (`--socks-listen`).
    Socks5,
}

impl Record {
    /// A record stamped now, with every optional field empty.
    pub(crate) fn new(
        event: &'static str,
        request_id: String,
        client: String,
        method: String,
        host: String,
        port: Option<u16>,
    ) -> Record {
        Record {
            ts: now_rfc3339(),
            event,
            request_id,
            session: None,
            client,
            method,
            host,
            port,
            url: None,
            url_truncated: false,
            reason: None,
            rule: None,
            policy_level: None,
            shared_hosting: false,
            resolved_ip: None,
            bytes_up: None,
            bytes_down: None,
            dlp: None,
            cause: None,
            intercepted: false,
            via: Via::Proxy,
            approval_id: None,
            decision: None,
            trace: None,
        }
    }
}

/// Now, as RFC 3339 UTC with milliseconds: `2026-11-29T10:01:02.345Z`.
pub(crate) fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// `t` as RFC 3339 UTC with milliseconds (times before 1970 are written as 1970, times
/// past the year 9999 as its last millisecond).
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let t = i128::try_from(since.as_nanos())
        .ok()
        .and_then(|nanos| OffsetDateTime::from_unix_timestamp_nanos(nanos).ok())
        .unwrap_or(PrimitiveDateTime::MAX.assume_utc());
    // Fixed widths, always three fraction digits: time's own RFC 3339 formatting drops
    // trailing zeros, and the record's `ts` has one width.
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// Keeps at most [`MAX_QUERY_BYTES`] of the query string, cut on a character boundary,
/// and strips any userinfo (`user:pass@`) from the authority. Returns the URL and whether
/// the query was cut.
pub(crate) fn clip_url(url: &str) -> (String, bool) {
    let url = strip_userinfo(url);
    let Some(q) = url.find('?') else {
        return (url, false);
    };
    let query = &url[q + 1..];
    if query.len() <= MAX_QUERY_BYTES {
        return (url, false);
    }
    let mut cut = MAX_QUERY_BYTES;
    while !query.is_char_boundary(cut) {
        cut -= 1;
    }
    (url[..q + 1 + cut].to_string(), true)
}

/// `scheme://user:pass@host/...` -> `scheme://host/...`; anything else unchanged.
fn strip_userinfo(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}{}", &url[..start], &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// A request's id: 32 hex digits when shown, a random per-process prefix (or, should the
/// system's random source fail, the start time and process id) and a process-wide
/// counter, so ids are unique within a process and across restarts.
///
/// Kept as the number and written out only where it is shown (a record, an answer, a log
/// line): an allowed request that writes no record never formats or allocates one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestId {
    /// Two words, not a `u128`: its 16-byte alignment padded every struct carrying it.
    prefix: u64,
    n: u64,
}

impl RequestId {
    pub(crate) fn new() -> RequestId {
        static PREFIX: OnceLock<u64> = OnceLock::new();
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        // One random draw per process, not per request: a request id must be unique, not
        // secret, and a getrandom call on every request showed in the load profile.
        let prefix = *PREFIX.get_or_init(|| {
            let mut bytes = [0u8; 8];
            if getrandom::fill(&mut bytes).is_err() {
                let nanos = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos() as u64;
                bytes = (nanos ^ u64::from(std::process::id()).rotate_left(32)).to_be_bytes();
            }
            u64::from_be_bytes(bytes)
        });
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        RequestId { prefix, n }
    }

    /// The 32 hex digits: the prefix's 16, then the counter's.
    fn digits(self) -> [u8; 32] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = [0u8; 32];
        let (high, low) = text.split_at_mut(16);
        for (half, word) in [(high, self.prefix), (low, self.n)] {
            for (i, digit) in half.iter_mut().enumerate() {
                *digit = HEX[((word >> (4 * (15 - i))) & 0xf) as usize];
            }
        }
        text
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let digits = self.digits();
        f.write_str(std::str::from_utf8(&digits).expect("hex digits are ASCII"))
    }
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl Serialize for RequestId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let digits = self.digits();
        s.serialize_str(std::str::from_utf8(&digits).expect("hex digits are ASCII"))
    }
}

/// A new request id, as text (for what is shown at once: a reload, an approval).
pub(crate) fn new_request_id() -> String {
    RequestId::new().to_string()
}

#[cfg(test)]
mod tests;
