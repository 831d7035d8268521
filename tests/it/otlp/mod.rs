//! `serve --otlp-endpoint` on the wire (docs/reference/opentelemetry.md): a collector on
//! loopback (`receiver.py`) decodes every body with the OpenTelemetry project's own
//! message types (the `opentelemetry-proto` package from PyPI, pinned in `.ci/run`).
//! Skipped, with the reason printed, when `python3` has no `opentelemetry.proto`.
//!
//! - here: a denied and an allowed request, a tunnel and a DNS refusal arrive as
//!   LogRecords with their attributes and as spans (the request's under the client's
//!   `traceparent`, which reaches the origin unchanged); the metrics arrive as points.
//! - `failing`: a collector stopped, slow or answering 503: the audit log is whole, the
//!   drops are counted, `/healthz` stays 200.
//! - `listeners`: an allowed DNS query's span (no record), a SOCKS5 connection's.

mod failing;
mod listeners;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType;
use serde_json::Value;

use crate::support::client::{connect_via_proxy, get_via_proxy};
use crate::support::dns::DnsServer;
use crate::support::dns_client::{dns_listener, UdpClient};
use crate::support::origin::Origin;
use crate::support::proxy::ProxyBuilder;
use crate::support::{json_lines, unique_temp_dir};

/// A client's W3C trace context: trace `4bf9…4736`, its span `00f0…02b7`.
pub(crate) const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// How long an export may take to arrive.
const ARRIVAL: Duration = Duration::from_secs(30);

/// The test collector: `receiver.py`, its bodies in `out`, one JSON object a line.
pub(crate) struct Receiver {
    child: Child,
    pub port: u16,
    pub out: PathBuf,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `python3` lacks `opentelemetry.proto`; says why it skips when it does.
pub(crate) fn decoder_missing() -> bool {
    let found = Command::new("python3")
        .args([
            "-c",
            "import opentelemetry.proto.collector.logs.v1.logs_service_pb2",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!(
            "skipped: python3 has no `opentelemetry.proto` (pip install opentelemetry-proto)"
        );
    }
    !found
}

impl Receiver {
    /// Start the collector in `mode` (`ok`, `slow`, `503`), writing into `dir`.
    pub(crate) fn start(dir: &Path, mode: &str) -> Receiver {
        use std::io::BufRead;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/otlp/receiver.py");
        let out = dir.join(format!("otlp-{mode}.jsonl"));
        let mut child = Command::new("python3")
            .arg(script)
            .arg(&out)
            .arg(mode)
            .stdout(Stdio::piped())
            .spawn()
            .expect("run python3");
        let mut first = String::new();
        let stdout = child.stdout.take().expect("piped");
        std::io::BufReader::new(stdout)
            .read_line(&mut first)
            .expect("the receiver's port");
        let port = first.trim().parse().expect("a port");
        Receiver { child, port, out }
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every body received so far.
    pub(crate) fn bodies(&self) -> Vec<Value> {
        json_lines(&self.out)
    }

    /// The items (`logRecords`, `spans`, `metrics`) of every body posted to `path`.
    pub(crate) fn items(&self, path: &str) -> Vec<Value> {
        let (outer, middle, inner) = match path {
            "/v1/logs" => ("resourceLogs", "scopeLogs", "logRecords"),
            "/v1/traces" => ("resourceSpans", "scopeSpans", "spans"),
            _ => ("resourceMetrics", "scopeMetrics", "metrics"),
        };
        let mut out = Vec::new();
        for body in self.bodies().iter().filter(|b| b["path"] == path) {
            for r in body["body"][outer].as_array().into_iter().flatten() {
                for s in r[middle].as_array().into_iter().flatten() {
                    out.extend(s[inner].as_array().into_iter().flatten().cloned());
                }
            }
        }
        out
    }

    /// Waits (at most [`ARRIVAL`]) until `done` holds of what was received.
    pub(crate) async fn wait(&self, what: &str, done: impl Fn(&Receiver) -> bool) {
        let deadline = Instant::now() + ARRIVAL;
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "{what} did not arrive: {:#?}",
                self.bodies()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The value of `key` among OTLP `attributes`, as JSON (`{"stringValue": ...}`).
pub(crate) fn attr<'a>(item: &'a Value, key: &str) -> &'a Value {
    item["attributes"]
        .as_array()
        .and_then(|a| a.iter().find(|kv| kv["key"] == key))
        .map_or(&Value::Null, |kv| &kv["value"])
}

pub(crate) fn text<'a>(item: &'a Value, key: &str) -> &'a str {
    attr(item, key)["stringValue"].as_str().unwrap_or("")
}

/// The log or span whose `egress.event` and `http.request.method`/`egress.via` match.
pub(crate) fn find<'a>(
    items: &'a [Value],
    event: &str,
    key: &str,
    value: &str,
) -> Option<&'a Value> {
    items
        .iter()
        .find(|i| text(i, "egress.event") == event && text(i, key) == value)
}

