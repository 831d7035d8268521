//! Decisions: one case per policy reason, report mode, IP literals, the address level.

use super::*;

const ORG: &str = r#"
version = 1
allowed_domains = ["api.github.com", "*.example.org", "pages.example.net:8443", "me.github.io", "webhook.site", "bad.example.org:8443"]
denied_domains = ["bad.example.org"]
allowed_cidrs = ["10.20.0.0/16", "93.184.0.0/16", "fd00::/8"]
"#;

fn org_with(extra: &str) -> OrgPolicy {
    OrgPolicy::from_toml(&format!("{ORG}{extra}"), "org.toml").unwrap()
}

fn allowlist(domains: &[&str], cidrs: Option<&[&str]>) -> RequestPolicy {
    let mut policy = serde_json::json!({"type": "allowlist", "allowed_domains": domains});
    if let Some(cidrs) = cidrs {
        policy["allowed_cidrs"] = cidrs.into();
    }
    RequestPolicy::from_value(&policy, "request.json").unwrap_or_else(|e| panic!("{e}"))
}

fn target(host: &str, port: u16) -> Target {
    Target {
        host: Host::parse(host).unwrap(),
        port,
    }
}

/// (verdict, reason, level, rule) in a compact form for tables.
fn summary(
    d: &Decision,
) -> (
    VerdictKind,
    Option<&'static str>,
    &'static str,
    Option<String>,
) {
    (
        d.verdict.kind(),
        d.reason().map(Reason::as_str),
        d.level.as_str(),
        d.rule.as_deref().map(str::to_owned),
    )
}

type Row<'a> = (
    &'a str,
    &'a str,
    u16,
    VerdictKind,
    Option<&'a str>,
    &'a str,
    Option<&'a str>,
);

fn run(org: &OrgPolicy, levels: &[&RequestPolicy], rows: &[Row]) {
    let eff = Effective { org, levels };
    for (rule, host, port, verdict, reason, level, by) in rows {
        let got = summary(&decide(&eff, &target(host, *port)));
        let want = (*verdict, *reason, *level, by.map(String::from));
        assert_eq!(got, want, "{rule}");
    }
}

use VerdictKind::{Allow, Deny, WouldDeny};

#[test]
fn org_level_reasons() {
    let org = org_with("");
    #[rustfmt::skip]
    run(&org, &[], &[
        ("allowed_by_exact",          "api.github.com",     443,  Allow, None,                          "org",     Some("api.github.com")),
        ("allowed_by_subtree",        "a.b.example.org",    80,   Allow, None,                          "org",     Some("*.example.org")),
        ("denied_wins_over_allow",    "bad.example.org",    8443, Deny,  Some("denied_domain"),         "org",     Some("bad.example.org")),
        ("not_in_org_allowlist",      "evil.example",       443,  Deny,  Some("not_in_org_allowlist"),  "org",     None),
        ("apex_not_in_subtree",       "example.org",        443,  Deny,  Some("not_in_org_allowlist"),  "org",     None),
        ("org_port_not_allowed",      "api.github.com",     8080, Deny,  Some("port_not_allowed"),      "org",     Some("api.github.com")),
        ("entry_port_only",           "pages.example.net",  443,  Deny,  Some("port_not_allowed"),      "org",     Some("pages.example.net:8443")),
        ("entry_port_allowed",        "pages.example.net",  8443, Allow, None,                          "org",     Some("pages.example.net:8443")),
    ]);
}

#[test]
fn denied_entry_with_port_denies_that_port_only() {
    let org = OrgPolicy::from_toml(
        &ORG.replace(
            r#"denied_domains = ["bad.example.org"]"#,
            r#"denied_domains = ["bad.example.org", "*.example.org:8080"]"#,
        ),
        "org.toml",
    )
    .unwrap();
    #[rustfmt::skip]
    run(&org, &[], &[
        ("denied_on_its_port",        "x.example.org",      8080, Deny,  Some("denied_domain"),         "org",     Some("*.example.org:8080")),
        ("other_port_still_allowed",  "x.example.org",      443,  Allow, None,                          "org",     Some("*.example.org")),
        ("portless_denies_every_port","bad.example.org",    443,  Deny,  Some("denied_domain"),         "org",     Some("bad.example.org")),
    ]);
}

