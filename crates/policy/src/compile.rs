//! Policy text -> validated, compiled policies: the only thing the proxy sees, and the
//! only place that makes them.
//!
//! Every compile is lenient: it reads the whole file, leaves out what is invalid, and
//! returns the policy with the position of each entry ([`OrgSpans`], [`RequestSpans`])
//! and every [`Problem`] found ([`Compiled`]). The loaders ([`OrgPolicy::from_toml`],
//! [`RequestPolicy::from_json`]) are that compile, refused if it found any problem; so
//! `lint` (which reads the lenient result) and the proxy can never disagree on a file.
//!
//! - `toml` / `json`: each syntax as a `node::Node`; `json` finds the positions
//!   serde_json does not keep.
//! - `node`: typed reads of a node, worded as serde words its errors.
//! - `org` / `request`: the two kinds of file, and their entry lists.
//! - `problems`: [`Problem`], [`PolicyError`].

use std::sync::Arc;

use ipnet::IpNet;

use super::file::DEFAULT_PORTS;

mod credentials;
mod domain_set;
mod entry;
mod json;
mod limits;
mod node;
mod org;
mod problems;
mod request;
mod toml;

pub use credentials::CredentialRule;
pub use domain_set::{DomainSet, Matching, NameProbe};
pub use problems::{line_col, PolicyError, Problem, ProblemKind};
pub use request::{widened, Widened};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Enforce,
    /// Allowlist denials are allowed and logged as `would_deny`.
    Report,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedHostingAction {
    Flag,
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

    pub fn shared_hosting_action(&self) -> SharedHostingAction {
        self.shared_hosting_action
    }

    /// `[shared_hosting] extra_domains`.
    pub fn shared_hosting_extra(&self) -> &DomainSet {
        &self.shared_hosting_extra
    }

    pub fn credentials(&self) -> &[CredentialRule] {
        &self.credentials
    }

    pub fn tunnels(&self) -> &Tunnels {
        &self.tunnels
    }

    /// `[limits] upload_bytes` (`None`: no budget).
    pub fn upload_bytes(&self) -> Option<u64> {
        self.upload_bytes
    }

    /// What a file that sets nothing means (and what a file that does not read gives).
    fn empty(source: &str) -> OrgPolicy {
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
        }
    }
}

/// A validated request-level policy (`network_policy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestPolicy {
    Disabled,
    Allowlist {
        domains: DomainSet,
        /// `None`: this level allows no literal IPs (and does not narrow where names land).
        cidrs: Option<Vec<IpNet>>,
        /// `max_upload_bytes`: this level's upload budget (`None`: the level above's).
        max_upload_bytes: Option<u64>,
        /// Can be written only here, so only the compiler makes an allowlist.
        sealed: Sealed,
    },
}

/// The field that keeps [`RequestPolicy::Allowlist`] the compiler's to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sealed(());

/// Where the entries of a compiled organization policy were written: for each list,
/// the byte offset of each entry that compiled, in the list's order (an entry left out
/// of the policy is left out here too).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrgSpans {
    pub allowed_domains: Vec<usize>,
    pub denied_domains: Vec<usize>,
    pub allowed_ports: Vec<usize>,
    pub allowed_cidrs: Vec<Written>,
    pub extra_domains: Vec<usize>,
    pub default_policy: RequestSpans,
}

/// Where the entries of a compiled request policy were written, as [`OrgSpans`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestSpans {
    pub allowed_domains: Vec<usize>,
    pub allowed_cidrs: Vec<Written>,
    /// Where `max_upload_bytes` was written, when it was.
    pub max_upload_bytes: Option<usize>,
}

/// A CIDR entry: where, and the text as written (the policy keeps the network only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub at: usize,
    pub text: String,
}

/// What a lenient compile gives: the policy as far as the text reads (invalid entries
/// left out), where its entries were written, and every problem found, in text order.
#[derive(Clone, Debug)]
pub struct Compiled<P, S> {
    pub source: String,
    pub policy: P,
    pub spans: S,
    pub problems: Vec<Problem>,
}

impl<P, S> Compiled<P, S> {
    /// The policy when nothing is wrong with the file; otherwise every problem.
    pub fn into_result(self) -> Result<P, PolicyError> {
        if self.problems.is_empty() {
            Ok(self.policy)
        } else {
            Err(PolicyError {
                source: self.source,
                problems: self.problems,
            })
        }
    }
}

impl OrgPolicy {
    /// Compile an organization policy (TOML) leniently; `source` names the file.
    pub fn compile_toml(text: &str, source: &str) -> Compiled<OrgPolicy, OrgSpans> {
        let mut p = problems::Problems::new(text);
        let (policy, spans) = match toml::parse(text, &mut p) {
            Some(doc) => org::compile(toml::Toml::Item(doc.as_item()), source, &mut p),
            None => (OrgPolicy::empty(source), OrgSpans::default()),
        };
        Compiled {
            source: source.to_string(),
            policy,
            spans,
            problems: p.finish(),
        }
    }

    /// Load an organization policy; `source` names the file in messages.
    pub fn from_toml(text: &str, source: &str) -> Result<OrgPolicy, PolicyError> {
        OrgPolicy::compile_toml(text, source).into_result()
    }
}

impl RequestPolicy {
    /// Compile a request policy (JSON) leniently; `source` names it.
    pub fn compile_json(text: &str, source: &str) -> Compiled<RequestPolicy, RequestSpans> {
        let mut p = problems::Problems::new(text);
        let compiled = json::parse(text, &mut p).map(|value| {
            let pos = json::positions(text);
            json::duplicate_keys(&pos, &mut p);
            let node = json::Json {
                value: &value,
                pos: Some(&pos),
            };
            request::compile_document(node, &mut p)
        });
        // A text that does not read allows nothing.
        let (policy, spans) =
            compiled.unwrap_or_else(|| (RequestPolicy::Disabled, RequestSpans::default()));
        Compiled {
            source: source.to_string(),
            policy,
            spans,
            problems: p.finish(),
        }
    }

    /// Load a request policy from JSON text; `source` names it in messages.
    pub fn from_json(text: &str, source: &str) -> Result<RequestPolicy, PolicyError> {
        RequestPolicy::compile_json(text, source).into_result()
    }

    /// Load a request policy from a JSON value (no positions in messages).
    pub fn from_value(v: &serde_json::Value, source: &str) -> Result<RequestPolicy, PolicyError> {
        let mut p = problems::Problems::new("");
        let node = json::Json {
            value: v,
            pos: None,
        };
        let (policy, spans) = request::compile_document(node, &mut p);
        Compiled {
            source: source.to_string(),
            policy,
            spans,
            problems: p.finish(),
        }
        .into_result()
    }
}

#[cfg(test)]
#[path = "compile_tests.rs"]
mod tests;

#[cfg(test)]
mod lenient_tests;
