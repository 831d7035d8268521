//! The raw shapes of the policy files (SPEC sections 3 and 4), as serde reads them.
//!
//! Nothing here is validated beyond the shape: [`super::compile`] turns these into the
//! policies the proxy uses. Unknown keys are refused everywhere.

use serde::Deserialize;
use toml::Spanned;

/// The organization policy file (TOML).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrgFile {
    pub version: Spanned<i64>,
    pub name: Option<String>,
    pub mode: Option<RawMode>,
    pub allowed_domains: Option<Vec<Spanned<String>>>,
    pub denied_domains: Option<Vec<Spanned<String>>>,
    pub allowed_ports: Option<Vec<Spanned<i64>>>,
    pub allowed_cidrs: Option<Vec<Spanned<String>>>,
    pub default_network_policy: Option<Spanned<RawRequestPolicy>>,
    pub shared_hosting: Option<RawSharedHosting>,
    pub tunnels: Option<RawTunnels>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RawMode {
    Enforce,
    Report,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSharedHosting {
    pub action: Option<RawSharedHostingAction>,
    pub extra_domains: Option<Vec<Spanned<String>>>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RawSharedHostingAction {
    Flag,
    Deny,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTunnels {
    pub require_tls: Option<bool>,
    pub require_sni: Option<bool>,
}

/// A request policy (JSON, or the organization's inline `default_network_policy`).
#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum RawRequestPolicy {
    Disabled {},
    Allowlist {
        allowed_domains: Vec<String>,
        allowed_cidrs: Option<Vec<String>>,
    },
}
