//! What a judged request leaves behind: its audit record and its count in the metrics.
//! Every record of the request path is built here, from one constructor
//! ([`Record::new`]), so a refusal, a would-be denial and an allowed connection cannot
//! drift apart in what they carry.

use std::net::SocketAddr;

use super::approvals::{Outcome as ApprovalOutcome, Pending};
use super::approved::{Approved, Judged};
use super::ask::Method;
use super::refusal::{Refusal, Stop, REDACTED};
use super::relayed::Relayed;
use super::state::State;
use crate::audit::{clip_url, Record, RequestId, Trace, Via};
use crate::dlp::{By, FoundIn, Hit};
use crate::metrics::Outcome;
use crate::policy::{Decision, Level, Reason, Target, Verdict};

/// What is being answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Asked {
    /// A proxied HTTP request, with its method.
    Request(Method),
    /// A `CONNECT`: one tunnel.
    Connect,
    /// A connection refused before any request was read (malformed, over a limit).
    BeforeRequest,
    /// A query to the DNS listener (its audit record's method is `DNS`).
    Dns,
}

impl Asked {
    /// The audit record's `method`: empty when no request was read.
    pub(crate) fn method(&self) -> &str {
        match self {
            Asked::Request(m) => m,
            Asked::Connect => "CONNECT",
            Asked::BeforeRequest => "",
            Asked::Dns => "DNS",
        }
    }
}

/// Who is asking, and what: carried through a request for its audit record.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    pub addr: SocketAddr,
    pub request_id: RequestId,
    pub asked: Asked,
    /// The listener it came through.
    pub via: Via,
    /// The intercepted tunnel it was read inside, whose record sums its bytes.
    pub within: Option<Relayed>,
    /// Its start and the client's `traceparent`, read only for the OpenTelemetry
    /// export ([`State::traced`]).
    pub trace: Option<Box<Trace>>,
}

impl Client {
    /// A new request (or connection) from `addr`, with a fresh request id.
    pub(crate) fn new(addr: SocketAddr, asked: Asked) -> Client {
        Client {
            addr,
            request_id: RequestId::new(),
            asked,
            via: Via::Proxy,
            within: None,
            trace: None,
        }
    }

    /// The same, traced from now under the request's `traceparent` header when
    /// `state` exports traces.
    pub(crate) fn traced<'a>(
        mut self,
        state: &State,
        traceparent: impl FnOnce() -> Option<&'a [u8]>,
    ) -> Client {
        // The header is looked up only when traces are exported.
        if state.traced {
            self.trace = Some(Box::new(Trace::starting(traceparent())));
        }
        self
    }

    /// The same, through another listener.
    pub(crate) fn via(mut self, via: Via) -> Client {
        self.via = via;
        self
    }

    /// The same, read inside an intercepted tunnel whose record sums its bytes.
    pub(crate) fn within(mut self, tunnel: Option<Relayed>) -> Client {
        self.within = tunnel;
        self
    }
}

/// Count a judged request (plain HTTP), connection (`CONNECT`, or refused before a
/// request was read) or DNS query in the metrics.
pub(crate) fn count(state: &State, client: &Client, outcome: Outcome) {
    match client.asked {
        Asked::Request(_) => state.metrics.request(outcome),
        Asked::Connect | Asked::BeforeRequest => state.metrics.connection(outcome),
        Asked::Dns => state.metrics.dns_query(outcome),
    }
}

/// Count an approved request or tunnel: allowed, or let through by report mode.
pub(crate) fn count_approved(state: &State, client: &Client, approved: &Approved) {
    let outcome = match approved.decision.verdict {
        Verdict::WouldDeny(reason) => Outcome::WouldDeny(reason),
        _ => Outcome::Allowed,
    };
    count(state, client, outcome);
}

