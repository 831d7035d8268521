//! The organization's canaries on the wire: the explicit proxy (URL, header, target
//! name), the DNS listener (a name carrying the value across labels), and a session
//! ended by its canary.

use std::time::Duration;

use base64::Engine;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use serde_json::Value;

use super::{shown, values_file, with_canaries, VALUE};
use crate::events::Events;
use crate::support::client::{connect_via_proxy, get_via_proxy};
use crate::support::dns::DnsServer;
use crate::support::dns_client::{dns_listener, UdpClient};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::sessions;

/// No record, answer, event, metric, console data or line of the proxy's log shows
/// the value, in any form.
async fn assert_never_shown(proxy: &Proxy, answers: &[String]) {
    shown::assert_never_shown(proxy, &[VALUE], answers).await;
}

/// A request's path, its extra header fields, and where and how the value is in it.
type Case<'a> = (String, Vec<(&'a str, String)>, &'a str, &'a str);

/// The `egress.denied` records of a canary, in order.
fn canary_records(proxy: &Proxy) -> Vec<Value> {
    proxy
        .audit_lines()
        .into_iter()
        .filter(|r| r["reason"] == "exfiltration_detected")
        .collect()
}

/// An origin for `allowed.test`, and a proxy allowing it with the canaries, `refuse`.
async fn origin_and_proxy(tag: &str) -> (Origin, Proxy) {
    let origin = Origin::start().await;
    let file = values_file(tag);
    let org = with_canaries(Org::standard(origin.port()), &file, "refuse");
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .pin("allowed.test")
        .admin("events-token")
        .start()
        .await;
    (origin, proxy)
}

#[tokio::test]
async fn a_canary_in_the_url_or_a_header_in_any_encoding_never_reaches_the_origin() {
    let (origin, proxy) = origin_and_proxy("http").await;
    // The console's stream of denials, read as the console reads it.
    let mut events = Events::open(&proxy, "?event=egress.denied").await;
    let base = format!("http://allowed.test:{}", origin.port());
    // The probe: the same requests without the value reach the origin.
    let clean = get_via_proxy(
        proxy.addr,
        &format!("{base}/upload?q=hello"),
        &[("x-note", "hi")],
    )
    .await;
    assert_eq!(clean.status, 200, "{}", proxy.diagnostics());
    assert_eq!(origin.hits(), 1);
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("key={VALUE}"));
    let url_b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("k:{VALUE}"));
    let hex = data_encoding::HEXUPPER.encode(VALUE.as_bytes());
    let percent: String = VALUE.bytes().map(|b| format!("%{b:02X}")).collect();
    let cases: Vec<Case> = vec![
        (format!("/upload?q={VALUE}"), vec![], "plain", "url"),
        (
            format!("/upload?d={}", b64.replace('=', "")),
            vec![],
            "base64",
            "url",
        ),
        (format!("/upload?d={url_b64}"), vec![], "base64url", "url"),
        (format!("/upload/{hex}"), vec![], "hex", "url"),
        (format!("/upload?q={percent}"), vec![], "percent", "url"),
        (
            "/upload".to_string(),
            vec![("x-token", VALUE.to_string())],
            "plain",
            "header",
        ),
        (
            "/upload".to_string(),
            vec![("authorization", format!("Basic {b64}"))],
            "base64",
            "header",
        ),
    ];
    let mut answers = Vec::new();
    for (path, headers, encoding, found_in) in &cases {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let answer = get_via_proxy(proxy.addr, &format!("{base}{path}"), &headers).await;
        assert_eq!(
            answer.status,
            403,
            "{encoding} in {found_in}: {}",
            answer.text()
        );
        assert_eq!(answer.json()["error"]["reason"], "exfiltration_detected");
        answers.push(answer.text());
    }
    assert_eq!(
        origin.hits(),
        1,
        "a request carrying the canary reached the origin"
    );
    // Records reach the file within a second of their decision.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while canary_records(&proxy).len() < cases.len() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let records = canary_records(&proxy);
    assert_eq!(records.len(), cases.len(), "{}", proxy.diagnostics());
    for (record, (_, _, encoding, found_in)) in records.iter().zip(&cases) {
        // A url-safe form that is also a standard one is called base64.
        let got = record["dlp"]["encoding"].as_str().unwrap();
        let same = got == *encoding || (*encoding == "base64url" && got == "base64");
        assert!(same, "{encoding}: {record}");
        assert_eq!(record["dlp"]["found_in"], *found_in, "{record}");
        assert_eq!(record["dlp"]["id"], "org:2", "{record}");
        assert_eq!(record["policy_level"], "dlp", "{record}");
        assert!(
            record.get("url").is_none(),
            "a URL that may hold the value: {record}"
        );
    }
    for _ in 0..cases.len() {
        answers.push(events.next().await.data.to_string());
    }
    assert_never_shown(&proxy, &answers).await;
}