#[tokio::test]
async fn records_arrive_as_logs_and_spans_and_metrics_as_points() {
    if decoder_missing() {
        return;
    }
    let dir = unique_temp_dir("otlp");
    let receiver = Receiver::start(&dir, "ok");
    let origin = Origin::start().await;
    let dns = DnsServer::builder().start().await;
    let mut proxy = ProxyBuilder::standard(origin.port())
        .audit_allowed()
        .dns_server(dns.addr())
        .arg("--dns-listen")
        .arg("127.0.0.1:0")
        .arg("--otlp-endpoint")
        .arg(&receiver.endpoint())
        .arg("--otlp-header")
        .arg("Authorization=Bearer collector-token")
        .arg("--otlp-interval")
        .arg("0.5")
        .start()
        .await;
    let allowed = format!("allowed.test:{}", origin.port());
    let traced = [("traceparent", TRACEPARENT)];

    let denied = get_via_proxy(proxy.addr, "http://evil.test/x?q=1", &traced).await;
    assert_eq!(denied.status, 403, "{}", proxy.diagnostics());
    let ok = get_via_proxy(proxy.addr, &format!("http://{allowed}/"), &traced).await;
    assert_eq!(ok.status, 200, "{}", proxy.diagnostics());
    let (answer, mut tunnel) = connect_via_proxy(proxy.addr, &allowed, &[]).await;
    assert_eq!(answer.status, 200, "{}", proxy.diagnostics());
    assert_eq!(tunnel.get(&allowed, "/in-tunnel").await.status, 200);
    drop(tunnel);
    let mut udp = UdpClient::new(dns_listener(&proxy)).await;
    udp.query("evil.test", RecordType::A).await;
    // The header is forwarded as it came.
    let at_origin = origin.requests();
    assert_eq!(at_origin[0].header("traceparent"), Some(TRACEPARENT));

    receiver
        .wait("four records as logs", |r| r.items("/v1/logs").len() >= 4)
        .await;
    receiver
        .wait("the metrics", |r| !r.items("/v1/metrics").is_empty())
        .await;
    assert!(proxy.terminate().await.success(), "{}", proxy.diagnostics());

    let logs = receiver.items("/v1/logs");
    let audit = proxy.audit_lines();
    let refused = find(&logs, "egress.denied", "http.request.method", "GET").expect("the denial");
    assert_eq!(refused["severityText"], "WARN");
    assert_eq!(text(refused, "server.address"), "evil.test");
    assert_eq!(attr(refused, "server.port")["intValue"], "80");
    assert_eq!(text(refused, "client.address"), "127.0.0.1");
    assert!(attr(refused, "client.port")["intValue"].is_string());
    assert_eq!(text(refused, "url.full"), "http://evil.test/x?q=1");
    assert_eq!(text(refused, "network.protocol.name"), "http");
    assert_eq!(text(refused, "egress.reason"), audit[0]["reason"]);
    assert_eq!(text(refused, "egress.policy_level"), "org");
    assert_eq!(text(refused, "egress.via"), "proxy");
    assert_eq!(text(refused, "egress.request_id"), audit[0]["request_id"]);
    assert_eq!(attr(refused, "egress.shared_hosting")["boolValue"], false);
    // The body is the audit line, as written (with its chain).
    let body: Value =
        serde_json::from_str(refused["body"]["stringValue"].as_str().unwrap()).unwrap();
    assert_eq!(body, audit[0]);
    let allowed_log = find(&logs, "egress.allowed", "http.request.method", "GET").expect("allowed");
    assert_eq!(allowed_log["severityText"], "INFO");
    assert!(
        text(allowed_log, "egress.rule").starts_with("allowed.test"),
        "{allowed_log}"
    );
    assert!(find(&logs, "egress.allowed", "http.request.method", "CONNECT").is_some());
    let dns_log = find(&logs, "egress.denied", "egress.via", "dns").expect("the DNS refusal");
    assert_eq!(text(dns_log, "network.protocol.name"), "dns");
    assert_eq!(text(dns_log, "server.address"), "evil.test");

    receiver
        .wait("four spans", |r| r.items("/v1/traces").len() >= 4)
        .await;
    let spans = receiver.items("/v1/traces");
    let span = find(&spans, "egress.denied", "http.request.method", "GET").expect("its span");
    assert_eq!(span["name"], "egress GET");
    assert_eq!(span["kind"], "SPAN_KIND_SERVER");
    assert_eq!(span["status"]["code"], "STATUS_CODE_ERROR");
    assert_eq!(span["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(span["parentSpanId"], "00f067aa0ba902b7");
    assert_eq!(refused["spanId"], span["spanId"], "the log names its span");
    let ok_span = find(&spans, "egress.allowed", "http.request.method", "GET").expect("allowed");
    assert_eq!(ok_span["parentSpanId"], "00f067aa0ba902b7");
    assert!(ok_span["status"].get("code").is_none(), "{ok_span}");
    let tunnel = find(&spans, "egress.allowed", "http.request.method", "CONNECT").expect("tunnel");
    assert_eq!(tunnel["name"], "egress CONNECT");
    assert!(
        tunnel.get("parentSpanId").is_none(),
        "no traceparent, a trace of its own"
    );
    assert_eq!(
        find(&spans, "egress.denied", "egress.via", "dns").unwrap()["name"],
        "egress DNS"
    );

    let bodies = receiver.bodies();
    assert!(bodies.iter().all(|b| b["auth"] == "Bearer collector-token"));
    let resource = &bodies[0]["body"]
        .as_object()
        .and_then(|o| o.values().next())
        .expect("a resource")[0]["resource"];
    assert_eq!(text(resource, "service.name"), "egress-proxy");
    assert_eq!(text(resource, "service.version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(text(resource, "service.instance.id").len(), 36);
    let metrics = receiver.items("/v1/metrics");
    // The last export, made at shutdown, counts every request.
    let requests = metrics
        .iter()
        .rev()
        .find(|m| m["name"] == "egress_requests_total")
        .expect("egress_requests_total");
    assert_eq!(requests["sum"]["isMonotonic"], true);
    let points = requests["sum"]["dataPoints"].as_array().unwrap();
    let allowed_point = points
        .iter()
        .find(|p| text(p, "decision") == "allowed")
        .expect("an allowed point");
    assert_eq!(allowed_point["asInt"], "1");
    assert!(metrics
        .iter()
        .any(|m| m["histogram"]["dataPoints"].is_array()));
}

#[tokio::test]
async fn an_allowed_request_has_its_span_without_audit_allowed_and_no_log() {
    if decoder_missing() {
        return;
    }
    let dir = unique_temp_dir("otlp-spans");
    let receiver = Receiver::start(&dir, "ok");
    let origin = Origin::start().await;
    let mut proxy = ProxyBuilder::standard(origin.port())
        .arg("--otlp-endpoint")
        .arg(&receiver.endpoint())
        .start()
        .await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let ok = get_via_proxy(proxy.addr, &url, &[("traceparent", TRACEPARENT)]).await;
    assert_eq!(ok.status, 200, "{}", proxy.diagnostics());
    receiver
        .wait("the span", |r| !r.items("/v1/traces").is_empty())
        .await;
    assert!(proxy.terminate().await.success(), "{}", proxy.diagnostics());
    let spans = receiver.items("/v1/traces");
    assert_eq!(spans.len(), 1, "{spans:#?}");
    assert_eq!(spans[0]["name"], "egress GET");
    assert_eq!(spans[0]["parentSpanId"], "00f067aa0ba902b7");
    assert_eq!(text(&spans[0], "url.full"), url);
    assert!(
        receiver.items("/v1/logs").is_empty(),
        "the log holds no record"
    );
    assert!(proxy.audit_lines().is_empty());
}
