//! Each record kind as its OCSF class, and back: the event's class, activity, outcome
//! and places (docs/reference/audit-log.md, "OCSF"), and the line read back is the
//! record's own JSON line, byte for byte.

use proptest::prelude::Strategy;
use serde_json::Value;

use super::super::batch::Batch;
use super::super::chain::{Chain, Format};
use super::super::{Record, Via};
use super::*;

fn record(event: &'static str, method: &str, host: &str, port: Option<u16>) -> Record {
    let mut rec = Record::new(
        event,
        "0123456789abcdef0123456789abcdef".into(),
        "127.0.0.1:40000".into(),
        method.into(),
        host.into(),
        port,
    );
    rec.ts = "2026-11-29T10:01:02.345Z".into();
    rec
}

/// The first line of a new log holding `rec`, in `format`.
fn line(rec: &Record, format: Format) -> String {
    let mut chain = Chain::new(format, None);
    let mut batch = Batch::default();
    batch.push(rec, &mut chain).expect("written");
    let text = String::from_utf8(batch.bytes).unwrap();
    text.strip_suffix('\n').expect("a whole line").to_string()
}

/// `rec`'s OCSF event, after checking that it reads back as its JSON line.
fn event(rec: &Record) -> Value {
    let ocsf = line(rec, Format::Ocsf);
    assert!(is_ocsf(ocsf.as_bytes()), "{ocsf}");
    let json = line(rec, Format::Json);
    assert!(!is_ocsf(json.as_bytes()));
    let native = to_native(ocsf.as_bytes()).expect("an OCSF line reads back");
    assert_eq!(String::from_utf8(native).unwrap(), json, "from {ocsf}");
    serde_json::from_str(&ocsf).unwrap()
}

fn common(e: &Value, class: u64, activity: u64) {
    assert_eq!(e["class_uid"], class);
    assert_eq!(e["activity_id"], activity);
    assert_eq!(e["type_uid"], class * 100 + activity);
    assert_eq!(e["time"], 1_795_946_462_345u64);
    assert_eq!(e["metadata"]["version"], "1.5.0");
    assert_eq!(e["metadata"]["product"]["name"], "egress-proxy");
    assert_eq!(e["metadata"]["sequence"], 1);
    assert_eq!(e["unmapped"]["prev"], "0".repeat(64));
    assert_eq!(
        e["unmapped"]["request_id"],
        "0123456789abcdef0123456789abcdef"
    );
    assert_eq!(e["src_endpoint"]["ip"], "127.0.0.1");
    assert_eq!(e["src_endpoint"]["port"], 40000);
}

#[test]
fn a_denied_request_is_http_activity_blocked() {
    let mut rec = record("egress.denied", "POST", "evil.test", Some(80));
    rec.url = Some("http://evil.test/upload?x=1".into());
    rec.reason = Some("not_in_org_allowlist");
    rec.policy_level = Some("org");
    rec.session = Some("s-1".into());
    let e = event(&rec);
    common(&e, 4002, 6);
    assert_eq!(e["category_uid"], 4);
    assert_eq!(e["class_name"], "HTTP Activity");
    assert_eq!(e["disposition_id"], 2);
    assert_eq!(e["action_id"], 2);
    assert_eq!(e["status_id"], 2);
    assert_eq!(e["severity_id"], 3);
    assert_eq!(e["status_detail"], "not_in_org_allowlist");
    assert_eq!(e["http_request"]["http_method"], "POST");
    assert_eq!(
        e["http_request"]["url"]["url_string"],
        "http://evil.test/upload?x=1"
    );
    assert_eq!(e["dst_endpoint"]["hostname"], "evil.test");
    assert_eq!(e["dst_endpoint"]["port"], 80);
    assert_eq!(e["actor"]["session"]["uid"], "s-1");
    assert_eq!(e["unmapped"]["policy_level"], "org");
    assert_eq!(e["unmapped"]["via"], "proxy");
}