#[tokio::test]
async fn a_canary_in_a_connect_name_is_the_reason_and_the_name_is_not_recorded() {
    let (origin, proxy) = origin_and_proxy("connect").await;
    let hex = data_encoding::HEXLOWER.encode(VALUE.as_bytes());
    let (a, b) = hex.split_at(20);
    let name = format!("{a}.{b}.allowed.test:{}", origin.port());
    let (answer, _) = connect_via_proxy(proxy.addr, &name, &[]).await;
    assert_eq!(answer.status, 403, "{}", answer.text());
    // Not in the allowlist either: the canary is the reason recorded.
    assert_eq!(answer.json()["error"]["reason"], "exfiltration_detected");
    assert_eq!(answer.json()["error"]["host"], "[redacted]");
    proxy
        .wait_audit(
            |r| r["reason"] == "exfiltration_detected",
            Duration::from_secs(5),
        )
        .await;
    let records = canary_records(&proxy);
    assert_eq!(records.len(), 1, "{}", proxy.diagnostics());
    assert_eq!(records[0]["host"], "[redacted]");
    assert_eq!(records[0]["dlp"]["found_in"], "target");
    assert_eq!(records[0]["dlp"]["encoding"], "hex");
    assert_eq!(origin.hits(), 0);
    assert_never_shown(&proxy, &[answer.text()]).await;
    // Nor the labels that carried it.
    let shown = format!("{}{}{}", proxy.audit_text(), proxy.stderr(), answer.text());
    assert!(!shown.contains(a) && !shown.contains(b), "{shown}");
}

#[tokio::test]
async fn a_dns_name_carrying_a_canary_across_labels_is_refused_and_never_asked_upstream() {
    let upstream = DnsServer::builder()
        .record("allowed.test", std::net::Ipv4Addr::LOCALHOST)
        .start()
        .await;
    let file = values_file("dns");
    let org = with_canaries(Org::new().allow("allowed.test"), &file, "refuse");
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .dns_server(upstream.addr())
        .arg("--dns-listen")
        .arg("127.0.0.1:0")
        .start()
        .await;
    let mut client = UdpClient::new(dns_listener(&proxy)).await;
    // The probe: an allowed name is answered.
    let ok = client.query("allowed.test.", RecordType::A).await;
    assert_eq!(ok.response_code(), ResponseCode::NoError);
    let b32 = data_encoding::BASE32_NOPAD.encode(VALUE.as_bytes());
    let (a, b) = b32.split_at(16);
    let carrying = format!("{a}.{b}.allowed.test.");
    let refused = client.query(&carrying, RecordType::A).await;
    assert_eq!(refused.response_code(), ResponseCode::Refused);
    proxy
        .wait_audit(
            |r| r["reason"] == "exfiltration_detected",
            Duration::from_secs(5),
        )
        .await;
    let records = canary_records(&proxy);
    assert_eq!(records.len(), 1, "{}", proxy.diagnostics());
    assert_eq!(records[0]["via"], "dns");
    assert_eq!(records[0]["host"], "[redacted]");
    assert_eq!(records[0]["dlp"]["found_in"], "dns");
    assert_eq!(records[0]["dlp"]["encoding"], "base32");
    let asked = upstream.queried_names();
    assert!(
        !asked
            .iter()
            .any(|n| n.to_lowercase().contains(&a.to_lowercase())),
        "asked upstream: {asked:?}"
    );
    assert!(!proxy.audit_text().contains(a));
}

