//! Why a request stops before reaching upstream: a [`Refusal`] (a denial with its reason
//! and rule, audited and answered with the JSON body) or a [`Failure`] (an allowed
//! destination that could not be reached: 502/504, not a denial).

use std::net::IpAddr;
use std::sync::Arc;

use crate::dlp::{By, FoundIn, Hit};
use crate::net::dial::DialError;
use crate::policy::{Decision, Level, Reason, Target, Widening};
use crate::session::{AuthError, Session};

/// Which limit a `limit_exceeded` or oversized request ran into: the reasons are one
/// closed set, but the HTTP answer's status tells these apart (`crate::proxy::answer`'s
/// `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// Per client or per session (429).
    Rate,
    /// The proxy's connection limit (503).
    Connections,
    /// A request head over `--max-header-bytes` (431).
    HeadTooLarge,
}

/// What the record and the answer say of a name that carries a secret.
pub(crate) const REDACTED: &str = "[redacted]";

/// A request the proxy refuses: the reason (from the closed set of
/// docs/reference/answers.md) and what decided it.
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    pub reason: Reason,
    pub host: String,
    pub port: u16,
    pub rule: Option<Arc<str>>,
    pub level: Option<Level>,
    pub shared_hosting: bool,
    pub resolved_ip: Option<IpAddr>,
    /// A sentence for the client and the proxy's log (never for secrets).
    pub detail: Option<String>,
    /// The session the request ran under, for the audit record.
    pub session: Option<String>,
    pub(crate) limit: Option<Limit>,
    /// The canary (or detector) found, for the record's `dlp`: never the value.
    pub dlp: Option<Box<Hit>>,
}

impl Refusal {
    pub(crate) fn new(reason: Reason, host: String, port: u16) -> Refusal {
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
            limit: None,
            dlp: None,
        }
    }

    /// The refusal of a request that carries a canary or a secret (docs/reference/dlp.md):
    /// `exfiltration_detected` (a canary) or `secret_detected` (a detector) at level
    /// `dlp`. Found in the destination's name, the name is not repeated anywhere (the
    /// record's and the answer's `host` say `[redacted]`).
    pub(crate) fn exfiltration(hit: Hit, target: &Target) -> Refusal {
        let in_name = matches!(hit.found_in, FoundIn::Target | FoundIn::Dns | FoundIn::Sni);
        let host = match in_name {
            true => REDACTED.to_string(),
            false => target.host.to_string(),
        };
        let (reason, what) = match hit.by {
            By::Canary => (Reason::ExfiltrationDetected, "a canary"),
            By::Secret | By::Reported => (Reason::SecretDetected, "a secret"),
        };
        let mut refusal = Refusal::new(reason, host, target.port);
        refusal.level = Some(Level::Dlp);
        refusal.detail = Some(format!(
            "{what} ({}) was found in the request's {}",
            hit.id,
            hit.found_in.as_str()
        ));
        refusal.dlp = Some(Box::new(hit));
        refusal
    }

    /// A request that cannot be read as a proxy request at all.
    pub(crate) fn malformed(detail: impl Into<String>) -> Refusal {
        Refusal::new(Reason::InvalidRequest, String::new(), 0).with_detail(detail)
    }

    /// A request head larger than `--max-header-bytes`, or with too many headers.
    pub(crate) fn head_too_large(detail: String) -> Refusal {
        let mut refusal = Refusal::malformed(detail);
        refusal.limit = Some(Limit::HeadTooLarge);
        refusal
    }

    /// A limit hit: per client or session ([`Limit::Rate`]) or the connection limit.
    pub(crate) fn limit(limit: Limit, target: Option<&Target>) -> Refusal {
        let (host, port) = match target {
            Some(t) => (t.host.to_string(), t.port),
            None => (String::new(), 0),
        };
        let mut refusal = Refusal::new(Reason::LimitExceeded, host, port);
        refusal.limit = Some(limit);
        refusal
    }

    pub(crate) fn with_detail(mut self, detail: impl Into<String>) -> Refusal {
        self.detail = Some(detail.into());
        self
    }

    /// The refusal of a denying decision: its reason, rule and level.
    pub(crate) fn from_decision(d: &Decision, reason: Reason, target: &Target) -> Refusal {
        let mut refusal = Refusal::new(reason, target.host.to_string(), target.port);
        refusal.rule = d.rule.clone();
        refusal.level = Some(d.level);
        refusal.shared_hosting = d.shared_hosting;
        refusal
    }

    /// A request-level policy that asks for more than the levels above (`policy_widening`):
    /// the rule names every offending entry.
    pub(crate) fn widening(target: &Target, widening: &Widening, what: &str) -> Refusal {
        let mut refusal =
            Refusal::new(Reason::PolicyWidening, target.host.to_string(), target.port);
        refusal.rule = Some(Arc::from(widening.to_string()));
        refusal.with_detail(format!("{what}: {widening}"))
    }

    /// Credentials missing, malformed or not accepted (the order of judgement's step 2).
    pub(crate) fn auth_required(why: AuthError, target: &Target) -> Refusal {
        let reason = match why {
            AuthError::StoreUnavailable => Reason::SessionStoreUnavailable,
            _ => Reason::AuthRequired,
        };
        Refusal::new(reason, target.host.to_string(), target.port).with_detail(why.message())
    }

    pub(crate) fn in_session(mut self, session: &Option<Arc<Session>>) -> Refusal {
        self.session = session.as_ref().map(|s| s.id.clone());
        self
    }
}

/// An allowed destination that could not be reached: not a denial, not audited as one.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub status: u16,
    pub message: String,
    /// What a parent proxy said, when it is the one that failed (the body's `detail`).
    pub detail: Option<String>,
}

impl Failure {
    /// An allowed destination that did not accept the connection: 504 when the connect
    /// timed out, else 502.
    pub(crate) fn connect(target: &Target, timed_out: bool) -> Failure {
        let authority = target.host.authority(target.port);
        match timed_out {
            true => Failure {
                status: 504,
                message: format!("connecting to {authority} timed out"),
                detail: None,
            },
            false => Failure {
                status: 502,
                message: format!("cannot connect to {authority}"),
                detail: None,
            },
        }
    }

    /// An allowed destination that `e` says was not reached: 504 for a timeout, else
    /// 502; a parent proxy's failure (docs/reference/parent-proxy.md) names it, with
    /// what the parent said as the detail.
    pub(crate) fn dial(target: &Target, e: &DialError) -> Failure {
        match e {
            DialError::Parent(said) => Failure {
                status: 502,
                message: format!(
                    "cannot reach {} through the parent proxy",
                    target.host.authority(target.port)
                ),
                detail: Some(said.clone()),
            },
            e => Failure::connect(target, matches!(e, DialError::Timeout)),
        }
    }
}

/// Why a request stops before reaching upstream.
#[derive(Debug, Clone)]
pub(crate) enum Stop {
    Denied(Refusal),
    Failed(Failure),
}

impl From<Refusal> for Stop {
    fn from(r: Refusal) -> Stop {
        Stop::Denied(r)
    }
}
