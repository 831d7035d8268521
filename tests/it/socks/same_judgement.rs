//! The rest of the judgement a SOCKS5 `CONNECT` shares with the explicit proxy's: report
//! mode, the upload budget, the tunnel limits, and an IPv6 destination that
//! `allowed_cidrs` opens.

use std::net::{Ipv6Addr, SocketAddr};

use super::{assert_socks_record, Setup, Socks, To};
use crate::support::origin::Origin;
use crate::support::proxy::AUDIT_TIMEOUT;
use crate::support::IO_TIMEOUT;

#[tokio::test]
async fn report_mode_lets_a_denied_name_through_with_its_would_deny_record() {
    let s = Setup::start_with(|org| org.mode("report"), &[]).await;
    let (code, socks) = Socks::connect(s.socks, &To::name("evil.test"), s.origin.port()).await;
    assert_eq!(code, 0x00, "report mode relaxes allowlist decisions");
    let response = socks.http_get("evil.test").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let record = s
        .proxy
        .wait_audit(|r| r["event"] == "egress.would_deny", AUDIT_TIMEOUT)
        .await;
    assert_socks_record(&record, "egress.would_deny", Some("not_in_org_allowlist"));
    assert_eq!(record["host"], "evil.test");
}

#[tokio::test]
async fn the_upload_budget_cuts_a_socks5_tunnel_after_the_bytes_that_fit() {
    let policy = serde_json::json!({"type": "allowlist", "allowed_domains": ["allowed.test"],
                                    "max_upload_bytes": 16})
    .to_string();
    let s = Setup::start_policy(|org| org, &policy, &[]).await;
    let (code, mut socks) =
        Socks::connect(s.socks, &To::name("allowed.test"), s.origin.port()).await;
    assert_eq!(code, 0x00, "the handshake is not upload");
    socks
        .send(b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
        .await;
    assert!(socks.closed_within(IO_TIMEOUT).await);
    let record = s
        .proxy
        .wait_audit(|r| r["event"] == "egress.denied", AUDIT_TIMEOUT)
        .await;
    assert_socks_record(&record, "egress.denied", Some("upload_budget_exceeded"));
    assert_eq!(record["bytes_up"], 16, "{record}");
    assert_eq!(
        s.origin.hits(),
        0,
        "the request never reached the origin whole"
    );
}

#[tokio::test]
async fn tunnels_per_client_count_socks5_tunnels_too() {
    let s = Setup::start(&["--max-tunnels-per-client", "1"]).await;
    let port = s.origin.port();
    let (code, _open) = Socks::connect(s.socks, &To::name("allowed.test"), port).await;
    assert_eq!(code, 0x00);
    let (code, mut second) = Socks::connect(s.socks, &To::name("allowed.test"), port).await;
    assert_eq!(code, 0x02, "over the limit: refused");
    assert!(second.closed_within(IO_TIMEOUT).await);
    let record = s
        .proxy
        .wait_audit(|r| r["event"] == "egress.denied", AUDIT_TIMEOUT)
        .await;
    assert_socks_record(&record, "egress.denied", Some("limit_exceeded"));
}

#[tokio::test]
async fn an_ipv6_address_that_allowed_cidrs_opens_is_reached() {
    let at: SocketAddr = (Ipv6Addr::LOCALHOST, 0).into();
    let Ok(origin6) = Origin::start_at("origin6", at).await else {
        eprintln!("skipped: no IPv6 loopback here");
        return;
    };
    let policy = serde_json::json!({"type": "allowlist", "allowed_domains": ["allowed.test"],
                                    "allowed_cidrs": ["::1/128"]})
    .to_string();
    let port = origin6.port();
    let s = Setup::start_policy(|org| org.cidr("::1/128").ports(&[port]), &policy, &[]).await;
    let (code, socks) = Socks::connect(s.socks, &To::V6(Ipv6Addr::LOCALHOST), port).await;
    assert_eq!(code, 0x00);
    let response = socks.http_get("[::1]").await;
    assert!(response.contains("origin6"), "{response}");
    let record = s.proxy.allowed_record().await;
    assert_socks_record(&record, "egress.allowed", None);
    assert_eq!(record["host"], "::1");
    assert!(s.dns.queried_names().is_empty());
}
