//! The judgement of a bare name, with no port: what the DNS listener asks
//! (docs/reference/confinement.md, "DNS listener"). A name is allowed when a connection
//! to it would be allowed at every level on *some* port, so that the address it is
//! given can be dialled at all; the connection itself is judged again, with its port.

use super::compiled::RequestPolicy;
use super::decide::{decide, explain, Effective, Target};
use super::host::{Host, HostName};
use super::steps::{Match, Step};
use super::verdict::{Decision, Verdict};

/// Decide `name` for some port: the decision of the first port that allows it, else
/// the refusal of the nearest level that allows it on no port (docs/reference/
/// confinement.md, "DNS listener"): of the ports tried, the one whose judgement passed
/// the most levels gives the reason, so a name the organization allows only on `:8080`
/// and the request policy lacks is `not_in_request_policy` at the request level, never
/// the organization's `port_not_allowed` for port 443; `port_not_allowed` remains only
/// where every level allows the name, but on no common port. The ports tried are those
/// that could allow it: the organization's `allowed_ports`, then the explicit ports of
/// the organization and request entries that match the name. In report mode a would-be
/// denial counts as allowed, as it does for a request.
pub fn decide_any_port(eff: &Effective, name: &HostName) -> Decision {
    let mut target = Target {
        host: Host::Name(name.clone()),
        port: 0,
    };
    let mut refused = Vec::new();
    let ports = eff.org.allowed_ports.iter().copied();
    // The organization's ports first: they allow most names, with no list to build.
    for port in ports.chain(explicit_ports(eff, name)) {
        target.port = port;
        let decision = decide(eff, &target);
        if decision.verdict == Verdict::Allow {
            return decision;
        }
        refused.push((port, decision));
    }
    // No port at all (an empty `allowed_ports` and no entry with a port for this
    // name): judged on port 0, which no entry allows, so the reason says why.
    if refused.is_empty() {
        return decide(eff, &target);
    }
    // A refused name is the rare case: only then are the levels passed counted. The
    // first of the deepest wins, so a would-be denial (report mode) is kept as it was.
    let mut best: Option<(usize, Decision)> = None;
    for (port, decision) in refused {
        target.port = port;
        let depth = levels_passed(eff, &target);
        if best.as_ref().is_none_or(|(d, _)| depth > *d) {
            best = Some((depth, decision));
        }
    }
    best.map(|(_, d)| d).unwrap_or_else(|| decide(eff, &target))
}

/// How many levels (the organization's, then each request level) allowed `target`
/// before its judgement stopped.
fn levels_passed(eff: &Effective, target: &Target) -> usize {
    let (_, steps) = explain(eff, target);
    let passed = |found: &Match| matches!(found, Match::Port { .. } | Match::Request { .. });
    steps
        .iter()
        .filter(|s| match s {
            Step::OrgAllowed(found) | Step::RequestAllowed { found, .. } => passed(found),
            _ => false,
        })
        .count()
}

