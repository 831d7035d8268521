//! The proxy's metrics, served as Prometheus text by the admin API (`GET /metrics`).
//!
//! Kept cheap on the request path: every labelled series a request can touch is created
//! once at start-up, so counting is an array index and an atomic add, with no lock, no
//! hashing and no allocation.
//!
//! "Requests" are plain HTTP requests; "connections" are `CONNECT` tunnels and the
//! refusals made before a request method is known (an unparseable head, the connection
//! limit). Both are labelled by `decision` (`allowed`, `denied`, `would_deny`, `failed`)
//! and `reason` (docs/reference/answers.md's set; `none` when allowed, `upstream` when failed).
//! DNS queries to the DNS listener (`--dns-listen`) are counted apart, with the same
//! labels (`addresses_exhausted` when failed: no synthetic address was left).

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::prometheus_text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::policy::Reason;

type Labels = [(&'static str, &'static str); 2];

/// The most detectors `egress_dlp_matches_total` names; later ones are `other`.
const MAX_DETECTORS: usize = 64;

/// The counters of one family of decisions (requests, or connections).
struct Decisions {
    allowed: Counter,
    failed: Counter,
    denied: Vec<Counter>,
    would_deny: Vec<Counter>,
}

impl Decisions {
    /// The counters of `family`; a failure is labelled `failed`/`failed_reason`.
    fn new(family: &Family<Labels, Counter>, failed_reason: &'static str) -> Decisions {
        let get = |decision, reason| {
            family
                .get_or_create(&[("decision", decision), ("reason", reason)])
                .clone()
        };
        let each = |decision| {
            Reason::ALL
                .iter()
                .map(|r| get(decision, r.as_str()))
                .collect()
        };
        Decisions {
            allowed: get("allowed", "none"),
            failed: get("failed", failed_reason),
            denied: each("denied"),
            would_deny: each("would_deny"),
        }
    }
}

/// What a judged request or connection came to, for counting.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Outcome {
    Allowed,
    Failed,
    Denied(Reason),
    WouldDeny(Reason),
}

