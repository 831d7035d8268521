//! The compiled policies: the only policy types the proxy sees. [`compile`](crate::compile)
//! makes them (their fields are the crate's, so nothing else can); [`cover`](crate::cover),
//! [`decide()`](crate::decide()) and the rest read them. Here, below both, so that the
//! compiler may use the covering law (a `default_network_policy` that widens is a problem
//! of the organization file) without an import circle.

use std::path::PathBuf;
use std::sync::Arc;

use ipnet::IpNet;

use crate::dlp::{Dlp, DlpAction};
use crate::file::DEFAULT_PORTS;
use crate::host::HostName;

mod domain_set;

pub use domain_set::{DomainSet, Matching, NameProbe};

/// The organization's `mode` (docs/reference/policy-files.md, "Report mode").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Denials are denied (the default).
    Enforce,
    /// Allowlist denials are allowed and logged as `would_deny`.
    Report,
}

/// `[shared_hosting] action`: what a name on shared hosting gets
/// (docs/reference/policy-files.md, "Shared hosting").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedHostingAction {
    /// Allowed when the policies allow it, and marked in the audit log (the default).
    Flag,
    /// Refused (`shared_hosting`), whatever the policies allow.
    Deny,
}

/// The `[tunnels]` table, carried through as written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tunnels {
    pub(crate) require_tls: Option<bool>,
    pub(crate) require_sni: Option<bool>,
}

/// The validated organization policy.
#[derive(Clone, Debug)]
pub struct OrgPolicy {
    pub(crate) source: String,
    pub(crate) name: String,
    pub(crate) mode: Mode,
    pub(crate) allowed: DomainSet,
    pub(crate) denied: DomainSet,
    pub(crate) allowed_ports: Vec<u16>,
    pub(crate) allowed_cidrs: Vec<IpNet>,
    /// The text of each `allowed_cidrs` entry, in the same order: the rule of the
    /// decisions it makes, written once here rather than on every request.
    pub(crate) cidr_rules: Vec<Arc<str>>,
    pub(crate) default_policy: RequestPolicy,
    pub(crate) shared_hosting_action: SharedHostingAction,
    pub(crate) shared_hosting_extra: DomainSet,
    pub(crate) tunnels: Tunnels,
    /// `[[credentials]]`: headers set on requests to one host.
    pub(crate) credentials: Vec<CredentialRule>,
    /// `[limits] upload_bytes`: the bytes a session (or the proxy) may send upstream.
    pub(crate) upload_bytes: Option<u64>,
    /// `[canaries]`: the values' file, read by the loader, and what a trip does.
    pub(crate) canaries: Canaries,
    /// `[dlp]`: the secret detectors of every request, and what a match does.
    pub(crate) dlp: Dlp,
}

/// `[canaries]` (docs/reference/dlp.md): values planted in sandboxes that no legitimate
/// request sends. The values are read by the proxy's loader, never here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Canaries {
    /// `values_file`: one value a line.
    pub values_file: Option<PathBuf>,
    /// `on_trip`.
    pub on_trip: OnTrip,
}

/// What a tripped canary does besides refusing what carried it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnTrip {
    /// End the session at once, as `DELETE` does (the default).
    #[default]
    EndSession,
    /// Refuse the request only.
    Refuse,
}

impl OrgPolicy {
    /// The file it was read from, as messages name it.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// `name` (empty when not set).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `mode`.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// `allowed_domains`.
    pub fn allowed(&self) -> &DomainSet {
        &self.allowed
    }

    /// `denied_domains`.
    pub fn denied(&self) -> &DomainSet {
        &self.denied
    }

    /// `allowed_ports` (`[80, 443]` when not set): the ports of a port-less entry.
    pub fn allowed_ports(&self) -> &[u16] {
        &self.allowed_ports
    }

    /// `allowed_cidrs`, host bits dropped.
    pub fn allowed_cidrs(&self) -> &[IpNet] {
        &self.allowed_cidrs
    }

    /// `default_network_policy` (`Disabled` when not set).
    pub fn default_policy(&self) -> &RequestPolicy {
        &self.default_policy
    }

    /// `[shared_hosting] action`.
    pub fn shared_hosting_action(&self) -> SharedHostingAction {
        self.shared_hosting_action
    }

    /// `[shared_hosting] extra_domains`.
    pub fn shared_hosting_extra(&self) -> &DomainSet {
        &self.shared_hosting_extra
    }