/// The URL of a request read inside an intercepted tunnel, for the audit record:
/// `https://` and the tunnel's authority, then the request's path and query (cut as
/// every recorded URL is).
pub(crate) fn inspected_url(path_and_query: &str, target: &Target) -> String {
    let authority = match target.port {
        443 => target
            .host
            .authority(443)
            .trim_end_matches(":443")
            .to_string(),
        port => target.host.authority(port),
    };
    format!("https://{authority}{path_and_query}")
}

/// Record a stop of the judgement the same way at every door: a denial counted and
/// audited ([`audit_refusal`]), a failure (an allowed destination that could not be
/// reached) counted and logged. `url` is asked for only when a record is written.
pub(crate) async fn record_stop(
    state: &State,
    client: &Client,
    stop: &Stop,
    url: impl FnOnce() -> Option<String>,
) {
    match stop {
        Stop::Denied(refusal) => audit_refusal(state, client, refusal, url()).await,
        Stop::Failed(failure) => {
            count(state, client, Outcome::Failed);
            tracing::info!(request_id = %client.request_id, "{}", failure.message);
        }
    }
}

/// Count and write the audit record of a refusal (waiting while the audit queue is
/// full: a refusal is answered only once its record is queued).
pub(crate) async fn audit_refusal(
    state: &State,
    client: &Client,
    refusal: &Refusal,
    url: Option<String>,
) {
    count(state, client, Outcome::Denied(refusal.reason));
    count_secret(state, refusal);
    state
        .audit
        .write(refusal_record(client, refusal, "egress.denied", url))
        .await;
}

/// [`audit_refusal`] from code that cannot wait (a drop): queued at once, or by a task
/// that waits for room. Never dropped.
pub(crate) fn audit_refusal_detached(
    state: &State,
    client: &Client,
    refusal: &Refusal,
    url: Option<String>,
) {
    count(state, client, Outcome::Denied(refusal.reason));
    count_secret(state, refusal);
    state
        .audit
        .write_detached(refusal_record(client, refusal, "egress.denied", url));
}

/// A secret detector's refusal, counted by detector (docs/reference/metrics.md).
fn count_secret(state: &State, refusal: &Refusal) {
    if let Some(hit) = refusal.dlp.as_deref().filter(|h| h.by != By::Canary) {
        state.metrics.dlp_match(&hit.id, "refuse");
    }
}

/// Write the `egress.would_deny` record of a denial report mode let through (it is
/// counted with the allowed request).
pub(crate) async fn audit_would_deny(
    state: &State,
    client: &Client,
    refusal: &Refusal,
    url: Option<String>,
) {
    state
        .audit
        .write(refusal_record(client, refusal, "egress.would_deny", url))
        .await;
}

/// Write the `egress.flagged` record of a secret a detector found and `[dlp] action =
/// "report"` let through (docs/reference/dlp.md): `secret_detected` at level `dlp`,
/// with the hit, never the value. Counted in the detectors' metric.
pub(crate) fn audit_flagged(
    state: &State,
    client: &Client,
    approved: &Approved,
    hit: Hit,
    url: Option<String>,
) {
    state.metrics.dlp_match(&hit.id, "report");
    let mut rec = approved_record("egress.flagged", client, approved, None, url, None);
    if matches!(hit.found_in, FoundIn::Target | FoundIn::Dns | FoundIn::Sni) {
        rec.host = REDACTED.to_string();
    }
    rec.url = None;
    rec.url_truncated = false;
    rec.reason = Some(Reason::SecretDetected.as_str());
    rec.policy_level = Some(Level::Dlp.as_str());
    rec.rule = None;
    rec.dlp = Some(hit);
    state.audit.write_detached(rec);
}

/// Write the `egress.flagged` record of a DNS query name that carries a secret a
/// detector only reports, answered as its policy says (docs/reference/dlp.md):
/// `refusal` is the refusal it would otherwise have been (`secret_detected`, its name
/// `[redacted]`). Counted in the detectors' metric; the query itself is counted by its
/// listener.
pub(crate) async fn audit_flagged_query(state: &State, client: &Client, refusal: &Refusal) {
    if let Some(hit) = refusal.dlp.as_deref() {
        state.metrics.dlp_match(&hit.id, "report");
    }
    let rec = refusal_record(client, refusal, "egress.flagged", None);
    state.audit.write(rec).await;
}

