//! The judgement of one request, in the SPEC's order: target, credentials (a session),
//! request-level policies, organization and request decisions, then (for allowed names only) resolving and the
//! address check. Ends in addresses the proxy may dial, or in a refusal. Also writes the
//! audit records, so every path that refuses goes through one place.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use hyper::{Method, Request, StatusCode};

use crate::audit::{clip_url, now_rfc3339, Record};
use crate::metrics::Outcome;
use crate::net::dial::CheckedAddr;
use crate::policy::{
    check_address, check_narrowing, decide, Decision, Effective, Host, Level, Reason,
    RequestPolicy, Target, Verdict, Widening,
};

use crate::session::{AuthError, Session};

use super::{request, Client, Policies, State};

/// A request the proxy refuses: the reason (SPEC 6's closed set) and what decided it.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub reason: Reason,
    pub host: String,
    pub port: u16,
    pub rule: Option<String>,
    pub level: Option<Level>,
    pub shared_hosting: bool,
    pub resolved_ip: Option<IpAddr>,
    /// A sentence for the client and the proxy's log (never for secrets).
    pub detail: Option<String>,
    /// The session the request ran under, for the audit record.
    pub session: Option<String>,
}

impl Refusal {
    pub fn new(reason: Reason, host: String, port: u16) -> Refusal {
        let level = match reason {
            Reason::InvalidPolicy | Reason::PolicyWidening => Some(Level::Request),
            _ => None,
        };
        Refusal {
            reason,
            host,
            port,
            rule: None,
            level,
            shared_hosting: false,
            resolved_ip: None,
            detail: None,
            session: None,
        }
    }

    /// A request that cannot be read as a proxy request at all.
    pub fn malformed(detail: impl Into<String>) -> Refusal {
        Refusal::new(Reason::InvalidRequest, String::new(), 0).with_detail(detail)
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Refusal {
        self.detail = Some(detail.into());
        self
    }

    fn from_decision(d: &Decision, target: &Target) -> Refusal {
        Refusal {
            reason: d.reason.unwrap_or(Reason::NotInOrgAllowlist),
            host: target.host.to_string(),
            port: target.port,
            rule: d.rule.as_deref().map(str::to_owned),
            level: Some(d.level),
            shared_hosting: d.shared_hosting,
            resolved_ip: None,
            detail: None,
            session: None,
        }
    }

    /// A request-level policy that asks for more than the levels above (`policy_widening`):
    /// the rule names every offending entry.
    fn widening(target: &Target, widening: &Widening, what: &str) -> Refusal {
        let mut refusal =
            Refusal::new(Reason::PolicyWidening, target.host.to_string(), target.port);
        refusal.rule = Some(widening.to_string());
        refusal.with_detail(format!("{what}: {widening}"))
    }

    /// Credentials missing, malformed or not accepted (SPEC 10 step 2).
    pub fn auth_required(why: AuthError, target: &Target) -> Refusal {
        Refusal::new(Reason::AuthRequired, target.host.to_string(), target.port)
            .with_detail(why.message())
    }

    pub fn in_session(mut self, session: &Option<Arc<Session>>) -> Refusal {
        self.session = session.as_ref().map(|s| s.id.clone());
        self
    }

    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.reason.status()).unwrap_or(StatusCode::FORBIDDEN)
    }
}

/// An allowed destination that could not be reached: not a denial, not audited as one.
#[derive(Debug, Clone)]
pub struct Failure {
    pub status: StatusCode,
    pub message: String,
}

impl Failure {
    /// An allowed destination that did not accept the connection: 504 when the connect
    /// timed out, else 502.
    pub fn connect(target: &Target, timed_out: bool) -> Failure {
        let authority = target.host.authority(target.port);
        match timed_out {
            true => Failure {
                status: StatusCode::GATEWAY_TIMEOUT,
                message: format!("connecting to {authority} timed out"),
            },
            false => Failure {
                status: StatusCode::BAD_GATEWAY,
                message: format!("cannot connect to {authority}"),
            },
        }
    }
}

/// Why a request stops before reaching upstream.
#[derive(Debug, Clone)]
pub enum Stop {
    Denied(Refusal),
    Failed(Failure),
}

impl From<Refusal> for Stop {
    fn from(r: Refusal) -> Stop {
        Stop::Denied(r)
    }
}

/// A request the policy allowed, with the addresses that passed the address check.
#[derive(Debug)]
pub struct Approved {
    pub target: Target,
    pub addrs: Vec<CheckedAddr>,
    pub decision: Decision,
    /// The session the request runs under: its tunnels close when it ends.
    pub session: Option<Arc<Session>>,
    /// When the request was allowed, for the decision-to-first-byte latency.
    pub decided_at: Instant,
}

