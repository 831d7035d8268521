//! What `diff` reports: each [`Change`], its [`Effect`] and its [`Kind`] (a stable id,
//! the SARIF rule of a widening change).

use serde::{Serialize, Serializer};

/// What a change does to what the policy lets through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// NEW lets through something OLD did not.
    Widening,
    /// NEW lets through less.
    Narrowing,
    /// Listed, but lets through neither more nor less (a name, a marking).
    Neutral,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Widening => "widening",
            Effect::Narrowing => "narrowing",
            Effect::Neutral => "neutral",
        }
    }
}

/// The kind of a change: one per setting and direction. Ids never change (CI and SARIF
/// consumers key on them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    AllowAdded,
    AllowRemoved,
    DenyRemoved,
    DenyAdded,
    CidrAdded,
    CidrRemoved,
    PortsAdded,
    PortsRemoved,
    Mode,
    SharedHostingAction,
    SharedHostingDomains,
    Tunnels,
    PolicyType,
    Name,
    Budget,
    Inspection,
    Credentials,
}

/// A kind's id and what it means, for SARIF's rule table.
pub struct KindInfo {
    pub kind: Kind,
    pub id: &'static str,
    pub short: &'static str,
    pub full: &'static str,
}

impl Kind {
    pub fn info(self) -> &'static KindInfo {
        &KINDS[self as usize]
    }

    pub fn as_str(self) -> &'static str {
        self.info().id
    }
}

impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Every kind, in the order of [`Kind`]: [`Kind::info`] indexes it.
pub const KINDS: [KindInfo; 17] = [
    KindInfo {
        kind: Kind::AllowAdded,
        id: "allow-added",
        short: "An allowed destination the old policy did not cover",
        full: "An allowed_domains entry (or a port of one) that no entry of the old policy covered: the new policy lets through host:port pairs the old one refused.",
    },
    KindInfo {
        kind: Kind::AllowRemoved,
        id: "allow-removed",
        short: "An allowed destination the new policy no longer covers",
        full: "An allowed_domains entry of the old policy (or a port of one) that no entry of the new policy covers.",
    },
    KindInfo {
        kind: Kind::DenyRemoved,
        id: "deny-removed",
        short: "A denied destination the new policy no longer denies",
        full: "A denied_domains entry of the old policy that no entry of the new policy's denied_domains covers: what it refused may now be allowed by an allow entry.",
    },
    KindInfo {
        kind: Kind::DenyAdded,
        id: "deny-added",
        short: "A newly denied destination",
        full: "A denied_domains entry that no entry of the old policy's denied_domains covered.",
    },
    KindInfo {
        kind: Kind::CidrAdded,
        id: "cidr-added",
        short: "An address range the old policy did not allow",
        full: "An allowed_cidrs entry not within any entry of the old policy: literal IPs in it, and names resolving into it, may now be reached.",
    },
    KindInfo {
        kind: Kind::CidrRemoved,
        id: "cidr-removed",
        short: "An address range no longer allowed",
        full: "An allowed_cidrs entry of the old policy not within any entry of the new policy.",
    },
    KindInfo {
        kind: Kind::PortsAdded,
        id: "ports-added",
        short: "A port added to allowed_ports",
        full: "Every port-less allowed_domains entry (of the organization and of its default_network_policy) and every allowed_cidrs entry gains the added ports.",
    },
    KindInfo {
        kind: Kind::PortsRemoved,
        id: "ports-removed",
        short: "A port removed from allowed_ports",
        full: "Every port-less entry and every allowed_cidrs entry loses the removed ports.",
    },
    KindInfo {
        kind: Kind::Mode,
        id: "mode",
        short: "The enforcement mode changed",
        full: "From enforce to report, allowlist refusals are let through (logged as egress.would_deny); from report to enforce they are refused again.",
    },
    KindInfo {
        kind: Kind::SharedHostingAction,
        id: "shared-hosting-action",
        short: "The shared hosting action changed",
        full: "From deny to flag, allowed names on shared hosting (where anyone can run a server that logs what it receives) are let through again.",
    },
    KindInfo {
        kind: Kind::SharedHostingDomains,
        id: "shared-hosting-domains",
        short: "A change to [shared_hosting] extra_domains",
        full: "Names counted as shared hosting: under action = \"deny\", a removed name may be reached again; under \"flag\" the change only marks records and lint findings.",
    },
    KindInfo {
        kind: Kind::Tunnels,
        id: "tunnels",
        short: "A [tunnels] requirement turned off or on",
        full: "With require_tls or require_sni off, tunnels on those ports may carry any protocol (another proxy's CONNECT included) or TLS without a server name.",
    },
    KindInfo {
        kind: Kind::PolicyType,
        id: "policy-type",
        short: "A request policy opened or closed",
        full: "A request policy (or the organization's default_network_policy) from disabled to allowlist opens the network to its entries; from allowlist to disabled closes it.",
    },
    KindInfo {
        kind: Kind::Name,
        id: "name",
        short: "The policy's name changed",
        full: "The name lets through nothing; it is listed for the record.",
    },
    KindInfo {
        kind: Kind::Budget,
        id: "budget",
        short: "An upload budget raised, lowered, set or removed",
        full: "[limits] upload_bytes (organization) or max_upload_bytes (request policy): a larger budget, or none (no [limits] means no budget; no max_upload_bytes means the level above's), lets more bytes out.",
    },
    KindInfo {
        kind: Kind::Inspection,
        id: "inspection",
        short: "Inspection of a host turned on or off",
        full: "inspect = true (or methods, paths, access) makes the proxy terminate TLS for the host and judge each request inside. Listed: what it lets through is decided by the entry's methods and paths, compared as entries.",
    },
    KindInfo {
        kind: Kind::Credentials,
        id: "credentials",
        short: "A [[credentials]] header added, removed or changed",
        full: "A header the proxy sets on every request it forwards to the host, from a file the sandbox never sees. Listed for review: which host receives which secret.",
    },
];

/// One change between OLD and NEW.
#[derive(Clone, Debug, Serialize)]
pub struct Change {
    pub effect: Effect,
    pub kind: Kind,
    /// The key it is about: `allowed_domains`, `default_network_policy.allowed_cidrs`...
    pub setting: String,
    /// The entry, as written, when the change is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    pub message: String,
    /// The destination is on shared hosting.
    pub shared_hosting: bool,
    /// Where in NEW (1-based line and column; 1:1 for something NEW no longer has).
    pub line: usize,
    pub column: usize,
    /// The byte offset in NEW, resolved to `line`/`column` once all changes are known.
    #[serde(skip)]
    pub at: Option<usize>,
}

impl Change {
    pub fn new(effect: Effect, kind: Kind, setting: &str, message: String) -> Change {
        Change {
            effect,
            kind,
            setting: setting.to_string(),
            entry: None,
            message,
            shared_hosting: false,
            line: 1,
            column: 1,
            at: None,
        }
    }

    pub fn entry(mut self, entry: &str) -> Change {
        self.entry = Some(entry.to_string());
        self
    }

    pub fn at(mut self, at: Option<usize>) -> Change {
        self.at = at;
        self
    }

    pub fn shared(mut self, shared: bool) -> Change {
        self.shared_hosting = shared;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_table_follows_the_kinds() {
        for (i, info) in KINDS.iter().enumerate() {
            assert_eq!(info.kind as usize, i, "{}", info.id);
        }
    }
}
