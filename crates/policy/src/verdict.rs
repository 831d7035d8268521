//! What a decision is: a [`Verdict`] that carries its [`Reason`], the [`Level`] that
//! decided, and the rule, in a [`Decision`] that the answer, the audit record, `check` and
//! `lint` all read.

use std::sync::Arc;

use serde::Serialize;

/// What was decided, carrying the reason of every verdict but an allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Let through.
    Allow,
    /// Refused, for this reason.
    Deny(Reason),
    /// Report mode relaxed an allowlist denial: allowed, logged as `would_deny`.
    WouldDeny(Reason),
}

/// A verdict without its reason: how outputs (`check`'s `"verdict"`) spell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// [`Verdict::Allow`].
    Allow,
    /// [`Verdict::Deny`].
    Deny,
    /// [`Verdict::WouldDeny`].
    WouldDeny,
}

impl VerdictKind {
    /// The kind as outputs spell it (`allow`, `deny`, `would_deny`).
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictKind::Allow => "allow",
            VerdictKind::Deny => "deny",
            VerdictKind::WouldDeny => "would_deny",
        }
    }
}

impl Verdict {
    /// The verdict without its reason.
    pub fn kind(self) -> VerdictKind {
        match self {
            Verdict::Allow => VerdictKind::Allow,
            Verdict::Deny(_) => VerdictKind::Deny,
            Verdict::WouldDeny(_) => VerdictKind::WouldDeny,
        }
    }

    /// The reason of a denial or a would-be denial; `None` for an allow.
    pub fn reason(self) -> Option<Reason> {
        match self {
            Verdict::Allow => None,
            Verdict::Deny(r) | Verdict::WouldDeny(r) => Some(r),
        }
    }
}

/// Why a request was refused: the closed set of docs/reference/answers.md, "Reasons".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// No organization entry matches the host (or no organization CIDR covers a literal IP).
    NotInOrgAllowlist,
    /// The organization allows it, a request level does not.
    NotInRequestPolicy,
    /// A request level is `{"type": "disabled"}`.
    NetworkDisabled,
    /// An organization `denied_domains` entry matches.
    DeniedDomain,
    /// An entry matches the host, but not on this port.
    PortNotAllowed,
    /// The name is on shared hosting and `[shared_hosting] action = "deny"`.
    SharedHosting,
    /// The address is in a refused class, no CIDR opens it, or it is the proxy's own.
    PrivateAddress,
    /// A request policy asks for more than the levels above allow.
    PolicyWidening,
    /// The target's host does not survive normalisation.
    InvalidHost,
    /// Not a proxy request the proxy judges (framing, scheme, a path that does not normalise ...).
    InvalidRequest,
    /// An `X-Network-Policy` header that does not parse, or two of them.
    InvalidPolicy,
    /// A `Host` header names another authority than the request target.
    HostMismatch,
    /// A tunnel's first bytes break the `CONNECT` host or `[tunnels]`.
    SniMismatch,
    /// Session credentials missing, malformed or not accepted.
    AuthRequired,
    /// Too many tunnels for one client or session, or the connection limit.
    LimitExceeded,
    /// The audit log cannot be written: nothing is let through unrecorded.
    AuditUnavailable,
    /// The entries matching host and port allow other methods
    /// (docs/reference/policy-files.md, "Entries with rules").
    MethodNotAllowed,
    /// The entries allowing the method allow other paths (docs/reference/policy-files.md,
    /// "Entries with rules").
    PathNotAllowed,
    /// The upload budget (`[limits] upload_bytes`, `max_upload_bytes`) is spent.
    UploadBudgetExceeded,
    /// The session store cannot be reached: credentials cannot be checked.
    SessionStoreUnavailable,
    /// A canary was found in what the request would send (docs/reference/dlp.md).
    ExfiltrationDetected,
    /// A secret detector matched what the request would send (docs/reference/dlp.md).
    SecretDetected,
}

impl Reason {
    /// Every reason, in the order of docs/reference/answers.md.
    pub const ALL: [Reason; 22] = [
        Reason::NotInOrgAllowlist,
        Reason::NotInRequestPolicy,
        Reason::NetworkDisabled,
        Reason::DeniedDomain,
        Reason::PortNotAllowed,
        Reason::SharedHosting,
        Reason::PrivateAddress,
        Reason::PolicyWidening,
        Reason::InvalidHost,
        Reason::InvalidRequest,
        Reason::InvalidPolicy,
        Reason::HostMismatch,
        Reason::SniMismatch,
        Reason::AuthRequired,
        Reason::LimitExceeded,
        Reason::AuditUnavailable,
        Reason::MethodNotAllowed,
        Reason::PathNotAllowed,
        Reason::UploadBudgetExceeded,
        Reason::SessionStoreUnavailable,
        Reason::ExfiltrationDetected,
        Reason::SecretDetected,
    ];

