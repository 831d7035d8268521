//! An audit line as an OpenTelemetry LogRecord, and a judged request's record as its
//! span (docs/reference/opentelemetry.md, "Logs" and "Traces").

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, SeverityNumber};
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, status::StatusCode, Span, Status};

use crate::audit::{Record, Via, Written};

/// A source of span and trace ids: a splitmix64 sequence seeded once from the system's
/// random source. Ids must be unique, not secret.
pub(super) struct Ids(u64);

impl Ids {
    pub(super) fn new() -> Ids {
        let mut seed = [0u8; 8];
        if getrandom::fill(&mut seed).is_err() {
            seed = unix_nanos(SystemTime::now()).to_le_bytes();
        }
        Ids(u64::from_le_bytes(seed))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A non-zero 8-byte span id.
    pub(super) fn span_id(&mut self) -> [u8; 8] {
        loop {
            let id = self.next();
            if id != 0 {
                return id.to_be_bytes();
            }
        }
    }

    /// A 16-byte trace id (never all zeros: its second half is a span id).
    fn trace_id(&mut self) -> [u8; 16] {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.next().to_be_bytes());
        id[8..].copy_from_slice(&self.span_id());
        id
    }
}

pub(super) fn unix_nanos(t: SystemTime) -> u64 {
    let nanos = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    u64::try_from(nanos).unwrap_or(u64::MAX)
}

/// The record's `ts` (RFC 3339) in nanoseconds since 1970.
fn ts_nanos(ts: &str) -> Option<u64> {
    let t = time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).ok()?;
    u64::try_from(t.unix_timestamp_nanos()).ok()
}

fn string(key: &str, value: impl Into<String>) -> KeyValue {
    attr(key, Value::StringValue(value.into()))
}

fn attr(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// The attributes of a record: OpenTelemetry's semantic-convention names where one
/// exists, `egress.*` for the rest.
pub(super) fn attributes(rec: &Record) -> Vec<KeyValue> {
    let mut out = Vec::with_capacity(16);
    out.push(string("server.address", &rec.host));
    if let Some(port) = rec.port {
        out.push(attr("server.port", Value::IntValue(i64::from(port))));
    }
    match rec.client.parse::<SocketAddr>() {
        Ok(client) => {
            out.push(string("client.address", client.ip().to_string()));
            out.push(attr(
                "client.port",
                Value::IntValue(i64::from(client.port())),
            ));
        }
        Err(_) => out.push(string("client.address", &rec.client)),
    }
    if !rec.method.is_empty() && rec.via != Via::Dns {
        out.push(string("http.request.method", &rec.method));
    }
    if let Some(url) = &rec.url {
        out.push(string("url.full", url));
    }
    let protocol = match rec.via {
        Via::Dns => "dns",
        Via::Socks5 => "socks",
        Via::Proxy | Via::Transparent => "http",
    };
    out.push(string("network.protocol.name", protocol));
    out.push(string("egress.event", rec.event));
    if let Some(reason) = rec.reason {
        out.push(string("egress.reason", reason));
    }
    if let Some(rule) = &rec.rule {
        out.push(string("egress.rule", rule));
    }
    if let Some(level) = rec.policy_level {
        out.push(string("egress.policy_level", level));
    }
    if let Some(session) = &rec.session {
        out.push(string("egress.session", session));
    }
    let via = match rec.via {
        Via::Proxy => "proxy",
        Via::Transparent => "transparent",
        Via::Dns => "dns",
        Via::Socks5 => "socks5",
    };
    out.push(string("egress.via", via));
    out.push(string("egress.request_id", &rec.request_id));
    out.push(attr(
        "egress.shared_hosting",
        Value::BoolValue(rec.shared_hosting),
    ));
    if let Some(ip) = &rec.resolved_ip {
        out.push(string("egress.resolved_ip", ip));
    }
    for (key, bytes) in [
        ("egress.bytes_up", rec.bytes_up),
        ("egress.bytes_down", rec.bytes_down),
    ] {
        if let Some(n) = bytes {
            out.push(attr(
                key,
                Value::IntValue(i64::try_from(n).unwrap_or(i64::MAX)),
            ));
        }
    }
    out
}

/// The events a span is made for: a judged request, tunnel or DNS query, once. A DNS
/// query that report mode answers, or that carries a secret only reported, has no
/// `egress.allowed` record (a request's or tunnel's has, and that is its span): its
/// `egress.would_deny` or `egress.flagged` record is.
fn spanned(rec: &Record) -> bool {
    match rec.event {
        "egress.denied" | "egress.allowed" => true,
        "egress.would_deny" | "egress.flagged" => rec.via == Via::Dns,
        _ => false,
    }
}

/// The LogRecord of one written line (none for a record the log does not hold), and
/// the span of its record when it has one (the log then names the span, so a backend
/// links the two).
pub(super) fn convert(
    written: Written,
    ids: &mut Ids,
    now: u64,
) -> (Option<LogRecord>, Option<Span>) {
    let Written { record, line } = written;
    let body = line.map(|line| AnyValue {
        value: Some(Value::StringValue(
            String::from_utf8_lossy(&line).into_owned(),
        )),
    });
    let unwritten = body.is_none();
    let mut log = LogRecord {
        observed_time_unix_nano: now,
        body,
        ..Default::default()
    };
    let Some(rec) = record else {
        // An `audit.checkpoint`: its line is what it says.
        log.time_unix_nano = now;
        log.severity_number = SeverityNumber::Info as i32;
        log.severity_text = "INFO".into();
        log.attributes = vec![string("egress.event", "audit.checkpoint")];
        return (Some(log).filter(|_| !unwritten), None);
    };
    let warn = matches!(rec.event, "egress.denied" | "egress.flagged");
    let (number, text) = match warn {
        true => (SeverityNumber::Warn, "WARN"),
        false => (SeverityNumber::Info, "INFO"),
    };
    log.time_unix_nano = ts_nanos(&rec.ts).unwrap_or(now);
    log.severity_number = number as i32;
    log.severity_text = text.into();
    log.attributes = attributes(&rec);
    if !spanned(&rec) {
        return (Some(log).filter(|_| !unwritten), None);
    }
    let span = span(&rec, log.attributes.clone(), log.time_unix_nano, ids);
    log.trace_id = span.trace_id.clone();
    log.span_id = span.span_id.clone();
    (Some(log).filter(|_| !unwritten), Some(span))
}

/// The span of a judged request: kind SERVER, `egress METHOD`, from its start (when it
/// was traced) to its record, under the client's `traceparent`.
fn span(rec: &Record, attributes: Vec<KeyValue>, end: u64, ids: &mut Ids) -> Span {
    let start = rec.trace.map_or(end, |t| unix_nanos(t.start).min(end));
    let parent = rec.trace.and_then(|t| t.parent);
    let (trace_id, parent_span_id, flags) = match parent {
        Some(p) => (p.trace_id, p.span_id.to_vec(), u32::from(p.flags)),
        None => (ids.trace_id(), Vec::new(), 0),
    };
    let name = match rec.method.as_str() {
        "" => "egress".to_string(),
        method => format!("egress {method}"),
    };
    let status = match rec.event {
        "egress.denied" => Status {
            code: StatusCode::Error as i32,
            message: rec.reason.unwrap_or_default().to_string(),
        },
        _ => Status::default(),
    };
    Span {
        trace_id: trace_id.to_vec(),
        span_id: ids.span_id().to_vec(),
        parent_span_id,
        flags,
        name,
        kind: SpanKind::Server as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        attributes,
        status: Some(status),
        ..Default::default()
    }
}
