//! The lint rules: stable ids (never renamed: CI configurations and SARIF consumers key
//! on them), default severities and descriptions.

use super::Severity;

#[derive(Clone, Copy, Debug)]
pub struct Rule {
    pub id: &'static str,
    pub severity: Severity,
    /// One line, for listings.
    pub short: &'static str,
    /// What the rule catches and why it matters.
    pub full: &'static str,
}

use Severity::{Error, Warning};

pub const RULES: &[Rule] = &[
    Rule {
        id: "parse-error",
        severity: Error,
        short: "The file does not load",
        full: "The file is not valid TOML or JSON, or does not have the shape of an organization or request policy (a missing `version` or `type`, a value of the wrong type). The proxy would refuse to start with it.",
    },
    Rule {
        id: "unknown-key",
        severity: Error,
        short: "A key the policy format does not have",
        full: "Policy files refuse unknown keys so that a misspelt key (`allowed_domain`) is never silently ignored. The proxy would refuse to load this file.",
    },
    Rule {
        id: "invalid-pattern",
        severity: Error,
        short: "An entry that is not a valid destination pattern or CIDR",
        full: "Domain entries are `name`, `*.name`, either with `:PORT`; no scheme, path, user part or IP address (IPs go in `allowed_cidrs`). CIDRs are `address/prefix`. The proxy would refuse to load this file.",
    },
    Rule {
        id: "wildcard-public-suffix",
        severity: Error,
        short: "A wildcard directly over a public suffix",
        full: "`*.com` or `*.co.uk` would allow everything registered under that suffix. Name a registrable domain below it. The proxy would refuse to load this file.",
    },
    Rule {
        id: "shared-hosting",
        severity: Warning,
        short: "An allowed name on shared hosting",
        full: "Names under a private-section Public Suffix List entry (`*.github.io`), request sinks (webhook, request-capture, tunnel and paste services) and `[shared_hosting] extra_domains` are places where anyone can run a server that logs what it receives: allowing them opens an exfiltration channel. An error when the organization sets `[shared_hosting] action = \"deny\"` (the entry can never allow anything), a warning otherwise.",
    },
    Rule {
        id: "widens-org-policy",
        severity: Error,
        short: "A request policy entry the organization policy does not cover",
        full: "A request policy may only narrow the organization policy; one that names anything the organization does not allow is rejected as a whole by the proxy (403 policy_widening, or `serve --policy` refusing to start). Every offending entry is reported.",
    },
    Rule {
        id: "redundant-entry",
        severity: Warning,
        short: "An entry covered by another entry of the same list",
        full: "Every host and port this entry matches is already matched by another entry of the same list, so it has no effect. Remove it, or narrow the wider entry if that was the intent.",
    },
    Rule {
        id: "duplicate-entry",
        severity: Warning,
        short: "The same entry twice in one list",
        full: "The entry (after normalisation) appears earlier in the same list. Remove the repetition.",
    },
    Rule {
        id: "allow-deny-conflict",
        severity: Error,
        short: "An allowed entry wholly inside a denied one",
        full: "`denied_domains` wins over every allow, so an allowed entry entirely inside a denied entry never allows anything: one of the two is a mistake.",
    },
    Rule {
        id: "private-cidr",
        severity: Warning,
        short: "An allowed CIDR that opens private or metadata space",
        full: "An `allowed_cidrs` entry that overlaps loopback, private (RFC 1918, ULA), link-local (cloud metadata at 169.254.169.254), CGNAT or other special-purpose space lets sandboxed code reach internal services. Make sure that is intended and as narrow as possible.",
    },
    Rule {
        id: "not-normalized",
        severity: Warning,
        short: "An entry not written in its normal form",
        full: "Names are compared in their normal form: lower case, no trailing dot, internationalised names in their ASCII (`xn--`) form. Writing the normal form makes reviews and diffs match what the proxy enforces.",
    },
    Rule {
        id: "mixed-script",
        severity: Warning,
        short: "An internationalised name that mixes scripts",
        full: "A label mixing scripts (Latin with Cyrillic or Greek letters, for example) is a classic homograph: it looks like a familiar name but is another one. Check that the name is the one intended.",
    },
];

/// The rule with this id. Panics on an unknown id: ids are compile-time constants.
pub fn get(id: &str) -> &'static Rule {
    RULES
        .iter()
        .find(|r| r.id == id)
        .unwrap_or_else(|| panic!("unknown lint rule {id}"))
}