#[test]
fn request_level_reasons() {
    let org = org_with("");
    let disabled = RequestPolicy::Disabled;
    let narrow = allowlist(&["api.github.com:443", "*.example.org"], None);
    #[rustfmt::skip]
    run(&org, &[&narrow], &[
        ("allowed_at_every_level",   "api.github.com",  443, Allow, None,                          "request", Some("api.github.com")),
        ("trailing_dot_normalised",  "x.example.org.",  443, Allow, None,                          "request", Some("*.example.org")),
        ("request_port_not_allowed", "api.github.com",  80,  Deny,  Some("port_not_allowed"),      "request", Some("api.github.com:443")),
        ("not_in_request_policy",    "me.github.io",    443, Deny,  Some("not_in_request_policy"), "request", None),
        ("org_checked_first",        "evil.example",    443, Deny,  Some("not_in_org_allowlist"),  "org",     None),
    ]);
    #[rustfmt::skip]
    run(&org, &[&narrow, &disabled], &[
        ("network_disabled",         "api.github.com",  443, Deny,  Some("network_disabled"),      "request", None),
    ]);
}

type SharedCase<'a> = (
    &'a str,
    &'a OrgPolicy,
    &'a str,
    VerdictKind,
    Option<Reason>,
    bool,
);

#[test]
fn shared_hosting_flag_and_deny() {
    let flag = org_with("");
    let deny =
        org_with("[shared_hosting]\naction = \"deny\"\nextra_domains = [\"*.example.org\"]\n");
    let cases: &[SharedCase] = &[
        (
            "flag_allows_and_marks",
            &flag,
            "me.github.io",
            Allow,
            None,
            true,
        ),
        ("flag_sink_marks", &flag, "webhook.site", Allow, None, true),
        (
            "deny_private_suffix",
            &deny,
            "me.github.io",
            Deny,
            Some(Reason::SharedHosting),
            true,
        ),
        (
            "deny_extra_domain",
            &deny,
            "a.example.org",
            Deny,
            Some(Reason::SharedHosting),
            true,
        ),
        (
            "marked_whatever_verdict",
            &flag,
            "x.webhook.site",
            Deny,
            Some(Reason::NotInOrgAllowlist),
            true,
        ),
        (
            "ordinary_not_marked",
            &deny,
            "api.github.com",
            Allow,
            None,
            false,
        ),
    ];
    for (rule, org, host, verdict, reason, shared) in cases {
        let d = decide(&Effective { org, levels: &[] }, &target(host, 443));
        assert_eq!(
            (d.verdict.kind(), d.reason(), d.shared_hosting),
            (*verdict, *reason, *shared),
            "{rule}"
        );
    }
    let d = decide(
        &Effective {
            org: &deny,
            levels: &[],
        },
        &target("me.github.io", 443),
    );
    assert_eq!(
        (d.level, d.rule.as_deref()),
        (Level::Org, Some("github.io"))
    );
}

#[test]
fn report_mode_relaxes_allowlist_denials_only() {
    let org = org_with("mode = \"report\"\n[shared_hosting]\naction = \"deny\"\n");
    let disabled = RequestPolicy::Disabled;
    #[rustfmt::skip]
    run(&org, &[], &[
        ("would_deny_not_in_org",     "evil.example",    443, WouldDeny, Some("not_in_org_allowlist"), "org",     None),
        ("would_deny_denied_domain",  "bad.example.org", 443, WouldDeny, Some("denied_domain"),        "org",     Some("bad.example.org")),
        ("would_deny_port",           "api.github.com",  22,  WouldDeny, Some("port_not_allowed"),     "org",     Some("api.github.com")),
        ("would_deny_shared_hosting", "me.github.io",    443, WouldDeny, Some("shared_hosting"),       "org",     Some("github.io")),
        ("private_address_enforced",  "127.0.0.1",       443, Deny,      Some("private_address"),      "address", None),
        ("ip_not_in_org_relaxed",     "8.8.8.8",         443, WouldDeny, Some("not_in_org_allowlist"), "org",     None),
    ]);
    #[rustfmt::skip]
    run(&org, &[&disabled], &[
        ("would_deny_disabled",       "api.github.com",  443, WouldDeny, Some("network_disabled"),     "request", None),
    ]);
    let eff = Effective {
        org: &org,
        levels: &[],
    };
    assert!(decide(&eff, &target("evil.example", 443)).is_allowed());
    let d = check_address(&eff, "127.0.0.1".parse().unwrap(), &[], 443);
    assert_eq!(d.verdict.kind(), Deny, "address level never relaxed");
}

