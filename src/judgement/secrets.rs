//! The secret detectors' step of the judgement (docs/reference/dlp.md, "Secret
//! detectors"), right after the canaries': the detectors in force for a request are the
//! organization's `[dlp]` (with a detector `credential:HOST` for each
//! `[[credentials]]` value) and those its request levels add; their action is `refuse`
//! unless the organization and every level that sets one say `report`. A level may not
//! turn `refuse` into `report`: that was refused as `policy_widening` when the levels
//! were checked.

use std::sync::Arc;

use zeroize::Zeroizing;

use super::ask::Ask;
use super::exfiltration;
use super::policies::Policies;
use crate::dlp::{Detectors, Hit, Rule};
use crate::policy::{cover::dlp_action, Detector, DlpAction, OrgPolicy, RequestPolicy};

/// A compiled detector as the scanner takes it.
fn rule(d: &Detector) -> Rule {
    Rule {
        id: d.name.clone(),
        kind: d.kind,
        bytes: d.bytes.clone(),
        names: d.names.clone(),
        longest: d.longest,
    }
}

/// The organization's detectors: `[dlp]`'s, with its action, and the credentials'
/// values (`(host, value)`), each the detector `credential:HOST`.
pub(crate) fn organization(
    org: &OrgPolicy,
    credentials: Vec<(String, Zeroizing<Vec<u8>>)>,
) -> Detectors {
    let rules = org.dlp().detectors.iter().map(rule).collect();
    let credentials = credentials
        .into_iter()
        .map(|(host, value)| (Arc::from(format!("credential:{host}")), value))
        .collect();
    Detectors::new(rules, org.dlp_action() == DlpAction::Report, credentials)
}

/// The detectors in force under `levels` (widest first): the organization's alone when
/// no level sets `"dlp"` (no copy), else with every level's added and the action the
/// narrowest says.
pub(super) fn in_force(policies: &Policies, levels: &[&RequestPolicy]) -> Arc<Detectors> {
    let added = levels.iter().filter_map(|l| match l {
        RequestPolicy::Allowlist { dlp: Some(d), .. } => Some(d),
        _ => None,
    });
    let mut added = added.peekable();
    if added.peek().is_none() {
        return policies.detectors.clone();
    }
    let refuses = policies.org.dlp_action() == DlpAction::Refuse
        || levels
            .iter()
            .any(|l| dlp_action(l) == Some(DlpAction::Refuse));
    let rules: Vec<Rule> = added.flat_map(|d| d.detectors.iter().map(rule)).collect();
    Arc::new(policies.detectors.with(rules, !refuses))
}

/// The first secret `ask` carries: in its target's name (unless `inside` a tunnel),
/// then in what else its listener read.
pub(super) fn scan(ask: &Ask<'_>, detectors: &Detectors, inside: bool) -> Option<Hit> {
    if detectors.is_empty() {
        return None;
    }
    exfiltration::look(
        ask,
        inside,
        |name, found_in| detectors.scan_name(name, found_in),
        &|bytes, found_in| detectors.scan(bytes, found_in),
    )
}
