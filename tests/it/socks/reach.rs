//! What a SOCKS5 `CONNECT` reaches: a name judged as `CONNECT NAME:PORT`, IPv4 and IPv6
//! addresses as IP destinations, the tunnel's bytes, `[tunnels]` on its first bytes,
//! and the records, compared with the explicit proxy's for the same destination.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde_json::Value;

use super::{assert_socks_record, Setup, Socks, To};
use crate::support::client::Conn;
use crate::support::proxy::Proxy;

/// The refusal the explicit proxy gives `CONNECT authority`, and its record.
async fn connect_record(proxy: &Proxy, authority: &str, host: &str) -> Value {
    let mut conn = Conn::open(proxy.addr).await;
    let req = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    conn.send(req.as_bytes()).await;
    let resp = conn.read_connect_response().await;
    assert_eq!(resp.status, 403, "{resp:?}");
    proxy
        .wait_audit(
            |r| r["via"] == "proxy" && r["host"] == host,
            crate::support::proxy::AUDIT_TIMEOUT,
        )
        .await
}

/// The fields that say why: the same through either door.
fn why(record: &Value) -> [Value; 5] {
    ["reason", "rule", "policy_level", "host", "port"].map(|k| record[k].clone())
}

#[tokio::test]
async fn a_name_is_judged_as_connect_then_relayed_with_its_allowed_record() {
    let s = Setup::start(&[]).await;
    let (code, socks) = Socks::connect(s.socks, &To::name("allowed.test"), s.origin.port()).await;
    assert_eq!(code, 0x00);
    let response = socks.http_get("allowed.test").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("origin"), "{response}");
    assert_eq!(s.origin.hits(), 1);
    let record = s.proxy.allowed_record().await;
    assert_socks_record(&record, "egress.allowed", None);
    assert_eq!(record["method"], "CONNECT");
    assert_eq!(record["host"], "allowed.test");
    assert_eq!(record["port"], s.origin.port());
    assert_eq!(record["resolved_ip"], "127.0.0.1");
    assert!(record["bytes_up"].as_u64().unwrap() > 0, "{record}");
    assert!(record["bytes_down"].as_u64().unwrap() > 0, "{record}");
    assert!(
        s.dns.queries_for("allowed.test") > 0,
        "an allowed name is looked up"
    );
}

#[tokio::test]
async fn the_success_reply_carries_the_bound_address() {
    let s = Setup::start(&[]).await;
    let mut socks = Socks::open(s.socks).await;
    assert_eq!(socks.greet(&[0]).await, 0);
    let (code, bound) = socks
        .request(super::CONNECT, &To::name("allowed.test"), s.origin.port())
        .await;
    assert_eq!(code, 0);
    assert_eq!(bound.ip(), Ipv4Addr::LOCALHOST);
    assert_ne!(bound.port(), 0);
}

#[tokio::test]
async fn an_ipv4_address_is_an_ip_destination() {
    let policy = serde_json::json!({"type": "allowlist", "allowed_domains": ["allowed.test"],
                                    "allowed_cidrs": ["127.0.0.0/8"]})
    .to_string();
    let s = Setup::start_policy(|org| org, &policy, &[]).await;
    let (code, socks) =
        Socks::connect(s.socks, &To::V4(Ipv4Addr::LOCALHOST), s.origin.port()).await;
    assert_eq!(code, 0x00);
    let response = socks.http_get("127.0.0.1").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let record = s.proxy.allowed_record().await;
    assert_socks_record(&record, "egress.allowed", None);
    assert_eq!(record["host"], "127.0.0.1");
    assert!(
        s.dns.queried_names().is_empty(),
        "{:?}",
        s.dns.queried_names()
    );
}

#[tokio::test]
async fn denied_addresses_of_each_type_get_0x02_and_the_records_connect_would_get() {
    let s = Setup::start(&[]).await;
    let port = s.origin.port();
    let cases = [
        (
            To::V4(Ipv4Addr::LOCALHOST),
            "127.0.0.1",
            format!("127.0.0.1:{port}"),
        ),
        (To::V6(Ipv6Addr::LOCALHOST), "::1", format!("[::1]:{port}")),
        (
            To::name("evil.test"),
            "evil.test",
            format!("evil.test:{port}"),
        ),
    ];
    for (to, host, authority) in cases {
        let (code, mut socks) = Socks::connect(s.socks, &to, port).await;
        assert_eq!(code, 0x02, "{to:?}");
        assert!(socks.closed_within(crate::support::IO_TIMEOUT).await);
        let socks_record = s
            .proxy
            .wait_audit(
                |r| r["via"] == "socks5" && r["host"] == host,
                crate::support::proxy::AUDIT_TIMEOUT,
            )
            .await;
        let reason = socks_record["reason"].as_str();
        assert_socks_record(&socks_record, "egress.denied", reason);
        assert_eq!(socks_record["method"], "CONNECT");
        let connect = connect_record(&s.proxy, &authority, host).await;
        assert_eq!(why(&socks_record), why(&connect), "{to:?}");
    }
    assert_eq!(s.origin.connections(), 0);
    assert_eq!(
        s.dns.queries_for("evil.test"),
        0,
        "no lookup for a denied name"
    );
}

#[tokio::test]
async fn tunnels_first_bytes_are_judged_before_any_reaches_upstream() {
    let s = Setup::start_with(|org| org.tunnels(Some(true), None), &[]).await;
    let (code, mut socks) =
        Socks::connect(s.socks, &To::name("allowed.test"), s.origin.port()).await;
    assert_eq!(
        code, 0x00,
        "the destination is allowed; its bytes are judged next"
    );
    socks
        .send(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        .await;
    assert!(socks.closed_within(crate::support::IO_TIMEOUT).await);
    let record = s
        .proxy
        .wait_audit(
            |r| r["event"] == "egress.denied",
            crate::support::proxy::AUDIT_TIMEOUT,
        )
        .await;
    assert_socks_record(&record, "egress.denied", Some("sni_mismatch"));
    assert_eq!(record["host"], "allowed.test");
    assert_eq!(s.origin.hits(), 0, "no byte reached the origin");
}

#[tokio::test]
async fn bytes_sent_with_the_request_in_one_write_are_the_tunnels_first_bytes() {
    let s = Setup::start(&[]).await;
    let mut socks = Socks::open(s.socks).await;
    let name = b"allowed.test";
    let port = s.origin.port().to_be_bytes();
    let get = b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n";
    let all = [
        &[5u8, 1, 0][..],
        &[5, super::CONNECT, 0, 3, name.len() as u8],
        name,
        &port,
        get,
    ]
    .concat();
    socks.send(&all).await;
    assert_eq!(socks.read(2).await, [5, 0]);
    let (code, _) = socks.reply().await;
    assert_eq!(code, 0x00);
    let mut out = Vec::new();
    tokio::time::timeout(
        crate::support::IO_TIMEOUT,
        tokio::io::AsyncReadExt::read_to_end(&mut socks.stream, &mut out),
    )
    .await
    .expect("response in time")
    .expect("read response");
    let response = String::from_utf8_lossy(&out);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert_eq!(s.origin.hits(), 1);
}