/// The ports written in the organization and request entries that match `name`, each
/// once, leaving out the organization's `allowed_ports` (tried before them).
fn explicit_ports(eff: &Effective, name: &HostName) -> Vec<u16> {
    let mut ports: Vec<u16> = Vec::new();
    let mut add = |port: Option<u16>| {
        if let Some(p) = port {
            if !eff.org.allowed_ports.contains(&p) && !ports.contains(&p) {
                ports.push(p);
            }
        }
    };
    for entry in eff.org.allowed.matching(name) {
        add(entry.port);
    }
    for level in eff.levels {
        if let RequestPolicy::Allowlist { domains, .. } = level {
            for entry in domains.matching(name) {
                add(entry.port);
            }
        }
    }
    ports
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{OrgPolicy, Reason, VerdictKind};

    const ORG: &str = r#"
version = 1
allowed_ports = [443, 80]
allowed_domains = ["api.test", "*.example.test", "alt.test:8443", "both.test", "both.test:9000", "bad.example.test:8443"]
denied_domains = ["bad.example.test", "mail.example.test:25", "web.example.test:443"]
"#;

    fn org(extra: &str) -> OrgPolicy {
        OrgPolicy::from_toml(&format!("{ORG}{extra}"), "org.toml").unwrap()
    }

    fn allowlist(domains: &[&str]) -> RequestPolicy {
        let policy = serde_json::json!({"type": "allowlist", "allowed_domains": domains});
        RequestPolicy::from_value(&policy, "request.json").unwrap()
    }

    type Row<'a> = (
        &'a str,
        &'a str,
        VerdictKind,
        Option<&'a str>,
        Option<&'a str>,
    );

    fn run(org: &OrgPolicy, levels: &[&RequestPolicy], rows: &[Row]) {
        let eff = Effective { org, levels };
        for (rule, name, verdict, reason, by) in rows {
            let d = decide_any_port(&eff, &HostName::parse(name).unwrap());
            let got = (
                d.verdict.kind(),
                d.reason().map(Reason::as_str),
                d.rule.as_deref(),
            );
            assert_eq!(got, (*verdict, *reason, *by), "{rule}");
        }
    }

    use VerdictKind::{Allow, Deny, WouldDeny};

    #[test]
    fn organization_level() {
        #[rustfmt::skip]
        run(&org(""), &[], &[
            ("allowed_on_a_default_port",    "api.test",             Allow, None,                         Some("api.test")),
            ("allowed_under_a_subtree",      "a.example.test",       Allow, None,                         Some("*.example.test")),
            ("allowed_only_on_its_own_port", "alt.test",             Allow, None,                         Some("alt.test:8443")),
            ("denied_on_every_port",         "bad.example.test",     Deny,  Some("denied_domain"),        Some("bad.example.test")),
            ("denied_on_one_port_only",      "mail.example.test",    Allow, None,                         Some("*.example.test")),
            ("denied_on_the_first_port",     "web.example.test",     Allow, None,                         Some("*.example.test")),
            ("not_in_org_allowlist",         "evil.test",            Deny,  Some("not_in_org_allowlist"), None),
            ("apex_not_in_subtree",          "example.test",         Deny,  Some("not_in_org_allowlist"), None),
        ]);
    }

    #[test]
    fn request_level() {
        let org = org("");
        let narrow = allowlist(&[
            "api.test",
            "alt.test",
            "both.test:9000",
            "x.example.test:8080",
        ]);
        #[rustfmt::skip]
        run(&org, &[&narrow], &[
            ("allowed_at_both_levels",       "api.test",        Allow, None,                          Some("api.test")),
            ("org_port_only_request_default", "alt.test",       Deny,  Some("port_not_allowed"),      Some("alt.test")),
            ("request_entry_port",           "both.test",       Allow, None,                          Some("both.test:9000")),
            ("request_port_org_lacks",       "x.example.test",  Deny,  Some("port_not_allowed"),      Some("x.example.test:8080")),
            ("not_in_request_policy",        "a.example.test",  Deny,  Some("not_in_request_policy"), None),
            ("org_denial_first",             "evil.test",       Deny,  Some("not_in_org_allowlist"),  None),
        ]);
        #[rustfmt::skip]
        run(&org, &[&RequestPolicy::Disabled], &[
            ("network_disabled",             "api.test",        Deny,  Some("network_disabled"),      None),
        ]);
    }

    /// The level that allows a name on no port names the refusal, not the first port
    /// tried (docs/reference/confinement.md, "DNS listener").
    #[test]
    fn refusal_names_the_nearest_level_that_allows_no_port() {
        let org = OrgPolicy::from_toml(
            "version = 1\nallowed_domains = [\"app.test:8080\", \"other.test:8080\", \"ports.test\"]\n",
            "org.toml",
        )
        .unwrap();
        let narrow = allowlist(&["app.test:8080", "ports.test:443"]);
        let elsewhere = allowlist(&["ports.test:80"]);
        let level = |levels: &[&RequestPolicy], name: &str| {
            let eff = Effective { org: &org, levels };
            let d = decide_any_port(&eff, &HostName::parse(name).unwrap());
            (d.reason().map(Reason::as_str), d.level.as_str(), d.rule)
        };
        assert_eq!(
            level(&[&narrow], "other.test"),
            (Some("not_in_request_policy"), "request", None),
            "allowed by the organization on :8080 only, absent from the request policy"
        );
        assert_eq!(
            level(&[&narrow], "app.test"),
            (None, "request", Some("app.test:8080".into()))
        );
        assert_eq!(
            level(&[], "nowhere.test"),
            (Some("not_in_org_allowlist"), "org", None)
        );
        assert_eq!(
            level(&[&RequestPolicy::Disabled], "other.test"),
            (Some("network_disabled"), "request", None)
        );
        // Every level allows the name, on no common port: only then `port_not_allowed`.
        assert_eq!(
            level(&[&narrow, &elsewhere], "ports.test"),
            (
                Some("port_not_allowed"),
                "request",
                Some("ports.test:80".into())
            )
        );
    }

    #[test]
    fn no_port_at_all() {
        let org = OrgPolicy::from_toml(
            "version = 1\nallowed_ports = []\nallowed_domains = [\"api.test\", \"alt.test:8443\"]\n",
            "org.toml",
        )
        .unwrap();
        #[rustfmt::skip]
        run(&org, &[], &[
            ("port_less_entry_without_ports", "api.test",  Deny,  Some("port_not_allowed"),     Some("api.test")),
            ("entry_with_its_port",           "alt.test",  Allow, None,                         Some("alt.test:8443")),
            ("unknown_name",                  "evil.test", Deny,  Some("not_in_org_allowlist"), None),
        ]);
    }

    #[test]
    fn report_mode_would_deny_counts_as_allowed() {
        let org = org("mode = \"report\"\n");
        let narrow = allowlist(&["api.test"]);
        #[rustfmt::skip]
        run(&org, &[&narrow], &[
            ("allowed_still_allowed",  "api.test",          Allow,     None,                          Some("api.test")),
            ("would_deny_not_in_org",  "evil.test",         WouldDeny, Some("not_in_org_allowlist"),  None),
            ("would_deny_request",     "a.example.test",    WouldDeny, Some("not_in_request_policy"), None),
            ("would_deny_denied",      "bad.example.test",  WouldDeny, Some("denied_domain"),         Some("bad.example.test")),
        ]);
        let eff = Effective {
            org: &org,
            levels: &[&narrow],
        };
        let d = decide_any_port(&eff, &HostName::parse("evil.test").unwrap());
        assert!(d.is_allowed(), "a would-be denial lets the name through");
    }

    #[test]
    fn shared_hosting_denied_on_every_port() {
        let org = OrgPolicy::from_toml(
            "version = 1\nallowed_domains = [\"me.github.io\"]\n[shared_hosting]\naction = \"deny\"\n",
            "org.toml",
        )
        .unwrap();
        let d = decide_any_port(
            &Effective {
                org: &org,
                levels: &[],
            },
            &HostName::parse("me.github.io").unwrap(),
        );
        assert_eq!(d.reason(), Some(Reason::SharedHosting));
        assert!(d.shared_hosting);
    }
}
