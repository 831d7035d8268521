//! The lint rules: stable ids (never renamed: CI configurations and SARIF consumers key
//! on them), default severities and descriptions.

use std::fmt;

use serde::{Serialize, Serializer};

use super::Severity;
use Severity::{Error, Info, Warning};

#[derive(Clone, Copy, Debug)]
pub struct Rule {
    pub id: RuleId,
    pub severity: Severity,
    /// One line, for listings.
    pub short: &'static str,
    /// What the rule catches and why it matters.
    pub full: &'static str,
}

/// A rule's stable id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleId {
    ParseError,
    UnknownKey,
    InvalidPattern,
    WildcardPublicSuffix,
    SharedHosting,
    WidensOrgPolicy,
    RedundantEntry,
    DuplicateEntry,
    AllowDenyConflict,
    PrivateCidr,
    NotNormalized,
    MixedScript,
    CredentialPlainHttp,
    CanariesBlind,
    DlpPatternUnbounded,
}

impl RuleId {
    /// Every rule, in the order of [`RULES`].
    pub const ALL: [RuleId; 15] = [
        RuleId::ParseError,
        RuleId::UnknownKey,
        RuleId::InvalidPattern,
        RuleId::WildcardPublicSuffix,
        RuleId::SharedHosting,
        RuleId::WidensOrgPolicy,
        RuleId::RedundantEntry,
        RuleId::DuplicateEntry,
        RuleId::AllowDenyConflict,
        RuleId::PrivateCidr,
        RuleId::NotNormalized,
        RuleId::MixedScript,
        RuleId::CredentialPlainHttp,
        RuleId::CanariesBlind,
        RuleId::DlpPatternUnbounded,
    ];

