//! Which entries make the proxy intercept (docs/reference/inspection.md): those with
//! `methods`, `paths`, `access` or `inspect`. `serve` refuses to start when a policy has
//! any and no `--ca` is given, naming them.

use super::compiled::{OrgPolicy, RequestPolicy};

impl OrgPolicy {
    /// The rule text of each allowed entry that makes its tunnels intercepted.
    pub fn inspected_entries(&self) -> Vec<String> {
        inspected(self.allowed.entries())
    }
}

impl RequestPolicy {
    /// The rule text of each entry that makes its tunnels intercepted.
    pub fn inspected_entries(&self) -> Vec<String> {
        match self {
            RequestPolicy::Allowlist { domains, .. } => inspected(domains.entries()),
            RequestPolicy::Disabled => Vec::new(),
        }
    }
}

fn inspected(entries: &[super::DomainEntry]) -> Vec<String> {
    entries
        .iter()
        .filter(|e| e.inspected())
        .map(|e| e.rule().to_string())
        .collect()
}