/// Write the `egress.flagged` record of a secret reported in a tunnel's server name or
/// first bytes ([`audit_flagged`]), unless it is the server name of a tunnel whose
/// target, the same name, was flagged already: one name, one record.
pub(crate) fn audit_flagged_first(state: &State, client: &Client, approved: &Approved, hit: Hit) {
    if hit.found_in == FoundIn::Sni && approved.flagged == Some(FoundIn::Target) {
        return;
    }
    audit_flagged(state, client, approved, hit, None);
}

/// Write the audit record of an allowed connection (only with `--audit-allowed`). It is
/// written when the request or tunnel ends, from code that cannot wait, so it never
/// waits for room in the queue (and is never dropped). Without `--audit-allowed`, a
/// proxy that exports traces still makes it, for its span alone
/// (docs/reference/opentelemetry.md, "Traces").
pub(crate) fn audit_allowed(
    state: &State,
    client: &Client,
    approved: &Approved,
    dialed: Option<SocketAddr>,
    url: Option<String>,
    bytes: (u64, u64),
) {
    if !state.audit_allowed && !state.traced {
        return;
    }
    let rec = approved_record("egress.allowed", client, approved, dialed, url, Some(bytes));
    match state.audit_allowed {
        true => state.audit.write_detached(rec),
        false => state.audit.export_unwritten(rec),
    }
}

/// The span of an allowed query to the DNS listener (docs/reference/opentelemetry.md,
/// "Traces"): its record, made for the span alone and never written (an allowed query
/// is not in the audit log, whatever `--audit-allowed` says).
pub(crate) fn trace_allowed_query(
    state: &State,
    client: &Client,
    target: &Target,
    decision: &Decision,
) {
    let mut rec = record("egress.allowed", client, target.host.to_string(), None);
    rec.rule = decision.rule.as_deref().map(str::to_owned);
    rec.policy_level = Some(decision.level.as_str());
    rec.shared_hosting = decision.shared_hosting;
    state.audit.export_unwritten(rec);
}

/// The record of `event` for an approved request: its destination, decision, session,
/// the address dialed and, when given, the bytes each way.
fn approved_record(
    event: &'static str,
    client: &Client,
    approved: &Approved,
    dialed: Option<SocketAddr>,
    url: Option<String>,
    bytes: Option<(u64, u64)>,
) -> Record {
    let target = &approved.target;
    // A secret let through (`[dlp] action = "report"`): never its URL, nor a name that
    // carried it (docs/reference/dlp.md).
    let (host, url) = match approved.flagged {
        Some(FoundIn::Target | FoundIn::Dns | FoundIn::Sni) => (REDACTED.to_string(), None),
        Some(_) => (target.host.to_string(), None),
        None => (target.host.to_string(), url),
    };
    let mut rec = record(event, client, host, Some(target.port));
    set_url(&mut rec, url);
    rec.session = approved.session.as_ref().map(|s| s.id.clone());
    rec.rule = approved.decision.rule.as_deref().map(str::to_owned);
    rec.policy_level = Some(approved.decision.level.as_str());
    rec.shared_hosting = approved.decision.shared_hosting;
    rec.resolved_ip = dialed.map(|d| d.ip().to_string());
    rec.bytes_up = bytes.map(|b| b.0);
    rec.bytes_down = bytes.map(|b| b.1);
    rec.intercepted = matches!(approved.judged, Judged::Intercept);
    rec
}

