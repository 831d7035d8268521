//! The steps of a decision, recorded for `check --explain` as [`super::decide()`] takes
//! them (so the explanation cannot disagree with the verdict), and not at all on the
//! request path.

use std::net::IpAddr;
use std::sync::Arc;

use super::compiled::SharedHostingAction;
use super::host::HostName;

/// One step of the order of judgement, as [`super::explain()`] records it for `check --explain`.
/// The steps are the decision's own: the verdict and its steps come from one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The target is a literal IP address.
    Ip {
        /// The address.
        ip: IpAddr,
        /// The port asked for.
        port: u16,
    },
    /// The organization `allowed_cidrs` entry covering a literal IP, if any.
    OrgCidr {
        /// The address.
        ip: IpAddr,
        /// The entry that covers it, as written; `None`: none does.
        rule: Option<Arc<str>>,
    },
    /// The target is a name.
    Name {
        /// The name, normalised.
        name: HostName,
        /// The port asked for.
        port: u16,
    },
    /// The organization `denied_domains` entry that matched, if any.
    OrgDenied {
        /// The entry, as written; `None`: none matched.
        rule: Option<Arc<str>>,
    },
    /// The organization `allowed_domains` verdict on the name and port.
    OrgAllowed(Match),
    /// A request level (0 = widest) is `{"type": "disabled"}`.
    RequestDisabled {
        /// The level's index among the request levels.
        level: usize,
    },
    /// A request level's `allowed_domains` verdict on the name and port.
    RequestAllowed {
        /// The level's index among the request levels.
        level: usize,
        /// What its entries found.
        found: Match,
    },
    /// Whether the name is on shared hosting (`under` names the suffix or list entry).
    SharedHosting {
        /// The shared-hosting suffix or `extra_domains` entry it is under; `None`: it is
        /// not on shared hosting.
        under: Option<String>,
        /// `[shared_hosting] action`.
        action: SharedHostingAction,
    },
}

/// How a list of domain entries judged a name on a port. In each variant, `rule` is the
/// entry as written, `port` the port asked for, `method` and `path` the request's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    /// `rule` matches the name on the port.
    Port {
        /// The entry.
        rule: Arc<str>,
        /// The port.
        port: u16,
    },
    /// No entry matches the name.
    None,
    /// `rule` matches the name but not the port (`ports`: the org's `allowed_ports`).
    OtherPort {
        /// The entry.
        rule: Arc<str>,
        /// The port.
        port: u16,
        /// The organization's `allowed_ports`, which a port-less entry allows.
        ports: Vec<u16>,
    },
    /// `rule`, an entry with rules, allows the request's method and path.
    Request {
        /// The entry.
        rule: Arc<str>,
        /// The method.
        method: String,
        /// The path, normalised.
        path: String,
    },
    /// The entries matching name and port (`rule` the first) allow other methods.
    OtherMethod {
        /// The first entry.
        rule: Arc<str>,
        /// The method.
        method: String,
    },
    /// The entries allowing the method (`rule` the first) allow other paths.
    OtherPath {
        /// The first entry.
        rule: Arc<str>,
        /// The method.
        method: String,
        /// The path, normalised.
        path: String,
    },
}

/// Where [`decide`] reports its steps: nowhere on the request path, a list for `check`.
pub(super) trait Trace {
    fn step(&mut self, step: impl FnOnce() -> Step);
}

/// The request path's trace: records nothing and costs nothing.
pub(super) struct NoTrace;

impl Trace for NoTrace {
    #[inline(always)]
    fn step(&mut self, _: impl FnOnce() -> Step) {}
}

impl Trace for Vec<Step> {
    fn step(&mut self, step: impl FnOnce() -> Step) {
        self.push(step());
    }
}