#[test]
fn ip_literal_targets() {
    let org = org_with("");
    let with_cidrs = allowlist(&["api.github.com"], Some(&["10.20.1.0/24"]));
    let without = allowlist(&["api.github.com"], None);
    let disabled = RequestPolicy::Disabled;
    #[rustfmt::skip]
    run(&org, &[], &[
        ("org_cidr_allows",             "10.20.0.5",           443, Allow, None,                         "org",     Some("10.20.0.0/16")),
        ("lenient_spelling_judged",     "0x7f.1",              443, Deny,  Some("private_address"),      "address", None),
        ("loopback_private",            "2130706433",          443, Deny,  Some("private_address"),      "address", None),
        ("mapped_loopback_private",     "[::ffff:127.0.0.1]",  443, Deny,  Some("private_address"),      "address", None),
        ("mapped_v4_uses_v4_cidr",      "[::ffff:10.20.0.5]",  443, Allow, None,                         "org",     Some("10.20.0.0/16")),
        ("public_ip_not_in_org",        "8.8.8.8",             443, Deny,  Some("not_in_org_allowlist"), "org",     None),
        ("ipv6_cidr",                   "[fd00::1]",           443, Allow, None,                         "org",     Some("fd00::/8")),
        ("ip_port_not_allowed",         "10.20.0.5",           22,  Deny,  Some("port_not_allowed"),     "org",     Some("10.20.0.0/16")),
    ]);
    #[rustfmt::skip]
    run(&org, &[&with_cidrs], &[
        ("request_cidr_allows",         "10.20.1.7",           443, Allow, None,                          "request", Some("10.20.0.0/16")),
        ("request_cidr_narrows",        "10.20.2.7",           443, Deny,  Some("not_in_request_policy"), "request", None),
    ]);
    #[rustfmt::skip]
    run(&org, &[&without], &[
        ("no_request_cidrs_no_ips",     "10.20.1.7",           443, Deny,  Some("not_in_request_policy"), "request", None),
    ]);
    #[rustfmt::skip]
    run(&org, &[&disabled], &[
        ("ip_under_disabled",           "10.20.1.7",           443, Deny,  Some("network_disabled"),      "request", None),
    ]);
}

type AddressCase<'a> = (
    &'a str,
    &'a [&'a RequestPolicy],
    &'a str,
    u16,
    VerdictKind,
    Option<&'a str>,
);

#[test]
fn address_level() {
    let org = org_with("");
    let with_cidrs = allowlist(&["api.github.com"], Some(&["10.20.1.0/24"]));
    let without = allowlist(&["api.github.com"], None);
    let own: Vec<SocketAddr> = vec![
        "127.0.0.1:3128".parse().unwrap(),
        "[::]:9000".parse().unwrap(),
    ];
    #[rustfmt::skip]
    let cases: &[AddressCase] = &[
        ("public_passes",                &[],            "93.184.216.34",   443,  Allow, None),
        ("loopback_refused",             &[],            "127.0.0.2",       443,  Deny,  None),
        ("metadata_refused",             &[],            "169.254.169.254", 80,   Deny,  None),
        ("private_in_org_cidr",          &[],            "10.20.3.4",       443,  Allow, Some("10.20.0.0/16")),
        ("level_without_cidrs_no_narrow", &[&without],   "10.20.3.4",       443,  Allow, Some("10.20.0.0/16")),
        ("level_cidrs_narrow",           &[&with_cidrs], "10.20.3.4",       443,  Deny,  None),
        ("level_cidrs_allow",            &[&with_cidrs], "10.20.1.4",       443,  Allow, Some("10.20.0.0/16")),
        ("own_listener",                 &[],            "127.0.0.1",       3128, Deny,  Some("own listener")),
        ("own_listener_mapped",          &[],            "::ffff:127.0.0.1", 3128, Deny, Some("own listener")),
        ("wildcard_listener_local",      &[],            "10.20.3.4",       9000, Deny,  Some("own listener")),
        ("unspecified_is_this_host",     &[],            "0.0.0.0",         9000, Deny,  Some("unspecified address (this host)")),
        ("other_port_not_own",           &[],            "127.0.0.1",       3129, Deny,  None),
    ];
    for (rule, levels, ip, port, verdict, by) in cases {
        let eff = Effective { org: &org, levels };
        let d = check_address(&eff, ip.parse().unwrap(), &own, *port);
        assert_eq!(
            (d.verdict.kind(), d.rule.as_deref(), d.level),
            (*verdict, *by, Level::Address),
            "{rule}"
        );
        if d.verdict.kind() == Deny {
            assert_eq!(d.reason(), Some(Reason::PrivateAddress), "{rule}");
        }
    }
}

