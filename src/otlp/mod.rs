//! The OpenTelemetry export (`--otlp-endpoint`, docs/reference/opentelemetry.md): the
//! audit log's lines as logs, judged requests as spans, `/metrics` as metrics, over
//! OTLP/HTTP with protobuf bodies (the OpenTelemetry project's message types, encoded
//! by prost).
//!
//! One task drains the audit writer's export queue (`crate::audit::ExportQueue`,
//! bounded: what does not fit is dropped and counted) into batches of at most
//! [`MAX_BATCH`] records, sent at least every second, and the metrics every
//! `--otlp-interval`. The task runs apart from the workers that serve requests and
//! nothing waits for it: a slow, down or failing collector costs dropped exports, never
//! a slower request or a line of the audit log.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value::Value, AnyValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{ResourceMetrics, ScopeMetrics};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prometheus_client::metrics::counter::Counter;
use prost::Message;
use tokio::sync::mpsc;

use crate::audit::Written;
use crate::metrics::Metrics;

mod points;
mod records;
mod send;
pub(crate) use send::Endpoint;

/// Records in one batch at most.
pub(crate) const MAX_BATCH: usize = 512;

/// The longest a record waits in a batch.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// `--otlp-endpoint`, `--otlp-header`, `--otlp-interval`.
#[derive(Clone)]
pub(crate) struct OtlpConfig {
    pub endpoint: Endpoint,
    /// Sent with every body (a collector's credentials: never logged).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub interval: Duration,
}

impl std::fmt::Debug for OtlpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("OtlpConfig")
            .field("endpoint", &self.endpoint)
            .field("headers", &names)
            .field("interval", &self.interval)
            .finish()
    }
}

/// The metrics' text as `/metrics` serves it, read every interval.
pub(crate) type MetricsText = Box<dyn Fn() -> String + Send>;

/// The export task. [`run`](Exporter::run) returns once the queue's sender (the audit
/// writer) is gone and what it held is sent.
pub(crate) struct Exporter {
    rx: mpsc::Receiver<Written>,
    sender: send::Sender,
    interval: Duration,
    resource: Resource,
    metrics_text: MetricsText,
    started: u64,
    ids: records::Ids,
    logs: Vec<LogRecord>,
    spans: Vec<Span>,
    dropped: [Counter; 3],
}

fn string(key: &str, value: String) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value)),
        }),
        ..Default::default()
    }
}

/// `service.name`, `service.version` and a `service.instance.id` new for each process
/// (a random UUID).
fn resource() -> Resource {
    let mut id = [0u8; 16];
    if getrandom::fill(&mut id).is_err() {
        id[..8].copy_from_slice(&records::unix_nanos(SystemTime::now()).to_be_bytes());
        id[8..12].copy_from_slice(&std::process::id().to_be_bytes());
    }
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let uuid = format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    );
    Resource {
        attributes: vec![
            string("service.name", "egress-proxy".into()),
            string("service.version", env!("CARGO_PKG_VERSION").into()),
            string("service.instance.id", uuid),
        ],
        ..Default::default()
    }
}

fn scope() -> Option<InstrumentationScope> {
    Some(InstrumentationScope {
        name: "egress-proxy".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    })
}

impl Exporter {
    pub(crate) fn new(
        config: OtlpConfig,
        rx: mpsc::Receiver<Written>,
        metrics: &Metrics,
        metrics_text: MetricsText,
    ) -> Exporter {
        Exporter {
            rx,
            sender: send::Sender::new(config.endpoint, config.headers),
            interval: config.interval,
            resource: resource(),
            metrics_text,
            started: records::unix_nanos(SystemTime::now()),
            ids: records::Ids::new(),
            logs: Vec::new(),
            spans: Vec::new(),
            dropped: ["logs", "traces", "metrics"].map(|s| metrics.otlp_dropped(s)),
        }
    }

    pub(crate) async fn run(mut self) {
        let mut flush = tokio::time::interval(FLUSH_EVERY);
        let mut metrics = tokio::time::interval(self.interval);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        metrics.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                // In this order, not at random: records are taken off the queue first (a
                // full queue drops them), then logs and spans are sent, then metrics. A
                // slow collector holds each send for its tries, and a random pick could
                // send metrics several times over before the first logs.
                biased;
                written = self.rx.recv() => match written {
                    Some(written) => {
                        self.add(written);
                        if self.logs.len() >= MAX_BATCH || self.spans.len() >= MAX_BATCH {
                            self.flush().await;
                        }
                    }
                    None => break,
                },
                _ = flush.tick() => self.flush().await,
                _ = metrics.tick() => self.send_metrics().await,
            }
        }
        self.flush().await;
        self.send_metrics().await;
    }

    fn add(&mut self, written: Written) {
        let now = records::unix_nanos(SystemTime::now());
        let (log, span) = records::convert(written, &mut self.ids, now);
        self.logs.extend(log);
        self.spans.extend(span);
    }

    /// Send the logs and spans in hand.
    async fn flush(&mut self) {
        if !self.logs.is_empty() {
            let logs = std::mem::take(&mut self.logs);
            let count = logs.len() as u64;
            let body = ExportLogsServiceRequest {
                resource_logs: vec![ResourceLogs {
                    resource: Some(self.resource.clone()),
                    scope_logs: vec![ScopeLogs {
                        scope: scope(),
                        log_records: logs,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            };
            self.deliver("/v1/logs", body.encode_to_vec(), 0, count)
                .await;
        }
        if !self.spans.is_empty() {
            let spans = std::mem::take(&mut self.spans);
            let count = spans.len() as u64;
            let body = ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    resource: Some(self.resource.clone()),
                    scope_spans: vec![ScopeSpans {
                        scope: scope(),
                        spans,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            };
            self.deliver("/v1/traces", body.encode_to_vec(), 1, count)
                .await;
        }
    }

    async fn send_metrics(&mut self) {
        let now = records::unix_nanos(SystemTime::now());
        let metrics = points::metrics(&(self.metrics_text)(), self.started, now);
        let count = metrics.iter().map(points::count).sum();
        let body = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(self.resource.clone()),
                scope_metrics: vec![ScopeMetrics {
                    scope: scope(),
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        self.deliver("/v1/metrics", body.encode_to_vec(), 2, count)
            .await;
    }

    /// Send `body`; count its `count` items of `signal` dropped when it is given up.
    async fn deliver(&mut self, path: &str, body: Vec<u8>, signal: usize, count: u64) {
        if !self.sender.deliver(path, Bytes::from(body)).await {
            self.dropped[signal].inc_by(count);
        }
    }
}