    /// The reason as the answer, the audit log and the metrics spell it
    /// (`not_in_org_allowlist` ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotInOrgAllowlist => "not_in_org_allowlist",
            Reason::NotInRequestPolicy => "not_in_request_policy",
            Reason::NetworkDisabled => "network_disabled",
            Reason::DeniedDomain => "denied_domain",
            Reason::PortNotAllowed => "port_not_allowed",
            Reason::SharedHosting => "shared_hosting",
            Reason::PrivateAddress => "private_address",
            Reason::PolicyWidening => "policy_widening",
            Reason::InvalidHost => "invalid_host",
            Reason::InvalidRequest => "invalid_request",
            Reason::InvalidPolicy => "invalid_policy",
            Reason::HostMismatch => "host_mismatch",
            Reason::SniMismatch => "sni_mismatch",
            Reason::AuthRequired => "auth_required",
            Reason::LimitExceeded => "limit_exceeded",
            Reason::AuditUnavailable => "audit_unavailable",
            Reason::MethodNotAllowed => "method_not_allowed",
            Reason::PathNotAllowed => "path_not_allowed",
            Reason::UploadBudgetExceeded => "upload_budget_exceeded",
            Reason::SessionStoreUnavailable => "session_store_unavailable",
            Reason::ExfiltrationDetected => "exfiltration_detected",
            Reason::SecretDetected => "secret_detected",
        }
    }

    /// The HTTP status of a refusal for this reason.
    pub fn status(self) -> u16 {
        match self {
            Reason::InvalidRequest | Reason::InvalidHost | Reason::InvalidPolicy => 400,
            Reason::AuthRequired => 407,
            Reason::LimitExceeded => 429,
            Reason::AuditUnavailable | Reason::SessionStoreUnavailable => 503,
            _ => 403,
        }
    }

    /// Report mode relaxes only allowlist decisions.
    pub fn relaxed_in_report_mode(self) -> bool {
        matches!(
            self,
            Reason::DeniedDomain
                | Reason::NotInOrgAllowlist
                | Reason::NotInRequestPolicy
                | Reason::NetworkDisabled
                | Reason::PortNotAllowed
                | Reason::SharedHosting
                | Reason::MethodNotAllowed
                | Reason::PathNotAllowed
        )
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which level decided: the audit record's `policy_level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// The organization policy.
    Org,
    /// A request level.
    Request,
    /// The address check, after resolving.
    Address,
    /// The canaries and secret detectors (docs/reference/dlp.md).
    Dlp,
}

impl Level {
    /// The level as the audit record spells it (`org`, `request`, `address`, `dlp`).
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Org => "org",
            Level::Request => "request",
            Level::Address => "address",
            Level::Dlp => "dlp",
        }
    }
}

/// A decision and why: read by the answer, the audit record, `check` and `lint`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// What was decided, with its reason.
    pub verdict: Verdict,
    /// The entry that decided (the org allow entry for an allow), as written. Shared with
    /// the compiled entry, so deciding does not allocate.
    pub rule: Option<Arc<str>>,
    /// The level that decided.
    pub level: Level,
    /// Whether the name is on shared hosting (allowed under `action = "flag"`, and so
    /// marked in the audit record).
    pub shared_hosting: bool,
}

impl Decision {
    /// Allow or WouldDeny.
    pub fn is_allowed(&self) -> bool {
        matches!(self.verdict, Verdict::Allow | Verdict::WouldDeny(_))
    }

    /// The reason of a denial or a would-be denial; `None` for an allow.
    pub fn reason(&self) -> Option<Reason> {
        self.verdict.reason()
    }

    /// A denial for `reason` by `level`, naming `rule` when one decided.
    pub fn deny(reason: Reason, level: Level, rule: Option<Arc<str>>) -> Decision {
        Decision {
            verdict: Verdict::Deny(reason),
            rule,
            level,
            shared_hosting: false,
        }
    }

    pub(super) fn allow(level: Level, rule: Option<Arc<str>>) -> Decision {
        Decision {
            verdict: Verdict::Allow,
            rule,
            level,
            shared_hosting: false,
        }
    }
}
