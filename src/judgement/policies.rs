//! The policies in force: the snapshot every listener judges by. `crate::load` builds
//! one from the files; a reload builds another and swaps it in whole.

use std::sync::{Arc, OnceLock};

use crate::dlp::{Detectors, Scanner};
use crate::policy::{check_narrowing, OrgPolicy, RequestPolicy, Widening};

/// The policies in force. A reload builds a new one and swaps it in whole
/// ([`super::State::swap_policies`]), so a request sees either the old set or the new
/// one, never a mix.
#[derive(Debug)]
pub(crate) struct Policies {
    pub org: OrgPolicy,
    /// `serve --policy`, when given: the level above every session.
    pub serve_policy: Option<RequestPolicy>,
    /// The request-level policy of a request without a session: `--policy`, or the
    /// organization's default.
    pub without_session: RequestPolicy,
    /// Set when a reload left `--policy` widening the new organization policy: every
    /// request is refused with `policy_widening` until a reload fixes it
    /// (docs/reference/control-plane.md, "Reload").
    pub widening: Option<Widening>,
    /// The values of the organization's `[[credentials]]`, read from their files.
    pub credentials: crate::secrets::Credentials,
    /// The organization's canaries (`[canaries] values_file`), ready to look for.
    pub canaries: Arc<Scanner>,
    /// The organization's secret detectors (`[dlp]`, and the credentials' values).
    pub detectors: Arc<Detectors>,
    /// The detectors in force for a request without a session, made at its first
    /// (`crate::judgement::secrets`; `detectors` is set before any request is judged).
    pub without_session_detectors: OnceLock<Arc<Detectors>>,
}

impl Policies {
    /// The policies of `org` and `--policy`, with the widening state: `widening` is set
    /// when `serve_policy` asks for more than `org` allows.
    pub(crate) fn new(org: OrgPolicy, serve_policy: Option<RequestPolicy>) -> Policies {
        let widening = serve_policy
            .as_ref()
            .and_then(|p| check_narrowing(&org, &[], p).err());
        let without_session = serve_policy
            .clone()
            .unwrap_or_else(|| org.default_policy().clone());
        Policies {
            org,
            serve_policy,
            without_session,
            widening,
            credentials: Default::default(),
            canaries: Arc::default(),
            detectors: Arc::default(),
            without_session_detectors: OnceLock::new(),
        }
    }
}

impl Policies {
    /// The entries (organization, `--policy`, the default policy) whose tunnels are
    /// intercepted: a proxy with any needs a CA (docs/reference/inspection.md).
    pub(crate) fn inspected_entries(&self) -> Vec<String> {
        let mut inspected = self.org.inspected_entries();
        inspected.extend(self.serve_policy.iter().flat_map(|p| p.inspected_entries()));
        inspected.extend(self.org.default_policy().inspected_entries());
        inspected
    }
}