#[tokio::test]
async fn a_tripped_canary_ends_its_session_and_says_so() {
    let origin = Origin::start().await;
    let file = values_file("session");
    let org = with_canaries(sessions::org(origin.port()), &file, "end-session");
    let proxy = sessions::proxy_with(&org, &[]).await;
    let admin = proxy.admin();
    let session = admin
        .create_session(&sessions::allowlist(&["allowed.test"]), None)
        .await;
    let auth = session.proxy_auth();
    let url = format!("http://allowed.test:{}/", origin.port());
    let before = get_via_proxy(proxy.addr, &url, &[("proxy-authorization", &auth)]).await;
    assert_eq!(before.status, 200, "the probe: the session works");
    let tripped = get_via_proxy(
        proxy.addr,
        &url,
        &[("proxy-authorization", &auth), ("x-api-key", VALUE)],
    )
    .await;
    assert_eq!(tripped.status, 403, "{}", tripped.text());
    let after = get_via_proxy(proxy.addr, &url, &[("proxy-authorization", &auth)]).await;
    assert_eq!(after.status, 407, "the session ended: {}", after.text());
    assert_eq!(origin.hits(), 1);
    let ended = proxy
        .wait_audit(|r| r["event"] == "session.ended", Duration::from_secs(5))
        .await;
    assert_eq!(ended["cause"], "canary", "{ended}");
    assert_eq!(ended["session"], session.id.as_str());
    assert_eq!(ended["dlp"]["id"], "org:2");
    let denied = proxy
        .wait_audit(
            |r| r["reason"] == "exfiltration_detected",
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(denied["session"], session.id.as_str());
    assert_never_shown(&proxy, &[tripped.text()]).await;
}

/// The first flight rustls's client sends for `name`.
pub(super) fn client_hello(name: &str) -> Vec<u8> {
    use std::sync::Arc;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}

#[tokio::test]
async fn a_canary_in_a_tunnels_server_name_closes_it_unsent_and_ends_its_session() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = Origin::start().await;
    let file = values_file("sni");
    let org = with_canaries(sessions::org(origin.port()), &file, "end-session");
    let proxy = sessions::proxy_with(&org, &[]).await;
    let session = proxy
        .admin()
        .create_session(&sessions::allowlist(&["allowed.test"]), None)
        .await;
    let auth = session.proxy_auth();
    let target = format!("allowed.test:{}", origin.port());
    let headers = [("proxy-authorization", auth.as_str())];
    let (answer, conn) = connect_via_proxy(proxy.addr, &target, &headers).await;
    assert_eq!(answer.status, 200, "the tunnel opens: {}", answer.text());
    let hex = data_encoding::HEXLOWER.encode(VALUE.as_bytes());
    let (a, b) = hex.split_at(20);
    let mut stream = conn.into_stream();
    stream
        .write_all(&client_hello(&format!("{a}.{b}.allowed.test")))
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed: {read:?}");
    let record = proxy
        .wait_audit(
            |r| r["reason"] == "exfiltration_detected",
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(record["dlp"]["found_in"], "sni", "{record}");
    assert_eq!(record["session"], session.id.as_str(), "{record}");
    proxy
        .wait_audit(|r| r["event"] == "session.ended", Duration::from_secs(5))
        .await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let after = get_via_proxy(proxy.addr, &url, &headers).await;
    assert_eq!(after.status, 407, "the session ended: {}", after.text());
    assert_eq!(origin.hits(), 0, "no request reached the origin");
    assert!(!proxy.audit_text().contains(a));
}