/// Every metric of the proxy. Shared through the server's `State`.
pub(crate) struct Metrics {
    registry: Registry,
    requests: Decisions,
    connections: Decisions,
    dns_queries: Decisions,
    pub tunnels_active: Gauge,
    pub bytes_up: Counter,
    pub bytes_down: Counter,
    pub dns_lookups: Counter,
    pub dns_failures: Counter,
    pub sessions_active: Gauge,
    pub sessions_created: Counter,
    pub sessions_expired: Counter,
    pub sessions_revoked: Counter,
    pub sessions_deleted: Counter,
    pub reloads_ok: Counter,
    pub reloads_failed: Counter,
    /// Client connections closed for sending no complete request head in time.
    pub header_timeouts: Counter,
    /// Connections closed at accept: their client held `--max-pending-per-client`
    /// unfinished ones, by `listener`.
    pending_refused: Family<[(&'static str, &'static str); 1], Counter>,
    /// Secrets found by a detector, by `detector` and `action` (`refuse`, `report`).
    dlp_matches: Family<[(&'static str, String); 2], Counter>,
    /// The detectors counted so far: at most [`MAX_DETECTORS`] series, then `other`.
    dlp_seen: Mutex<std::collections::HashSet<String>>,
    audit_lines: Counter,
    audit_lost: Counter,
    audit_failing: Gauge,
    /// Serialises bringing the audit counters up to date before an encode.
    audit_sync: Mutex<()>,
    pub first_byte: Histogram,
    /// What the OpenTelemetry export could not deliver, by `signal`.
    otlp_dropped: Family<[(&'static str, &'static str); 1], Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Count a connection closed at accept by `--max-pending-per-client` on `listener`
    /// (`proxy`, `transparent` or `socks5`).
    pub(crate) fn pending_refused(&self, listener: &'static str) {
        self.pending_refused
            .get_or_create(&[("listener", listener)])
            .inc();
    }

    /// Count a secret a detector found (docs/reference/dlp.md): `action` is `refuse` or
    /// `report`. A request policy may name patterns of its own, so past
    /// [`MAX_DETECTORS`] names a new one is counted as `other`.
    pub(crate) fn dlp_match(&self, detector: &str, action: &'static str) {
        let detector = {
            let mut seen = self.dlp_seen.lock().unwrap_or_else(|p| p.into_inner());
            match seen.contains(detector) || seen.len() < MAX_DETECTORS {
                true => {
                    seen.insert(detector.to_string());
                    detector.to_string()
                }
                false => "other".to_string(),
            }
        };
        self.dlp_matches
            .get_or_create(&[("detector", detector), ("action", action.to_string())])
            .inc();
    }

    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::default();
        let requests = Family::<Labels, Counter>::default();
        let connections = Family::<Labels, Counter>::default();
        let dns_queries = Family::<Labels, Counter>::default();
        let m = Metrics {
            requests: Decisions::new(&requests, "upstream"),
            connections: Decisions::new(&connections, "upstream"),
            dns_queries: Decisions::new(&dns_queries, "addresses_exhausted"),
            tunnels_active: Gauge::default(),
            bytes_up: Counter::default(),
            bytes_down: Counter::default(),
            dns_lookups: Counter::default(),
            dns_failures: Counter::default(),
            sessions_active: Gauge::default(),
            sessions_created: Counter::default(),
            sessions_expired: Counter::default(),
            sessions_revoked: Counter::default(),
            sessions_deleted: Counter::default(),
            reloads_ok: Counter::default(),
            reloads_failed: Counter::default(),
            header_timeouts: Counter::default(),
            pending_refused: Family::default(),
            dlp_matches: Family::default(),
            dlp_seen: Mutex::default(),
            audit_lines: Counter::default(),
            audit_lost: Counter::default(),
            audit_failing: Gauge::default(),
            audit_sync: Mutex::new(()),
            // 1 ms to about 33 s.
            first_byte: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            otlp_dropped: Family::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "egress_requests",
            "Plain HTTP requests by decision and reason",
            requests,
        );
        r.register(
            "egress_connections",
            "CONNECT tunnels and connection-level refusals by decision and reason",
            connections,
        );
        r.register(
            "egress_dns_queries",
            "Messages to the DNS listener by decision and reason (denied invalid_request: not a query it answers)",
            dns_queries,
        );
        r.register(
            "egress_tunnels_active",
            "CONNECT tunnels open now",
            m.tunnels_active.clone(),
        );
        r.register(
            "egress_bytes_up",
            "Bytes sent upstream on allowed requests and tunnels",
            m.bytes_up.clone(),
        );
        r.register(
            "egress_bytes_down",
            "Bytes received from upstream on allowed requests and tunnels",
            m.bytes_down.clone(),
        );
        r.register(
            "egress_dns_lookups",
            "Lookups of allowed names",
            m.dns_lookups.clone(),
        );
        r.register(
            "egress_dns_failures",
            "Lookups that gave no address",
            m.dns_failures.clone(),
        );
        r.register(
            "egress_sessions_active",
            "Sessions alive now",
            m.sessions_active.clone(),
        );
        r.register(
            "egress_sessions_created",
            "Sessions created",
            m.sessions_created.clone(),
        );
        r.register(
            "egress_sessions_expired",
            "Sessions ended by their idle timeout",
            m.sessions_expired.clone(),
        );
        r.register(
            "egress_sessions_revoked",
            "Sessions ended by a reload that no longer covers them",
            m.sessions_revoked.clone(),
        );
        r.register(
            "egress_sessions_deleted",
            "Sessions ended by DELETE",
            m.sessions_deleted.clone(),
        );
        r.register(
            "egress_reloads_ok",
            "Policy reloads that took effect",
            m.reloads_ok.clone(),
        );
        r.register(
            "egress_reloads_failed",
            "Policy reloads that failed and left the running policy in place",
            m.reloads_failed.clone(),
        );
        r.register(
            "egress_header_timeouts",
            "Client connections closed for sending no complete request head within --header-timeout (silent ones included)",
            m.header_timeouts.clone(),
        );
        for listener in ["proxy", "transparent", "socks5"] {
            drop(m.pending_refused.get_or_create(&[("listener", listener)]));
        }
        r.register(
            "egress_pending_refused",
            "Connections closed at once because their client address held --max-pending-per-client connections without a complete request head or SOCKS5 handshake",
            m.pending_refused.clone(),
        );
        r.register(
            "egress_audit_lines",
            "Audit records written to the audit log",
            m.audit_lines.clone(),
        );
        r.register(
            "egress_audit_lost",
            "Audit records that could not be written (only with --audit-failure open)",
            m.audit_lost.clone(),
        );
        r.register(
            "egress_audit_failing",
            "1 while the audit log cannot be written (the proxy refuses every request unless --audit-failure open)",
            m.audit_failing.clone(),
        );
        r.register(
            "egress_dlp_matches",
            "Secrets a detector found in what a client sent, by detector and action (refuse, report)",
            m.dlp_matches.clone(),
        );
        r.register(
            "egress_upstream_first_byte_seconds",
            "From an allow decision to the first byte from upstream (plain HTTP) or the tunnel's upstream connection",
            m.first_byte.clone(),
        );
        for signal in ["logs", "traces", "metrics"] {
            drop(m.otlp_dropped.get_or_create(&[("signal", signal)]));
        }
        r.register(
            "egress_otlp_dropped",
            "What the OpenTelemetry export dropped, by signal: audit records (logs: the export queue was full or their batch could not be delivered), spans, metric points",
            m.otlp_dropped.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Count one plain HTTP request.
    pub(crate) fn request(&self, outcome: Outcome) {
        Self::count(&self.requests, outcome);
    }

    /// Count one `CONNECT` or connection-level refusal.
    pub(crate) fn connection(&self, outcome: Outcome) {
        Self::count(&self.connections, outcome);
    }

    /// Count one message to the DNS listener.
    pub(crate) fn dns_query(&self, outcome: Outcome) {
        Self::count(&self.dns_queries, outcome);
    }

    fn count(d: &Decisions, outcome: Outcome) {
        match outcome {
            Outcome::Allowed => d.allowed.inc(),
            Outcome::Failed => d.failed.inc(),
            Outcome::Denied(r) => d.denied[r as usize].inc(),
            Outcome::WouldDeny(r) => d.would_deny[r as usize].inc(),
        };
    }

    /// The counter of what the OpenTelemetry export dropped of `signal` (`logs`,
    /// `traces` or `metrics`).
    pub(crate) fn otlp_dropped(&self, signal: &'static str) -> Counter {
        self.otlp_dropped
            .get_or_create(&[("signal", signal)])
            .clone()
    }

    pub(crate) fn observe_first_byte(&self, elapsed: Duration) {
        self.first_byte.observe(elapsed.as_secs_f64());
    }

    /// The Prometheus text exposition (format 0.0.4). `audit_lines` and `audit_lost` are
    /// the audit writer's running totals, `audit_failing` its state.
    pub(crate) fn encode(&self, audit_lines: u64, audit_lost: u64, audit_failing: bool) -> String {
        {
            let _one = self.audit_sync.lock().unwrap_or_else(|p| p.into_inner());
            for (counter, total) in [
                (&self.audit_lines, audit_lines),
                (&self.audit_lost, audit_lost),
            ] {
                let seen = counter.get();
                if total > seen {
                    counter.inc_by(total - seen);
                }
            }
            self.audit_failing.set(i64::from(audit_failing));
        }
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_index_their_own_counters() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{r}");
        }
    }

    #[test]
    fn encode_shows_labelled_counts() {
        let m = Metrics::new();
        m.request(Outcome::Denied(Reason::NotInOrgAllowlist));
        m.connection(Outcome::Allowed);
        m.dns_query(Outcome::Denied(Reason::InvalidHost));
        m.dns_query(Outcome::Failed);
        m.observe_first_byte(Duration::from_millis(3));
        let text = m.encode(7, 0, false);
        assert!(
            text.contains(
                "egress_requests_total{decision=\"denied\",reason=\"not_in_org_allowlist\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("egress_connections_total{decision=\"allowed\",reason=\"none\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "egress_dns_queries_total{decision=\"denied\",reason=\"invalid_host\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "egress_dns_queries_total{decision=\"failed\",reason=\"addresses_exhausted\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("egress_audit_lines_total 7"), "{text}");
        assert!(
            text.contains("egress_upstream_first_byte_seconds_count 1"),
            "{text}"
        );
    }
}