/// A WebSocket's record when it opens (`websocket.opened`, no bytes) or closes
/// (`websocket.closed`, the bytes each way), whatever `--audit-allowed` says
/// (docs/reference/audit-log.md). Written from code that cannot wait, as
/// [`audit_allowed`].
pub(crate) fn audit_websocket(
    state: &State,
    client: &Client,
    approved: &Approved,
    event: &'static str,
    dialed: Option<SocketAddr>,
    url: Option<String>,
    bytes: Option<(u64, u64)>,
) {
    let rec = approved_record(event, client, approved, dialed, url, bytes);
    state.audit.write_detached(rec);
}

/// The record of a held request's approval when it ends (docs/reference/approvals.md):
/// `approval.allowed`, `approval.denied` or `approval.expired`, with the approval's id
/// and how it was decided. A refused request writes its `egress.denied` too.
pub(crate) async fn audit_approval(
    state: &State,
    client: &Client,
    pending: &Pending,
    outcome: ApprovalOutcome,
    refused: Option<&Refusal>,
) {
    let asked = &pending.asked;
    // An allow the policies in force refused is a denial, with their reason.
    let event = match refused {
        Some(_) if outcome.allows() => ApprovalOutcome::Deny.event(),
        _ => outcome.event(),
    };
    let mut rec = record(event, client, asked.host.clone(), Some(asked.port));
    rec.session = pending.session.as_ref().map(|s| s.id.clone());
    match refused {
        None => {
            rec.rule = Some(asked.entry.clone());
            rec.policy_level = Some(Level::Request.as_str());
        }
        Some(refusal) => {
            rec.reason = Some(refusal.reason.as_str());
            rec.policy_level = refusal.level.map(Level::as_str);
            rec.rule = refusal.rule.as_deref().map(str::to_owned);
        }
    }
    rec.approval_id = Some(pending.id.clone());
    rec.decision = Some(outcome.as_str());
    state.audit.write(rec).await;
}

/// The one record of an allowed request or tunnel that the upload budget cut short
/// (`refusal` says which budget): an `egress.denied` record with the bytes it carried,
/// written instead of its allowed record, whatever `--audit-allowed` says. Written from
/// code that cannot wait, as [`audit_allowed`].
pub(crate) fn audit_cut(
    state: &State,
    client: &Client,
    refusal: &Refusal,
    url: Option<String>,
    bytes: (u64, u64),
) {
    count(state, client, Outcome::Denied(refusal.reason));
    count_secret(state, refusal);
    let mut rec = refusal_record(client, refusal, "egress.denied", url);
    rec.bytes_up = Some(bytes.0);
    rec.bytes_down = Some(bytes.1);
    state.audit.write_detached(rec);
}

fn refusal_record(
    client: &Client,
    refusal: &Refusal,
    event: &'static str,
    url: Option<String>,
) -> Record {
    // A DNS query names no port.
    let port = (client.asked != Asked::Dns).then_some(refusal.port);
    let mut rec = record(event, client, refusal.host.clone(), port);
    // A request that carried a secret: its URL may hold it, or the bytes around it.
    let url = url.filter(|_| refusal.dlp.is_none());
    set_url(&mut rec, url);
    rec.dlp = refusal.dlp.as_deref().cloned();
    rec.session = refusal.session.clone();
    rec.reason = Some(refusal.reason.as_str());
    rec.rule = refusal.rule.as_deref().map(str::to_owned);
    rec.policy_level = refusal.level.map(Level::as_str);
    rec.shared_hosting = refusal.shared_hosting;
    rec.resolved_ip = refusal.resolved_ip.map(|ip| ip.to_string());
    rec
}

fn record(event: &'static str, client: &Client, host: String, port: Option<u16>) -> Record {
    let mut rec = Record::new(
        event,
        client.request_id.to_string(),
        client.addr.to_string(),
        client.asked.method().to_string(),
        host,
        port,
    );
    rec.via = client.via;
    rec.trace = client.trace.as_deref().copied();
    rec
}

fn set_url(rec: &mut Record, url: Option<String>) {
    if let Some(u) = url {
        let (u, cut) = clip_url(&u);
        rec.url = Some(u);
        rec.url_truncated = cut;
    }
}
