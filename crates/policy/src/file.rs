//! The shapes of the policy files: the keys each table has, the names its enumerated
//! values take, and the defaults of what may be left out.
//!
//! Defined once here: [`super::compile`] reads files with them, and `lint` names them
//! in its messages. Nothing here reads text.

use serde::Deserialize;

/// The only `version` there is.
pub const VERSION: i64 = 1;

/// `allowed_ports` when the organization file does not set it.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// The keys of the organization file's top level, in the order the compiler takes them.
pub const ORG_KEYS: [&str; 14] = [
    "version",
    "name",
    "mode",
    "allowed_domains",
    "denied_domains",
    "allowed_ports",
    "allowed_cidrs",
    "default_network_policy",
    "shared_hosting",
    "tunnels",
    "credentials",
    "limits",
    "canaries",
    "dlp",
];

/// The keys of one `[[credentials]]` table.
pub const CREDENTIAL_KEYS: [&str; 3] = ["host", "header", "value_file"];

/// The keys of `[shared_hosting]`.
pub const SHARED_HOSTING_KEYS: [&str; 2] = ["action", "extra_domains"];

/// The keys of `[tunnels]`.
pub const TUNNELS_KEYS: [&str; 2] = ["require_tls", "require_sni"];

/// The keys of `[canaries]` (docs/reference/dlp.md).
pub const CANARIES_KEYS: [&str; 2] = ["values_file", "on_trip"];

/// The keys of `[dlp]` and of a request policy's `"dlp"` (docs/reference/dlp.md).
pub const DLP_KEYS: [&str; 3] = ["detectors", "action", "patterns"];

/// The keys of one `[[dlp.patterns]]` table.
pub const DLP_PATTERN_KEYS: [&str; 2] = ["name", "regex"];

/// The keys of `[limits]`.
pub const LIMITS_KEYS: [&str; 1] = ["upload_bytes"];

/// The keys of a request policy (a JSON file, or the inline `default_network_policy`).
pub const POLICY_KEYS: [&str; 5] = [
    "type",
    "allowed_domains",
    "allowed_cidrs",
    "max_upload_bytes",
    "dlp",
];

/// The keys of a request policy of `"type": "disabled"`: nothing but the type.
pub const DISABLED_KEYS: [&str; 1] = ["type"];

/// The keys of an `allowed_domains` entry written as a table
/// (docs/reference/policy-files.md, "Entries with rules").
pub const ENTRY_KEYS: [&str; 5] = ["host", "methods", "paths", "access", "inspect"];

/// An entry's `access`: the only value there is, a name for `GET`, `HEAD`, `OPTIONS`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
pub(crate) enum RawAccess {
    #[serde(rename = "read-only")]
    ReadOnly,
}

/// `mode`. The variant names (and serde's "unknown variant" message) come from here.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawMode {
    Enforce,
    Report,
}

/// `[canaries] on_trip`: what a tripped canary does besides refusing.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum RawOnTrip {
    EndSession,
    Refuse,
}

/// `[shared_hosting] action`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawSharedHostingAction {
    Flag,
    Deny,
}

/// A request policy's `type`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawPolicyType {
    Disabled,
    Allowlist,
}