#[test]
fn an_allowed_tunnel_is_network_activity_with_its_bytes() {
    let mut rec = record("egress.allowed", "CONNECT", "allowed.test", Some(443));
    rec.rule = Some("allowed.test".into());
    rec.policy_level = Some("request");
    rec.resolved_ip = Some("127.0.0.1".into());
    rec.bytes_up = Some(10);
    rec.bytes_down = Some(2000);
    rec.shared_hosting = true;
    let e = event(&rec);
    common(&e, 4001, 1);
    assert_eq!(e["disposition_id"], 1);
    assert_eq!(e["action_id"], 1);
    assert_eq!(e["status_id"], 1);
    assert_eq!(e["severity_id"], 1);
    assert_eq!(e["firewall_rule"]["name"], "allowed.test");
    assert_eq!(e["dst_endpoint"]["ip"], "127.0.0.1");
    assert_eq!(e["traffic"]["bytes_out"], 10);
    assert_eq!(e["traffic"]["bytes_in"], 2000);
    assert_eq!(e["unmapped"]["method"], "CONNECT");
    assert_eq!(e["unmapped"]["shared_hosting"], true);
    assert!(e.get("http_request").is_none());
}

#[test]
fn socks5_and_transparent_connections_are_network_activity() {
    for (via, name) in [(Via::Socks5, "socks5"), (Via::Transparent, "transparent")] {
        let mut rec = record("egress.denied", "CONNECT", "10.0.0.1", Some(22));
        rec.via = via;
        rec.reason = Some("private_address");
        rec.policy_level = Some("address");
        let e = event(&rec);
        common(&e, 4001, 5);
        assert_eq!(e["activity_name"], "Refuse");
        assert_eq!(e["unmapped"]["via"], name);
    }
    // Refused before any request was read: no method.
    let mut rec = record("egress.denied", "", "", None);
    rec.reason = Some("malformed_request");
    let e = event(&rec);
    common(&e, 4001, 5);
    assert!(e.get("dst_endpoint").is_none(), "{e}");
}

#[test]
fn a_dns_query_is_dns_activity() {
    let mut rec = record("egress.denied", "DNS", "x.evil.test", None);
    rec.via = Via::Dns;
    rec.reason = Some("not_in_org_allowlist");
    let e = event(&rec);
    common(&e, 4003, 1);
    assert_eq!(e["query"]["hostname"], "x.evil.test");
    assert_eq!(e["disposition_id"], 2);
    assert!(e["dst_endpoint"].get("port").is_none());
}

#[test]
fn report_mode_and_sessions_keep_their_event() {
    let mut rec = record("egress.would_deny", "GET", "a.test", Some(80));
    rec.url = Some(format!("http://a.test/?{}", "q".repeat(256)));
    rec.url_truncated = true;
    let e = event(&rec);
    common(&e, 4002, 3);
    assert_eq!(e["disposition_id"], 15);
    assert_eq!(e["unmapped"]["url_truncated"], true);
    let mut rec = record("session.ended", "", "", None);
    rec.client = String::new();
    rec.session = Some("s-2".into());
    rec.cause = Some("canary");
    rec.dlp = Some(crate::dlp::Hit {
        id: "c1".into(),
        kind: "aws".into(),
        encoding: crate::dlp::Encoding::Base64,
        found_in: crate::dlp::FoundIn::Header,
        by: crate::dlp::By::Canary,
    });
    let e = event(&rec);
    assert_eq!(e["class_uid"], 4001);
    assert_eq!(e["disposition_id"], 24);
    assert_eq!(e["unmapped"]["event"], "session.ended");
    assert_eq!(e["unmapped"]["dlp"]["found_in"], "header");
    assert!(e.get("src_endpoint").is_none());
}

#[test]
fn a_client_or_time_without_an_ocsf_place_is_kept_in_unmapped() {
    let mut rec = record("egress.denied", "GET", "a.test", Some(80));
    rec.client = "not an address".into();
    rec.ts = "2026-11-29T10:01:02.3456Z".into();
    let ocsf = line(&rec, Format::Ocsf);
    let e: Value = serde_json::from_str(&ocsf).unwrap();
    assert_eq!(e["unmapped"]["client"], "not an address");
    assert_eq!(e["unmapped"]["ts"], "2026-11-29T10:01:02.3456Z");
    let native = to_native(ocsf.as_bytes()).unwrap();
    assert_eq!(String::from_utf8(native).unwrap(), line(&rec, Format::Json));
}