    /// The id as CI configurations and SARIF consumers see it.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleId::ParseError => "parse-error",
            RuleId::UnknownKey => "unknown-key",
            RuleId::InvalidPattern => "invalid-pattern",
            RuleId::WildcardPublicSuffix => "wildcard-public-suffix",
            RuleId::SharedHosting => "shared-hosting",
            RuleId::WidensOrgPolicy => "widens-org-policy",
            RuleId::RedundantEntry => "redundant-entry",
            RuleId::DuplicateEntry => "duplicate-entry",
            RuleId::AllowDenyConflict => "allow-deny-conflict",
            RuleId::PrivateCidr => "private-cidr",
            RuleId::NotNormalized => "not-normalized",
            RuleId::MixedScript => "mixed-script",
            RuleId::CredentialPlainHttp => "credential-plain-http",
            RuleId::CanariesBlind => "canaries-blind",
            RuleId::DlpPatternUnbounded => "dlp-pattern-unbounded",
        }
    }

    /// The rule's severity and descriptions.
    pub fn rule(self) -> &'static Rule {
        &RULES[self as usize]
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for RuleId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The rules, in the order of [`RuleId::ALL`]: [`RuleId::rule`] indexes it.
pub const RULES: [Rule; RuleId::ALL.len()] = [
    Rule {
        id: RuleId::ParseError,
        severity: Error,
        short: "The file does not load",
        full: "The file is not valid TOML or JSON, or does not have the shape of an organization or request policy (a missing `version` or `type`, a value of the wrong type). The proxy would refuse to start with it.",
    },
    Rule {
        id: RuleId::UnknownKey,
        severity: Error,
        short: "A key the policy format does not have",
        full: "Policy files refuse unknown keys so that a misspelt key (`allowed_domain`) is never silently ignored. The proxy would refuse to load this file.",
    },
    Rule {
        id: RuleId::InvalidPattern,
        severity: Error,
        short: "An entry that is not a valid destination pattern or CIDR",
        full: "Domain entries are `name`, `*.name`, either with `:PORT`; no scheme, path, user part or IP address (IPs go in `allowed_cidrs`). CIDRs are `address/prefix`. The proxy would refuse to load this file.",
    },
    Rule {
        id: RuleId::WildcardPublicSuffix,
        severity: Error,
        short: "A wildcard directly over a public suffix",
        full: "`*.com` or `*.co.uk` would allow everything registered under that suffix. Name a registrable domain below it. The proxy would refuse to load this file.",
    },
    Rule {
        id: RuleId::SharedHosting,
        severity: Warning,
        short: "An allowed name on shared hosting",
        full: "Names under a private-section Public Suffix List entry (`*.github.io`), request sinks (webhook, request-capture, tunnel and paste services) and `[shared_hosting] extra_domains` are places where anyone can run a server that logs what it receives: allowing them opens an exfiltration channel. An error when the organization sets `[shared_hosting] action = \"deny\"` (the entry can never allow anything), a warning otherwise.",
    },
    Rule {
        id: RuleId::WidensOrgPolicy,
        severity: Error,
        short: "A request policy entry the organization policy does not cover",
        full: "A request policy may only narrow the organization policy; one that names anything the organization does not allow is rejected as a whole by the proxy (403 policy_widening, or `serve --policy` refusing to start). Every offending entry is reported.",
    },
    Rule {
        id: RuleId::RedundantEntry,
        severity: Warning,
        short: "An entry covered by another entry of the same list",
        full: "Every host and port this entry matches is already matched by another entry of the same list, so it has no effect. Remove it, or narrow the wider entry if that was the intent.",
    },
    Rule {
        id: RuleId::DuplicateEntry,
        severity: Warning,
        short: "The same entry twice in one list",
        full: "The entry (after normalisation) appears earlier in the same list. Remove the repetition.",
    },
    Rule {
        id: RuleId::AllowDenyConflict,
        severity: Error,
        short: "An allowed entry wholly inside a denied one",
        full: "`denied_domains` wins over every allow, so an allowed entry entirely inside a denied entry never allows anything: one of the two is a mistake.",
    },
    Rule {
        id: RuleId::PrivateCidr,
        severity: Warning,
        short: "An allowed CIDR that opens private or metadata space",
        full: "An `allowed_cidrs` entry that overlaps loopback, private (RFC 1918, ULA), link-local (cloud metadata at 169.254.169.254), CGNAT or other special-purpose space lets sandboxed code reach internal services. Make sure that is intended and as narrow as possible.",
    },
    Rule {
        id: RuleId::NotNormalized,
        severity: Warning,
        short: "An entry not written in its normal form",
        full: "Names are compared in their normal form: lower case, no trailing dot, internationalised names in their ASCII (`xn--`) form. Writing the normal form makes reviews and diffs match what the proxy enforces.",
    },
    Rule {
        id: RuleId::MixedScript,
        severity: Warning,
        short: "An internationalised name that mixes scripts",
        full: "A label mixing scripts (Latin with Cyrillic or Greek letters, for example) is a classic homograph: it looks like a familiar name but is another one. Check that the name is the one intended.",
    },
    Rule {
        id: RuleId::CredentialPlainHttp,
        severity: Warning,
        short: "A credential's host allowed on a port that carries plain HTTP",
        full: "A `[[credentials]]` header is set only on requests forwarded over TLS, so it never crosses the network in cleartext. Its host is allowed here on a port other than 443, where the proxy forwards plain-HTTP requests (an absolute `http://` URL, or HTTP bytes to the transparent listener) as plain HTTP: those requests go without the credential. Allow the host on port 443 only, or accept that plain HTTP to it is unauthenticated.",
    },
    Rule {
        id: RuleId::CanariesBlind,
        severity: Info,
        short: "Canaries set, and a host allowed without inspection",
        full: "The organization sets canaries (`[canaries]`), and allows a host whose tunnels are not inspected: the bytes inside such a TLS tunnel cannot be read, so a canary sent through it is not seen (only its target name, server name and first bytes are read). Inspect the hosts a secret could leave through (`inspect = true`), or accept that those doors are blind.",
    },
    Rule {
        id: RuleId::DlpPatternUnbounded,
        severity: Error,
        short: "A secret pattern whose matches can be longer than 256 bytes",
        full: "A `[[dlp.patterns]]` regex (or a request policy's `\"dlp\"` pattern) whose matches can be longer than 256 bytes: an unbounded repetition (`+`, `*`, `{n,}`) or a bounded one too long. A body or a WebSocket message is scanned piece by piece, holding back at most 255 bytes between pieces, so a longer match could pass unseen; the proxy refuses to load the file. Bound every repetition (`[0-9]{6}`, `[A-Za-z0-9]{20,40}`).",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_follows_the_ids() {
        for (i, id) in RuleId::ALL.iter().enumerate() {
            assert_eq!(*id as usize, i, "{id}");
            assert_eq!(RULES[i].id, *id, "{id}");
        }
    }
}
