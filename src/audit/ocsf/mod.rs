//! Audit records as OCSF 1.5 events (`--audit-format ocsf`, docs/reference/audit-log.md,
//! "OCSF"): HTTP Activity (4002) for a request, Network Activity (4001) for a tunnel, a
//! SOCKS5 connection or a connection refused before its request, DNS Activity (4003) for
//! a query to the DNS listener, and Event Log Activity (1008) for a checkpoint.
//!
//! The mapping lives here both ways: [`write_body`] writes a record's event (the chain,
//! `super::chain`, closes it with `unmapped.prev` and `metadata.sequence`), and
//! [`to_native`] reads such a line back into the record's own JSON line, so every
//! `audit` command reads both formats through one parser. A field of the record is put
//! in an OCSF place only where it comes back out of it unchanged; every other one is
//! kept in `unmapped`.

use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use super::Record;

mod event;
mod native;
pub(crate) use native::{is_ocsf, to_native};

/// The event's `metadata` object, left open for the chain's `sequence`
/// ([`super::chain`]).
pub(super) const METADATA_OPEN: &str = concat!(
    "{\"product\":{\"name\":\"egress-proxy\",\"vendor_name\":\"egress-proxy\",\"version\":\"",
    env!("CARGO_PKG_VERSION"),
    "\"},\"profiles\":[\"security_control\"],\"version\":\"1.5.0\""
);

/// The OCSF classes a record becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// 1008, a checkpoint.
    EventLog,
    /// 4001: a tunnel, a SOCKS5 connection, a connection refused before its request.
    Network,
    /// 4002: an HTTP request (plain, inspected inside a tunnel, or a WebSocket's).
    Http,
    /// 4003: a query to the DNS listener.
    Dns,
}

impl Class {
    /// The class a record with this `method` becomes.
    pub(crate) fn of(method: &str) -> Class {
        match method {
            "DNS" => Class::Dns,
            "" | "CONNECT" => Class::Network,
            _ => Class::Http,
        }
    }

    pub(crate) fn uid(self) -> u16 {
        match self {
            Class::EventLog => 1008,
            Class::Network => 4001,
            Class::Http => 4002,
            Class::Dns => 4003,
        }
    }

    pub(crate) fn from_uid(uid: u64) -> Option<Class> {
        [Class::EventLog, Class::Network, Class::Http, Class::Dns]
            .into_iter()
            .find(|c| u64::from(c.uid()) == uid)
    }

    fn name(self) -> &'static str {
        match self {
            Class::EventLog => "Event Log Activity",
            Class::Network => "Network Activity",
            Class::Http => "HTTP Activity",
            Class::Dns => "DNS Activity",
        }
    }

    /// `category_uid` and `category_name`.
    fn category(self) -> (u8, &'static str) {
        match self {
            Class::EventLog => (1, "System Activity"),
            _ => (4, "Network Activity"),
        }
    }
}

/// What a record's `event` says of the attempt: (`action_id`, `action`,
/// `disposition_id`, `disposition`, `status_id`, `status`, `severity_id`, `severity`).
struct Outcome {
    action: (u8, &'static str),
    disposition: (u8, &'static str),
    status: (u8, &'static str),
    severity: (u8, &'static str),
}

const INFORMATIONAL: (u8, &str) = (1, "Informational");
const LOW: (u8, &str) = (2, "Low");
const MEDIUM: (u8, &str) = (3, "Medium");
const SUCCESS: (u8, &str) = (1, "Success");
const FAILURE: (u8, &str) = (2, "Failure");

fn outcome(event: &str) -> Outcome {
    let (action, disposition, status, severity) = match event {
        "egress.allowed" | "approval.allowed" | "websocket.opened" | "websocket.closed" => {
            ((1, "Allowed"), (1, "Allowed"), SUCCESS, INFORMATIONAL)
        }
        // Report mode lets it through: seen, not acted on.
        "egress.would_deny" => ((1, "Allowed"), (15, "Detected"), SUCCESS, LOW),
        "egress.flagged" => ((1, "Allowed"), (15, "Detected"), SUCCESS, MEDIUM),
        "egress.denied" | "approval.denied" | "approval.expired" => {
            ((2, "Denied"), (2, "Blocked"), FAILURE, MEDIUM)
        }
        "session.ended" | "session.revoked" => {
            ((2, "Denied"), (24, "Access Revoked"), SUCCESS, MEDIUM)
        }
        _ => (
            (0, "Unknown"),
            (0, "Unknown"),
            (0, "Unknown"),
            INFORMATIONAL,
        ),
    };
    Outcome {
        action,
        disposition,
        status,
        severity,
    }
}

/// `activity_id` and `activity_name` of a record of `class`.
fn activity(class: Class, event: &str, method: &str) -> (u8, &'static str) {
    match class {
        Class::EventLog => (99, "Other"),
        Class::Dns => (1, "Query"),
        Class::Http => match method {
            "CONNECT" => (1, "Connect"),
            "DELETE" => (2, "Delete"),
            "GET" => (3, "Get"),
            "HEAD" => (4, "Head"),
            "OPTIONS" => (5, "Options"),
            "POST" => (6, "Post"),
            "PUT" => (7, "Put"),
            "TRACE" => (8, "Trace"),
            _ => (99, "Other"),
        },
        Class::Network => match event {
            "egress.denied" | "approval.denied" | "approval.expired" => (5, "Refuse"),
            "websocket.closed" | "session.ended" | "session.revoked" => (2, "Close"),
            "egress.allowed" | "egress.would_deny" | "egress.flagged" | "approval.allowed" => {
                (1, "Open")
            }
            _ => (99, "Other"),
        },
    }
}

/// The record's `ts` as OCSF's `time` (ms since the epoch), when `ts` comes back out of
/// it unchanged (it always does for the writer's own times, [`super::rfc3339`]).
fn time_ms(ts: &str) -> Option<u64> {
    let t = time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).ok()?;
    let ms = u64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()?;
    (ts_of(ms) == ts).then_some(ms)
}

/// `time` back as the record's `ts`.
pub(crate) fn ts_of(ms: u64) -> String {
    super::rfc3339(UNIX_EPOCH + Duration::from_millis(ms))
}

/// Serialise `event` and leave its last object, `unmapped`, open: drop the two closing
/// braces (its own and the event's).
fn write_open<T: Serialize>(out: &mut Vec<u8>, event: &T) -> std::io::Result<()> {
    let start = out.len();
    serde_json::to_writer(&mut *out, event).map_err(std::io::Error::other)?;
    if !out[start..].ends_with(b"}}") {
        out.truncate(start);
        return Err(std::io::Error::other("an OCSF event ends with `unmapped`"));
    }
    out.truncate(out.len() - 2);
    Ok(())
}

/// Writes `rec`'s OCSF event, left open inside `unmapped` for the chain's fields.
pub(super) fn write_body(out: &mut Vec<u8>, rec: &Record) -> std::io::Result<()> {
    write_open(out, &event::Event::of(rec))
}

/// Writes a checkpoint's OCSF event, left open inside `unmapped`.
pub(super) fn write_checkpoint_body(out: &mut Vec<u8>, ts: &str, key: &str) {
    write_open(out, &event::Checkpoint::of(ts, key))
        .expect("a checkpoint's event serialises and ends with `unmapped`");
}

#[cfg(test)]
mod tests;
