//! `run --otlp-endpoint` (docs/reference/opentelemetry.md): the jail's proxy exports to
//! a collector on the host's loopback, which CMD cannot reach. A request through
//! `HTTP_PROXY` (under the client's `traceparent`), a connection that ignores the proxy
//! (taken by the transparent listener) and a lookup (the DNS listener) each arrive as a
//! span, and the written records as logs.

use super::transparent::EXCHANGE;
use super::{require_jail, Jailed};
use crate::otlp::{decoder_missing, find, text, Receiver, TRACEPARENT};
use crate::support::origin::Origin;
use crate::support::unique_temp_dir;

#[tokio::test]
async fn run_exports_the_spans_of_its_proxy_transparent_and_dns_listeners() {
    require_jail!();
    if decoder_missing() {
        return;
    }
    let receiver = Receiver::start(&unique_temp_dir("run-otlp"), "ok");
    let origin = Origin::start().await;
    let script = format!(
        r#"{EXCHANGE}
import socket, urllib.request
req = urllib.request.Request("http://allowed.test:{port}/hello", headers={{"traceparent": "{TRACEPARENT}"}})
print("proxy", urllib.request.urlopen(req, timeout=10).status)
s = socket.create_connection(("8.8.8.8", 80), timeout=10)
data = exchange(s, b"GET /x HTTP/1.1\r\nHost: 8.8.8.8\r\nConnection: close\r\n\r\n")
print("transparent", data.split(b"\r\n")[0].decode())
print("dns", socket.getaddrinfo("allowed.test", 80, socket.AF_INET)[0][4][0])
try:
    socket.create_connection(("127.0.0.1", {collector}), timeout=3)
    print("collector reached")
except OSError as e:
    print("collector unreachable", e)
"#,
        port = origin.port(),
        collector = receiver.port,
    );
    let out = Jailed::standard(origin.port())
        .arg("--otlp-endpoint")
        .arg(receiver.endpoint())
        .python(&script)
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("proxy 200"), "{out}");
    assert!(out.stdout.contains("transparent HTTP/1.1 403"), "{out}");
    assert!(out.stdout.contains("dns "), "{out}");
    assert!(out.stdout.contains("collector unreachable"), "{out}");
    // `run` sends what it holds before it exits.
    let spans = receiver.items("/v1/traces");
    let proxied = find(&spans, "egress.allowed", "egress.via", "proxy")
        .unwrap_or_else(|| panic!("the request's span: {spans:#?}\n{out}"));
    assert_eq!(proxied["name"], "egress GET");
    assert_eq!(proxied["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(proxied["parentSpanId"], "00f067aa0ba902b7");
    let caught = find(&spans, "egress.denied", "egress.via", "transparent")
        .unwrap_or_else(|| panic!("the transparent connection's span: {spans:#?}"));
    assert_eq!(text(caught, "server.address"), "8.8.8.8");
    assert_eq!(caught["status"]["code"], "STATUS_CODE_ERROR");
    let query = find(&spans, "egress.allowed", "egress.via", "dns")
        .unwrap_or_else(|| panic!("the lookup's span: {spans:#?}"));
    assert_eq!(query["name"], "egress DNS");
    assert_eq!(text(query, "server.address"), "allowed.test");
    // The refusal is written, and exported as its log.
    let logs = receiver.items("/v1/logs");
    let record = out
        .audit
        .iter()
        .find(|r| r["host"] == "8.8.8.8")
        .unwrap_or_else(|| panic!("no record of 8.8.8.8: {out}"));
    let log = find(&logs, "egress.denied", "egress.via", "transparent").expect("its log");
    assert_eq!(text(log, "egress.request_id"), record["request_id"]);
}