#[test]
fn reasons_spell_and_map_to_status() {
    let spelled: Vec<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        spelled,
        [
            "not_in_org_allowlist",
            "not_in_request_policy",
            "network_disabled",
            "denied_domain",
            "port_not_allowed",
            "shared_hosting",
            "private_address",
            "policy_widening",
            "invalid_host",
            "invalid_request",
            "invalid_policy",
            "host_mismatch",
            "sni_mismatch",
            "auth_required",
            "limit_exceeded",
            "audit_unavailable",
            "method_not_allowed",
            "path_not_allowed",
            "upload_budget_exceeded",
            "session_store_unavailable",
            "exfiltration_detected",
            "secret_detected",
        ]
    );
    for r in Reason::ALL {
        assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
    }
    #[rustfmt::skip]
    let status: &[(Reason, u16, bool)] = &[
        (Reason::InvalidRequest, 400, false), (Reason::InvalidHost, 400, false),
        (Reason::InvalidPolicy, 400, false), (Reason::PolicyWidening, 403, false),
        (Reason::HostMismatch, 403, false), (Reason::SniMismatch, 403, false),
        (Reason::PrivateAddress, 403, false), (Reason::DeniedDomain, 403, true),
        (Reason::NotInOrgAllowlist, 403, true), (Reason::NotInRequestPolicy, 403, true),
        (Reason::NetworkDisabled, 403, true), (Reason::PortNotAllowed, 403, true),
        (Reason::SharedHosting, 403, true), (Reason::AuthRequired, 407, false),
        (Reason::LimitExceeded, 429, false), (Reason::AuditUnavailable, 503, false),
        (Reason::MethodNotAllowed, 403, true), (Reason::PathNotAllowed, 403, true),
        (Reason::UploadBudgetExceeded, 403, false),
        (Reason::SessionStoreUnavailable, 503, false),
        (Reason::ExfiltrationDetected, 403, false), (Reason::SecretDetected, 403, false),
    ];
    for (r, code, relaxed) in status {
        assert_eq!(
            (r.status(), r.relaxed_in_report_mode()),
            (*code, *relaxed),
            "{r}"
        );
    }
    assert_eq!(serde_json::to_value(Level::Address).unwrap(), "address");
    assert_eq!(
        serde_json::to_value(VerdictKind::WouldDeny).unwrap(),
        "would_deny"
    );
}

#[test]
fn unspecified_address_is_refused_whatever_the_cidrs() {
    let org = OrgPolicy::from_toml(
        "version = 1\nallowed_cidrs = [\"0.0.0.0/0\", \"::/0\"]\n",
        "org.toml",
    )
    .unwrap();
    let eff = Effective {
        org: &org,
        levels: &[],
    };
    for ip in ["0.0.0.0", "0.1.2.3", "::", "::ffff:0.0.0.0"] {
        let d = check_address(&eff, ip.parse().unwrap(), &[], 80);
        assert_eq!(d.reason(), Some(Reason::PrivateAddress), "{ip}");
    }
    let d = check_address(&eff, "10.1.2.3".parse().unwrap(), &[], 80);
    assert_eq!(
        d.verdict.kind(),
        VerdictKind::Allow,
        "an ordinary private address opened by a CIDR passes"
    );
}
