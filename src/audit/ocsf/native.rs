//! An OCSF line read back as the record's own JSON line (docs/reference/audit-log.md,
//! "OCSF"), so the `audit` commands read both formats with one parser: every field
//! comes back from the place [`super::event`] put it, in the record's own order.

use serde_json::{Map, Value};

use super::{ts_of, Class};

/// Whether `line` is an OCSF event as the proxy writes it: it begins with
/// `category_uid`, a key the record's own JSON never has.
pub(crate) fn is_ocsf(line: &[u8]) -> bool {
    let start = line.iter().position(|b| !b.is_ascii_whitespace());
    start.is_some_and(|i| line[i..].starts_with(b"{\"category_uid\":"))
}

/// The record's own JSON line for an OCSF `line` the proxy wrote (with `seq`, `prev`
/// and a checkpoint's `signature`); `None` when it is not one.
pub(crate) fn to_native(line: &[u8]) -> Option<Vec<u8>> {
    let event: Value = serde_json::from_slice(line).ok()?;
    let class = Class::from_uid(event.get("class_uid")?.as_u64()?)?;
    let unmapped = event.get("unmapped")?.as_object()?;
    let at = |pointer: &str| event.pointer(pointer).filter(|v| !v.is_null()).cloned();
    let from_unmapped = |key: &str| unmapped.get(key).cloned();
    let ts = from_unmapped("ts").or_else(|| {
        let ms = event.get("time")?.as_u64()?;
        Some(Value::String(ts_of(ms)))
    })?;
    let mut out = Map::new();
    out.insert("ts".into(), ts);
    out.insert("event".into(), from_unmapped("event")?);
    if class == Class::EventLog {
        out.insert("key".into(), from_unmapped("key").unwrap_or(Value::Null));
    } else {
        record_fields(&mut out, &event, class, unmapped, &at);
    }
    out.insert(
        "seq".into(),
        at("/metadata/sequence").unwrap_or(Value::Null),
    );
    out.insert("prev".into(), from_unmapped("prev").unwrap_or(Value::Null));
    if let Some(signature) = from_unmapped("signature") {
        out.insert("signature".into(), signature);
    }
    serde_json::to_vec(&out).ok()
}

/// The fields of a request's, tunnel's or query's record, after `ts` and `event`.
fn record_fields(
    out: &mut Map<String, Value>,
    event: &Value,
    class: Class,
    unmapped: &Map<String, Value>,
    at: &dyn Fn(&str) -> Option<Value>,
) {
    let text = |v: Option<Value>| v.unwrap_or_else(|| Value::String(String::new()));
    let or_null = |v: Option<Value>| v.unwrap_or(Value::Null);
    let from_unmapped = |key: &str| unmapped.get(key).cloned();
    out.insert("request_id".into(), text(from_unmapped("request_id")));
    out.insert("session".into(), or_null(at("/actor/session/uid")));
    let client = from_unmapped("client").or_else(|| {
        let ip: std::net::IpAddr = event.pointer("/src_endpoint/ip")?.as_str()?.parse().ok()?;
        let port = u16::try_from(event.pointer("/src_endpoint/port")?.as_u64()?).ok()?;
        Some(Value::String(
            std::net::SocketAddr::new(ip, port).to_string(),
        ))
    });
    out.insert("client".into(), text(client));
    let method = match class {
        Class::Http => at("/http_request/http_method"),
        Class::Dns => Some(Value::String("DNS".into())),
        _ => from_unmapped("method"),
    };
    out.insert("method".into(), text(method));
    out.insert("host".into(), text(at("/dst_endpoint/hostname")));
    out.insert("port".into(), or_null(at("/dst_endpoint/port")));
    let url = at("/http_request/url/url_string").or_else(|| at("/url/url_string"));
    if let Some(url) = url {
        out.insert("url".into(), url);
    }
    if let Some(cut) = from_unmapped("url_truncated") {
        out.insert("url_truncated".into(), cut);
    }
    out.insert("reason".into(), or_null(at("/status_detail")));
    out.insert("rule".into(), or_null(at("/firewall_rule/name")));
    out.insert(
        "policy_level".into(),
        or_null(from_unmapped("policy_level")),
    );
    out.insert(
        "shared_hosting".into(),
        from_unmapped("shared_hosting").unwrap_or(Value::Bool(false)),
    );
    out.insert("resolved_ip".into(), or_null(at("/dst_endpoint/ip")));
    for (ocsf, native) in [
        ("/traffic/bytes_out", "bytes_up"),
        ("/traffic/bytes_in", "bytes_down"),
    ] {
        if let Some(bytes) = at(ocsf) {
            out.insert(native.into(), bytes);
        }
    }
    for key in [
        "dlp",
        "cause",
        "intercepted",
        "via",
        "approval_id",
        "decision",
    ] {
        if let Some(value) = from_unmapped(key) {
            out.insert(key.into(), value);
        }
    }
}
