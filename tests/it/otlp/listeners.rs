//! Spans of the other doors (docs/reference/opentelemetry.md, "Traces"): an allowed
//! query to the DNS listener, which writes no record (beside a refused one, which
//! does), and a SOCKS5 connection, allowed and refused. The transparent listener's span is `run`'s (`crate::run::otlp`): it
//! needs the jail's nftables redirect.

use hickory_proto::rr::RecordType;

use super::{attr, decoder_missing, find, text, Receiver};
use crate::socks::{Setup, Socks, To};
use crate::support::dns_client::{a_records, dns_listener, UdpClient};
use crate::support::origin::Origin;
use crate::support::proxy::ProxyBuilder;
use crate::support::unique_temp_dir;

/// `builder` with a DNS listener, exporting to `receiver`.
fn with_dns_exporting(builder: ProxyBuilder, receiver: &Receiver) -> ProxyBuilder {
    builder
        .arg("--dns-listen")
        .arg("127.0.0.1:0")
        .arg("--otlp-endpoint")
        .arg(&receiver.endpoint())
}

#[tokio::test]
async fn an_allowed_dns_query_has_its_span_and_writes_no_record() {
    if decoder_missing() {
        return;
    }
    let dir = unique_temp_dir("otlp-dns");
    let receiver = Receiver::start(&dir, "ok");
    let origin = Origin::start().await;
    // With --audit-allowed: an allowed query is still not in the log.
    let builder = ProxyBuilder::standard(origin.port()).audit_allowed();
    let mut proxy = with_dns_exporting(builder, &receiver).start().await;
    let mut udp = UdpClient::new(dns_listener(&proxy)).await;
    let answer = udp.query("allowed.test", RecordType::A).await;
    assert_eq!(a_records(&answer).len(), 1, "{answer:?}");
    // A refused query, whose record the log does hold.
    udp.query("evil.test", RecordType::A).await;
    receiver
        .wait("both queries' spans", |r| r.items("/v1/traces").len() >= 2)
        .await;
    assert!(proxy.terminate().await.success(), "{}", proxy.diagnostics());
    let spans = receiver.items("/v1/traces");
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let span = find(&spans, "egress.allowed", "egress.via", "dns").expect("the allowed one");
    assert_eq!(span["name"], "egress DNS");
    assert_eq!(span["kind"], "SPAN_KIND_SERVER");
    assert!(span["status"].get("code").is_none(), "{span}");
    assert_eq!(text(span, "egress.event"), "egress.allowed");
    assert_eq!(text(span, "egress.via"), "dns");
    assert_eq!(text(span, "network.protocol.name"), "dns");
    assert_eq!(text(span, "server.address"), "allowed.test");
    assert!(attr(span, "server.port").is_null(), "a query names no port");
    assert_eq!(
        text(span, "egress.policy_level"),
        "request",
        "--policy decides"
    );
    assert!(
        text(span, "egress.rule").starts_with("allowed.test"),
        "{span}"
    );
    // The log holds the refusal alone, and so do the exported logs.
    let audit = proxy.audit_lines();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(
        (audit[0]["event"].as_str(), audit[0]["host"].as_str()),
        (Some("egress.denied"), Some("evil.test"))
    );
    let logs = receiver.items("/v1/logs");
    assert_eq!(logs.len(), 1, "{logs:#?}");
    assert_eq!(text(&logs[0], "server.address"), "evil.test");
}

/// A query report mode answers has no `egress.allowed` record: its `egress.would_deny`
/// record is its span (not an error: it was answered), beside its log.
#[tokio::test]
async fn a_dns_query_report_mode_answers_has_its_span() {
    if decoder_missing() {
        return;
    }
    let receiver = Receiver::start(&unique_temp_dir("otlp-dns-report"), "ok");
    let origin = Origin::start().await;
    let org = crate::support::org::Org::standard(origin.port()).mode("report");
    let builder = ProxyBuilder::new(org.to_toml())
        .policy(crate::support::org::allowlist_json(&["allowed.test"]))
        .pin("allowed.test");
    let mut proxy = with_dns_exporting(builder, &receiver).start().await;
    let mut udp = UdpClient::new(dns_listener(&proxy)).await;
    let answer = udp.query("evil.test", RecordType::A).await;
    assert_eq!(a_records(&answer).len(), 1, "answered: {answer:?}");
    receiver
        .wait("the query's span", |r| !r.items("/v1/traces").is_empty())
        .await;
    assert!(proxy.terminate().await.success(), "{}", proxy.diagnostics());
    let spans = receiver.items("/v1/traces");
    assert_eq!(spans.len(), 1, "{spans:#?}");
    let span = &spans[0];
    assert_eq!(span["name"], "egress DNS");
    assert_eq!(text(span, "egress.event"), "egress.would_deny");
    assert_eq!(text(span, "server.address"), "evil.test");
    assert!(
        span["status"].get("code").is_none(),
        "answered, not an error: {span}"
    );
    let logs = receiver.items("/v1/logs");
    assert_eq!(logs.len(), 1, "{logs:#?}");
    assert_eq!(text(&logs[0], "egress.event"), "egress.would_deny");
}

#[tokio::test]
async fn a_socks5_connection_has_its_span_allowed_or_refused() {
    if decoder_missing() {
        return;
    }
    let dir = unique_temp_dir("otlp-socks");
    let receiver = Receiver::start(&dir, "ok");
    let endpoint = receiver.endpoint();
    let mut s = Setup::start(&["--otlp-endpoint", &endpoint]).await;
    let (code, socks) = Socks::connect(s.socks, &To::name("allowed.test"), s.origin.port()).await;
    assert_eq!(code, 0x00);
    let response = socks.http_get("allowed.test").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let (code, _refused) = Socks::connect(s.socks, &To::name("evil.test"), 443).await;
    assert_eq!(code, 0x02, "not allowed by the ruleset");
    receiver
        .wait("both spans", |r| r.items("/v1/traces").len() >= 2)
        .await;
    assert!(
        s.proxy.terminate().await.success(),
        "{}",
        s.proxy.diagnostics()
    );
    let spans = receiver.items("/v1/traces");
    let allowed = find(&spans, "egress.allowed", "egress.via", "socks5").expect("allowed");
    assert_eq!(allowed["name"], "egress CONNECT");
    assert_eq!(text(allowed, "network.protocol.name"), "socks");
    assert_eq!(text(allowed, "server.address"), "allowed.test");
    assert_eq!(
        attr(allowed, "server.port")["intValue"],
        s.origin.port().to_string()
    );
    assert!(allowed["status"].get("code").is_none(), "{allowed}");
    let refused = find(&spans, "egress.denied", "egress.via", "socks5").expect("refused");
    assert_eq!(refused["name"], "egress CONNECT");
    assert_eq!(refused["status"]["code"], "STATUS_CODE_ERROR");
    assert_eq!(text(refused, "server.address"), "evil.test");
    // Each span is its record's: the log holds both (--audit-allowed), with their ids.
    let logs = receiver.items("/v1/logs");
    for span in [allowed, refused] {
        let id = text(span, "egress.request_id");
        let log = logs
            .iter()
            .find(|l| text(l, "egress.request_id") == id)
            .unwrap_or_else(|| panic!("no log for {span}"));
        assert_eq!(log["spanId"], span["spanId"]);
    }
}
