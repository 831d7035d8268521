//! Linting an organization policy (TOML): the compiler's problems, then the rules over
//! the policy it compiled, as far as the file reads.

use super::entries::{self, ListCtx};
use super::{canaries, credentials};
use super::{problems, request_file, Finding, Sink};
use crate::policy::{OrgPolicy, OrgSpans};

/// Lint one organization file. Also returns the policy as far as it could be read
/// (invalid entries left out), so request files can still be checked against it.
pub(crate) fn lint(file: &str, text: &str) -> (Vec<Finding>, OrgPolicy) {
    let compiled = OrgPolicy::compile_toml(text, file);
    let mut sink = Sink::new(file, text);
    problems::report(&mut sink, &compiled.problems, "TOML");
    rules(&mut sink, &compiled.policy, &compiled.spans);
    problems::report_rest(&mut sink, &compiled.problems);
    (sink.findings, compiled.policy)
}

fn rules(sink: &mut Sink, org: &OrgPolicy, spans: &OrgSpans) {
    let ports = org.allowed_ports();
    let extra = org.shared_hosting_extra();
    let plain = |name| ListCtx {
        name,
        ports,
        shared: None,
    };
    entries::domains(sink, extra, &spans.extra_domains, &plain("extra_domains"));
    let denied = org.denied();
    entries::domains(
        sink,
        denied,
        &spans.denied_domains,
        &plain("denied_domains"),
    );
    let allowed_ctx = ListCtx {
        name: "allowed_domains",
        ports,
        shared: Some((extra, org.shared_hosting_action())),
    };
    let allowed = (org.allowed(), &spans.allowed_domains[..]);
    entries::domains(sink, allowed.0, allowed.1, &allowed_ctx);
    entries::conflicts(sink, allowed, "allowed_domains", denied, ports);
    credentials::plain_http(sink, org, allowed.1);
    canaries::blind(sink, org, allowed.1);
    entries::cidrs(
        sink,
        org.allowed_cidrs(),
        &spans.allowed_cidrs,
        "allowed_cidrs",
    );
    // The inline `default_network_policy`: the request-policy rules, checked against
    // the organization policy of the same file.
    let (default, at) = (org.default_policy(), &spans.default_policy);
    request_file::allowlist_rules(sink, "default_network_policy.", default, at, Some(org));
}
