//! Linting a request policy (JSON `network_policy`), and the allowlist rules shared with
//! the organization's inline `default_network_policy`.

use super::entries::{self, ListCtx};
use super::{problems, Finding, RuleId, Sink};
use crate::policy::file::DEFAULT_PORTS;
use crate::policy::widened;
use crate::policy::{DomainSet, OrgPolicy, RequestPolicy, RequestSpans, SharedHostingAction};

/// Lint one request policy; with `org`, also check it narrows that organization policy.
pub(crate) fn lint(file: &str, text: &str, org: Option<&OrgPolicy>) -> Vec<Finding> {
    let compiled = RequestPolicy::compile_json(text, file);
    let mut sink = Sink::new(file, text);
    problems::report(&mut sink, &compiled.problems, "JSON");
    allowlist_rules(&mut sink, "", &compiled.policy, &compiled.spans, org);
    problems::report_rest(&mut sink, &compiled.problems);
    sink.findings
}

/// The rules of an allowlist policy's entries; `table` names where it sits
/// (`default_network_policy.` inside an organization file). Without `org`, entries are
/// judged under the default ports and nothing is checked for widening.
pub(crate) fn allowlist_rules(
    sink: &mut Sink,
    table: &str,
    policy: &RequestPolicy,
    spans: &RequestSpans,
    org: Option<&OrgPolicy>,
) {
    let RequestPolicy::Allowlist { domains, cidrs, .. } = policy else {
        return;
    };
    let ports = org.map_or(&DEFAULT_PORTS[..], |o| o.allowed_ports());
    let empty = DomainSet::default();
    let shared = org.map_or((&empty, SharedHostingAction::Flag), |o| {
        (o.shared_hosting_extra(), o.shared_hosting_action())
    });
    let name = format!("{table}allowed_domains");
    let ctx = ListCtx {
        name: &name,
        ports,
        shared: Some(shared),
    };
    entries::domains(sink, domains, &spans.allowed_domains, &ctx);
    if let Some(nets) = cidrs {
        let cidr_name = format!("{table}allowed_cidrs");
        entries::cidrs(sink, nets, &spans.allowed_cidrs, &cidr_name);
    }
    let Some(org) = org else {
        return;
    };
    let allowed = (domains, &spans.allowed_domains[..]);
    entries::conflicts(sink, allowed, &name, org.denied(), ports);
    for w in widened(org, policy, spans) {
        let msg = format!(
            "{table}{}: `{}` widens the organization policy {}: {}; remove it, or have the organization allow it",
            w.key,
            w.text,
            org.source(),
            w.why
        );
        sink.at(RuleId::WidensOrgPolicy, w.at, msg, None);
    }
}