/// Judge `req`: Ok with the approved addresses, or why it stops.
pub async fn judge<B>(req: &Request<B>, state: &State, client: &Client) -> Result<Approved, Stop> {
    let target = request::target(req)?;
    let policies = state.policies();
    let session = credentials(req, state, &target)?;
    let tag = |r: Refusal| r.in_session(&session);
    let header = request::header_policy(req.headers(), &target).map_err(tag)?;
    let mut levels = base_levels(&policies, session.as_deref());
    if let Some(widening) = &policies.widening {
        let what = "the proxy's --policy widens the reloaded organization policy";
        return Err(tag(Refusal::widening(&target, widening, what)).into());
    }
    if let Some(narrower) = &header {
        if let Err(widening) = check_narrowing(&policies.org, &levels, narrower) {
            let what = "X-Network-Policy widens the policy";
            return Err(tag(Refusal::widening(&target, &widening, what)).into());
        }
        levels.push(narrower);
    }
    let eff = Effective {
        org: &policies.org,
        levels: &levels,
    };
    let decision = decide(&eff, &target);
    match decision.verdict {
        Verdict::Deny => return Err(tag(Refusal::from_decision(&decision, &target)).into()),
        Verdict::WouldDeny => {
            let would = tag(Refusal::from_decision(&decision, &target));
            write(state, client, &would, "egress.would_deny", plain_url(req));
        }
        Verdict::Allow => {}
    }
    let ips = match &target.host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(name) => {
            state.metrics.dns_lookups.inc();
            state.resolver.resolve(name.as_str()).await.map_err(|e| {
                state.metrics.dns_failures.inc();
                Stop::Failed(Failure {
                    status: StatusCode::BAD_GATEWAY,
                    message: format!("cannot resolve {name}: {e}"),
                })
            })?
        }
    };
    let mut addrs = Vec::with_capacity(ips.len());
    let mut refused = None;
    for ip in ips {
        let verdict = check_address(&eff, ip, &state.own, target.port);
        if verdict.verdict == Verdict::Allow {
            addrs.push(CheckedAddr::new_checked(SocketAddr::new(ip, target.port)));
        } else if refused.is_none() {
            refused = Some((verdict, ip));
        }
    }
    if addrs.is_empty() {
        let (verdict, ip) = refused.expect("a lookup that succeeded returned at least one address");
        let mut refusal = Refusal::from_decision(&verdict, &target);
        refusal.shared_hosting = decision.shared_hosting;
        refusal.resolved_ip = Some(ip);
        return Err(tag(refusal).into());
    }
    Ok(Approved {
        target,
        addrs,
        decision,
        session,
        decided_at: Instant::now(),
    })
}

/// Step 2: the session named by `Proxy-Authorization`, if any. Wrong credentials are
/// refused even when sessions are optional: a client that offers them expects them used.
/// A proxy without the admin API has no sessions and leaves the header unjudged.
fn credentials<B>(
    req: &Request<B>,
    state: &State,
    target: &Target,
) -> Result<Option<Arc<Session>>, Refusal> {
    if !state.sessions_enabled {
        return Ok(None);
    }
    match state.sessions.authenticate(req.headers()) {
        Ok(None) if state.require_session => {
            Err(Refusal::auth_required(AuthError::Missing, target))
        }
        Ok(found) => Ok(found),
        Err(why) => Err(Refusal::auth_required(why, target)),
    }
}

/// The request levels above the header (SPEC 10 "The levels"): `--policy` if given, then
/// the session's policy; with neither, the organization's default.
fn base_levels<'a>(policies: &'a Policies, session: Option<&'a Session>) -> Vec<&'a RequestPolicy> {
    match session {
        Some(s) => policies.proxy.iter().chain([&s.policy]).collect(),
        None => vec![&policies.policy],
    }
}

/// Count a judged request (plain HTTP) or connection (`CONNECT`, or refused before a
/// method was read) in the metrics.
pub fn count(state: &State, client: &Client, outcome: Outcome) {
    if client.method.is_empty() || client.method == "CONNECT" {
        state.metrics.connection(outcome);
    } else {
        state.metrics.request(outcome);
    }
}

/// The URL of a plain-HTTP request, for the audit record; `None` for `CONNECT`.
pub fn plain_url<B>(req: &Request<B>) -> Option<String> {
    (req.method() != Method::CONNECT).then(|| req.uri().to_string())
}

/// Write the audit record of a refusal.
pub fn audit_refusal(state: &State, client: &Client, refusal: &Refusal, url: Option<String>) {
    count(state, client, Outcome::Denied(refusal.reason));
    write(state, client, refusal, "egress.denied", url);
}

fn write(
    state: &State,
    client: &Client,
    refusal: &Refusal,
    event: &'static str,
    url: Option<String>,
) {
    let (url, url_truncated) = clip(url);
    state.audit.write(Record {
        ts: now_rfc3339(),
        event,
        request_id: client.request_id.clone(),
        session: refusal.session.clone(),
        client: client.addr.to_string(),
        method: client.method.clone(),
        host: refusal.host.clone(),
        port: refusal.port,
        url,
        url_truncated,
        reason: Some(refusal.reason.as_str()),
        rule: refusal.rule.clone(),
        policy_level: refusal.level.map(Level::as_str),
        shared_hosting: refusal.shared_hosting,
        resolved_ip: refusal.resolved_ip.map(|ip| ip.to_string()),
        bytes_up: None,
        bytes_down: None,
    });
}

/// Write the audit record of an allowed connection (only with `--audit-allowed`).
pub fn audit_allowed(
    state: &State,
    client: &Client,
    approved: &Approved,
    dialed: SocketAddr,
    url: Option<String>,
    bytes: (u64, u64),
) {
    if !state.audit_allowed {
        return;
    }
    let (url, url_truncated) = clip(url);
    state.audit.write(Record {
        ts: now_rfc3339(),
        event: "egress.allowed",
        request_id: client.request_id.clone(),
        session: approved.session.as_ref().map(|s| s.id.clone()),
        client: client.addr.to_string(),
        method: client.method.clone(),
        host: approved.target.host.to_string(),
        port: approved.target.port,
        url,
        url_truncated,
        reason: None,
        rule: approved.decision.rule.as_deref().map(str::to_owned),
        policy_level: Some(approved.decision.level.as_str()),
        shared_hosting: approved.decision.shared_hosting,
        resolved_ip: Some(dialed.ip().to_string()),
        bytes_up: Some(bytes.0),
        bytes_down: Some(bytes.1),
    });
}

fn clip(url: Option<String>) -> (Option<String>, bool) {
    match url {
        Some(u) => {
            let (u, cut) = clip_url(&u);
            (Some(u), cut)
        }
        None => (None, false),
    }
}
