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
use crate::session::SessionPolicy;

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

/// The detectors in force for a request (docs/reference/dlp.md, "Secret detectors"):
/// the organization's, with those of the levels above the request's headers (the
/// session's policy and `--policy`, or the policy of a request without a session) and
/// then those its `headers` (`X-Network-Policy`) add. What the levels above add is
/// built once per policies snapshot (per session, kept with its policy; for requests
/// without one, with the snapshot), so a request builds detectors of its own only when
/// a header adds to them.
pub(super) fn in_force(
    policies: &Arc<Policies>,
    own: Option<&SessionPolicy>,
    headers: &[&RequestPolicy],
) -> Arc<Detectors> {
    let Some(own) = own else {
        return without_session(policies, headers);
    };
    let base = own.detectors_under(policies, || {
        let levels: Vec<&RequestPolicy> = policies
            .serve_policy
            .iter()
            .chain([&own.compiled])
            .collect();
        adding(&policies.detectors, &levels)
    });
    adding(&base, headers)
}

/// [`in_force`] for a request without a session (a DNS query is one).
pub(super) fn without_session(policies: &Policies, headers: &[&RequestPolicy]) -> Arc<Detectors> {
    let base = (policies.without_session_detectors)
        .get_or_init(|| adding(&policies.detectors, &[&policies.without_session]));
    adding(base, headers)
}

/// `base` with every detector `levels` (widest first) add, and the action the
/// narrowest says: `report` only when `base` reports and no level says `refuse` (a level
/// never turns `refuse` into `report`: that was `policy_widening`). `base` itself, not a
/// copy, when no level sets `"dlp"`.
fn adding(base: &Arc<Detectors>, levels: &[&RequestPolicy]) -> Arc<Detectors> {
    let added = levels.iter().filter_map(|l| match l {
        RequestPolicy::Allowlist { dlp: Some(d), .. } => Some(d),
        _ => None,
    });
    let mut added = added.peekable();
    if added.peek().is_none() {
        return base.clone();
    }
    let refuses = !base.reports()
        || levels
            .iter()
            .any(|l| dlp_action(l) == Some(DlpAction::Refuse));
    let rules: Vec<Rule> = added.flat_map(|d| d.detectors.iter().map(rule)).collect();
    Arc::new(base.with(rules, !refuses))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlp::FoundIn;

    const ORG: &str = r#"
version = 1
allowed_domains = ["api.test"]
[dlp]
detectors = ["github_token"]
"#;

    fn policies() -> Arc<Policies> {
        let org = OrgPolicy::from_toml(ORG, "org.toml").unwrap();
        let mut policies = Policies::new(org, None);
        policies.detectors = Arc::new(organization(&policies.org, Vec::new()));
        Arc::new(policies)
    }

    fn policy(json: &str) -> RequestPolicy {
        RequestPolicy::from_json(json, "policy.json").unwrap()
    }

    const ADDS_JWT: &str =
        r#"{"type": "allowlist", "allowed_domains": ["api.test"], "dlp": {"detectors": ["jwt"]}}"#;
    const PLAIN: &str = r#"{"type": "allowlist", "allowed_domains": ["api.test"]}"#;
    const JWT: &[u8] = b"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2ln";

    #[test]
    fn a_sessions_detectors_are_built_once_per_snapshot_and_shared_by_its_requests() {
        let policies = policies();
        let json = serde_json::from_str(ADDS_JWT).unwrap();
        let own = SessionPolicy::new(policy(ADDS_JWT), json);
        let first = in_force(&policies, Some(&own), &[]);
        let second = in_force(&policies, Some(&own), &[]);
        assert!(Arc::ptr_eq(&first, &second), "one build for both requests");
        assert!(
            first.scan(JWT, FoundIn::Body).is_some(),
            "the session's jwt"
        );
        // A header that adds nothing shares them too; one that adds builds its own.
        let plain = policy(PLAIN);
        assert!(Arc::ptr_eq(
            &first,
            &in_force(&policies, Some(&own), &[&plain])
        ));
        let adds = policy(
            r#"{"type": "allowlist", "allowed_domains": ["api.test"], "dlp": {"patterns": [{"name": "ticket", "regex": "TKT-[0-9]{5}"}]}}"#,
        );
        let added = in_force(&policies, Some(&own), &[&adds]);
        assert!(!Arc::ptr_eq(&first, &added));
        assert!(added.scan(b"TKT-12345", FoundIn::Body).is_some());
        assert!(
            added.scan(JWT, FoundIn::Body).is_some(),
            "and keeps the session's"
        );
        // A new snapshot (a reload) builds them afresh, once.
        let reloaded = self::policies();
        let after = in_force(&reloaded, Some(&own), &[]);
        assert!(!Arc::ptr_eq(&first, &after));
        assert!(Arc::ptr_eq(&after, &in_force(&reloaded, Some(&own), &[])));
    }

    #[test]
    fn without_a_level_that_adds_the_organizations_detectors_are_used_as_they_are() {
        let policies = policies();
        let json = serde_json::from_str(PLAIN).unwrap();
        let own = SessionPolicy::new(policy(PLAIN), json);
        let with_session = in_force(&policies, Some(&own), &[]);
        assert!(Arc::ptr_eq(&with_session, &policies.detectors));
        let without = in_force(&policies, None, &[]);
        assert!(Arc::ptr_eq(&without, &policies.detectors));
        assert!(Arc::ptr_eq(&without, &without_session(&policies, &[])));
    }
}
