//! A collector that is stopped, slow (10 s before each answer) or answering 503: every
//! request is answered, the audit log holds every record, what the export could not
//! deliver is counted in `egress_otlp_dropped_total`, and `/healthz` stays 200.

use std::sync::Arc;

use super::*;
use crate::support::admin::metric;
use crate::support::proxy::Proxy;

const TOKEN: &str = "otlp-token";

/// Denied requests made, from [`CLIENTS`] clients at once.
const REQUESTS: usize = 200;
const CLIENTS: usize = 8;

/// How long the drops may take to be counted: a slow collector's batch is given up
/// after its tries time out (docs/reference/opentelemetry.md, "Delivery").
const DROPS_WITHIN: Duration = Duration::from_secs(90);

async fn denied_requests(proxy: &Proxy) {
    let url = Arc::new("http://evil.test/x".to_string());
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (addr, url) = (proxy.addr, url.clone());
        clients.push(tokio::spawn(async move {
            for _ in 0..REQUESTS / CLIENTS {
                let resp = get_via_proxy(addr, &url, &[]).await;
                assert_eq!(resp.status, 403, "{resp:?}");
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
}

/// The proxy exporting to `endpoint`, with its admin API.
async fn exporting_to(endpoint: &str) -> Proxy {
    ProxyBuilder::standard(9)
        .admin(TOKEN)
        .arg("--otlp-endpoint")
        .arg(endpoint)
        .arg("--otlp-interval")
        .arg("0.5")
        .start()
        .await
}

async fn records_are_kept_and_drops_counted(endpoint: &str) {
    let mut proxy = exporting_to(endpoint).await;
    denied_requests(&proxy).await;
    let deadline = Instant::now() + DROPS_WITHIN;
    let dropped = loop {
        let text = proxy.admin().metrics().await;
        let dropped = metric(&text, "egress_otlp_dropped_total{signal=\"logs\"}").unwrap_or(0.0);
        if dropped > 0.0 {
            break dropped;
        }
        assert!(Instant::now() < deadline, "no drop counted: {text}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let health = proxy.admin().call("GET", "/healthz", None).await;
    assert_eq!(health.status, 200, "{health:?}");
    assert!(proxy.terminate().await.success(), "{}", proxy.diagnostics());
    let lines = proxy.audit_lines();
    assert_eq!(lines.len(), REQUESTS, "every record is in the audit log");
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["seq"], i as u64 + 1);
    }
    assert!(dropped <= REQUESTS as f64, "{dropped}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_collector_loses_exports_not_records() {
    // A port nothing listens on: every connection is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    records_are_kept_and_drops_counted(&format!("http://127.0.0.1:{port}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_collector_loses_exports_not_records() {
    if decoder_missing() {
        return;
    }
    let receiver = Receiver::start(&unique_temp_dir("otlp-slow"), "slow");
    records_are_kept_and_drops_counted(&receiver.endpoint()).await;
    assert!(
        !receiver.bodies().is_empty(),
        "the slow collector was reached"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_answering_503_loses_exports_not_records() {
    if decoder_missing() {
        return;
    }
    let receiver = Receiver::start(&unique_temp_dir("otlp-503"), "503");
    records_are_kept_and_drops_counted(&receiver.endpoint()).await;
    assert!(!receiver.bodies().is_empty(), "the collector was reached");
}