#[test]
fn a_checkpoint_is_event_log_activity() {
    let mut chain = Chain::new(Format::Ocsf, None);
    let mut batch = Batch::default();
    batch.push_checkpoint(&mut chain);
    let text = String::from_utf8(batch.bytes).unwrap();
    let e: Value = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(e["class_uid"], 1008);
    assert_eq!(e["category_uid"], 1);
    assert_eq!(e["type_uid"], 100_899);
    assert_eq!(e["unmapped"]["event"], "audit.checkpoint");
    assert_eq!(e["metadata"]["sequence"], 1);
    let native: Value =
        serde_json::from_slice(&to_native(text.trim_end().as_bytes()).unwrap()).unwrap();
    assert_eq!(native["event"], "audit.checkpoint");
    assert_eq!(native["seq"], 1);
    assert_eq!(native["ts"], e["time"].as_u64().map(ts_of).unwrap());
}

const EVENTS: [&str; 12] = [
    "egress.denied",
    "egress.allowed",
    "egress.would_deny",
    "egress.flagged",
    "session.revoked",
    "session.ended",
    "websocket.opened",
    "websocket.closed",
    "approval.allowed",
    "approval.denied",
    "approval.expired",
    "some.future_event",
];
const METHODS: [&str; 7] = ["", "CONNECT", "GET", "POST", "PATCH", "DNS", "BREW"];
const CLIENTS: [&str; 5] = [
    "127.0.0.1:1",
    "[::1]:65535",
    "",
    "nonsense",
    "[fe80::1%2]:9",
];
const VIAS: [Via; 4] = [Via::Proxy, Via::Transparent, Via::Dns, Via::Socks5];

fn pick<T: Copy + std::fmt::Debug>(list: &[T]) -> impl Strategy<Value = T> + '_ {
    (0..list.len()).prop_map(move |i| list[i])
}

proptest::proptest! {
    /// Whatever a record holds, its OCSF line reads back as its own JSON line.
    #[test]
    fn every_record_reads_back_from_its_ocsf_line(
        event in pick(&EVENTS),
        method in pick(&METHODS),
        client in pick(&CLIENTS),
        via in pick(&VIAS),
        host in ".{0,12}",
        port in proptest::option::of(proptest::num::u16::ANY),
        ms in proptest::option::of(0u64..253_402_300_799_999),
        texts in proptest::collection::vec(proptest::option::of(".{0,8}"), 5),
        flags in proptest::collection::vec(proptest::bool::ANY, 4),
        bytes in proptest::option::of((proptest::num::u64::ANY, proptest::num::u64::ANY)),
    ) {
        let mut rec = record(event, method, &host, port);
        rec.client = client.to_string();
        rec.via = via;
        rec.ts = ms.map_or_else(|| "yesterday".to_string(), ts_of);
        rec.url = texts[0].clone();
        rec.rule = texts[1].clone();
        rec.session = texts[2].clone();
        rec.resolved_ip = texts[3].clone();
        rec.approval_id = texts[4].clone();
        rec.reason = flags[0].then_some("not_in_org_allowlist");
        rec.policy_level = flags[1].then_some("org");
        rec.url_truncated = flags[2];
        rec.intercepted = flags[3];
        rec.shared_hosting = flags[0] ^ flags[3];
        (rec.bytes_up, rec.bytes_down) = (bytes.map(|b| b.0), bytes.map(|b| b.1));
        let ocsf = line(&rec, Format::Ocsf);
        proptest::prop_assert!(is_ocsf(ocsf.as_bytes()));
        let native = String::from_utf8(to_native(ocsf.as_bytes()).unwrap()).unwrap();
        proptest::prop_assert_eq!(native, line(&rec, Format::Json));
    }
}