    /// `[[credentials]]`, in the order written.
    pub fn credentials(&self) -> &[CredentialRule] {
        &self.credentials
    }

    /// `[tunnels]`.
    pub fn tunnels(&self) -> &Tunnels {
        &self.tunnels
    }

    /// `[limits] upload_bytes` (`None`: no budget).
    pub fn upload_bytes(&self) -> Option<u64> {
        self.upload_bytes
    }

    /// `[canaries]`.
    pub fn canaries(&self) -> &Canaries {
        &self.canaries
    }

    /// `[dlp]` (docs/reference/dlp.md, "Secret detectors").
    pub fn dlp(&self) -> &Dlp {
        &self.dlp
    }

    /// `[dlp] action`: `refuse` unless the file says `report`.
    pub fn dlp_action(&self) -> DlpAction {
        self.dlp.action.unwrap_or_default()
    }

    /// What a file that sets nothing means (and what a file that does not read gives).
    pub(crate) fn empty(source: &str) -> OrgPolicy {
        OrgPolicy {
            source: source.to_string(),
            name: String::new(),
            mode: Mode::Enforce,
            allowed: DomainSet::default(),
            denied: DomainSet::default(),
            allowed_ports: DEFAULT_PORTS.to_vec(),
            allowed_cidrs: Vec::new(),
            cidr_rules: Vec::new(),
            default_policy: RequestPolicy::Disabled,
            shared_hosting_action: SharedHostingAction::Flag,
            shared_hosting_extra: DomainSet::default(),
            tunnels: Tunnels::default(),
            credentials: Vec::new(),
            upload_bytes: None,
            canaries: Canaries::default(),
            dlp: Dlp::default(),
        }
    }
}

/// A validated request-level policy (`network_policy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestPolicy {
    /// `{"type": "disabled"}`: no network at all.
    Disabled,
    /// `{"type": "allowlist", ...}`: only these destinations, within the levels above.
    Allowlist {
        /// `allowed_domains`.
        domains: DomainSet,
        /// `None`: this level allows no literal IPs (and does not narrow where names land).
        cidrs: Option<Vec<IpNet>>,
        /// `max_upload_bytes`: this level's upload budget (`None`: the level above's).
        max_upload_bytes: Option<u64>,
        /// `"dlp"`: the detectors this level adds, and its action (`None`: none set).
        dlp: Option<Arc<Dlp>>,
        /// Can be written only here, so only the compiler makes an allowlist.
        sealed: Sealed,
    },
}

/// The field that keeps [`RequestPolicy::Allowlist`] the compiler's to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sealed(pub(crate) ());

/// Where the entries of a compiled organization policy were written: for each list,
/// the byte offset of each entry that compiled, in the list's order (an entry left out
/// of the policy is left out here too).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrgSpans {
    /// `allowed_domains`.
    pub allowed_domains: Vec<usize>,
    /// `denied_domains`.
    pub denied_domains: Vec<usize>,
    /// `allowed_ports`.
    pub allowed_ports: Vec<usize>,
    /// `allowed_cidrs`, with each entry's text.
    pub allowed_cidrs: Vec<Written>,
    /// `[shared_hosting] extra_domains`.
    pub extra_domains: Vec<usize>,
    /// The entries of `default_network_policy`.
    pub default_policy: RequestSpans,
}

/// Where the entries of a compiled request policy were written, as [`OrgSpans`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestSpans {
    /// `allowed_domains`.
    pub allowed_domains: Vec<usize>,
    /// `allowed_cidrs`, with each entry's text.
    pub allowed_cidrs: Vec<Written>,
    /// Where `max_upload_bytes` was written, when it was.
    pub max_upload_bytes: Option<usize>,
    /// Where `"dlp"` was written, when it was.
    pub dlp: Option<usize>,
}

/// A CIDR entry: where, and the text as written (the policy keeps the network only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The byte offset of the entry's literal.
    pub at: usize,
    /// The entry as written (`10.0.0.1/8`, where the policy keeps `10.0.0.0/8`).
    pub text: String,
}

/// One `[[credentials]]` table, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialRule {
    /// The one host whose requests get the header.
    pub host: HostName,
    /// Lower case, a valid header name, and none the proxy owns.
    pub header: String,
    /// Where the value is read from, at load and at reload.
    pub value_file: PathBuf,
}
