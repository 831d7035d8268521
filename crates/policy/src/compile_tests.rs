//! Loading organization and request policies: defaults, positions, every problem at once.

use super::*;
use crate::compiled::{DomainSet, Mode, SharedHostingAction, Tunnels};
use crate::host::{DomainEntry, HostName};

fn org(text: &str) -> OrgPolicy {
    OrgPolicy::from_toml(text, "org.toml").unwrap_or_else(|e| panic!("{e}"))
}

fn org_err(text: &str) -> PolicyError {
    OrgPolicy::from_toml(text, "org.toml").unwrap_err()
}

fn host(s: &str) -> HostName {
    HostName::parse(s).unwrap()
}

#[test]
fn defaults_follow_spec_10() {
    let o = org("version = 1\n");
    assert_eq!(o.mode, Mode::Enforce);
    assert!(o.allowed.is_empty());
    assert_eq!(o.allowed_ports, vec![80, 443]);
    assert!(o.allowed_cidrs.is_empty());
    assert_eq!(o.default_policy, RequestPolicy::Disabled);
    assert_eq!(o.shared_hosting_action, SharedHostingAction::Flag);
    assert_eq!(o.tunnels, Tunnels::default());
    assert_eq!(o.source, "org.toml");
}

#[test]
fn full_file_loads() {
    let o = org(r#"
version = 1
name = "example-org"
mode = "report"
allowed_domains = ["api.github.com", "docs.example.com", "*.example.org:443"]
denied_domains = ["bad.example.org"]
allowed_ports = [80, 443, 8443]
allowed_cidrs = ["10.20.0.0/16", "fd00::/8"]
default_network_policy = { type = "allowlist", allowed_domains = ["api.github.com"] }

[shared_hosting]
action = "deny"
extra_domains = ["webhook.site"]

[tunnels]
require_tls = true
"#);
    assert_eq!(o.name, "example-org");
    assert_eq!(o.mode, Mode::Report);
    assert_eq!(o.allowed.len(), 3);
    assert_eq!(o.denied.len(), 1);
    assert_eq!(o.allowed_ports, vec![80, 443, 8443]);
    assert_eq!(o.allowed_cidrs.len(), 2);
    assert_eq!(o.shared_hosting_action, SharedHostingAction::Deny);
    assert_eq!(o.shared_hosting_extra.len(), 1);
    assert_eq!(o.tunnels.require_tls, Some(true));
    assert_eq!(o.tunnels.require_sni, None);
    assert!(matches!(
        o.default_policy,
        RequestPolicy::Allowlist { cidrs: None, .. }
    ));
}

#[test]
fn load_errors_name_line_and_column() {
    #[rustfmt::skip]
    let cases: &[(&str, &str, &str)] = &[
        ("version_required",    "name = \"x\"\n",                               "org.toml:1:1: "),
        ("version_must_be_1",   "version = 2\n",                                "org.toml:1:11: unsupported version 2"),
        ("unknown_key",         "version = 1\nallowed_domain = []\n",           "org.toml:2:1: unknown field `allowed_domain`"),
        ("unknown_key_table",   "version = 1\n[shared_hosting]\nactoin = \"deny\"\n", "org.toml:3:1: unknown field `actoin`"),
        ("unknown_key_tunnels", "version = 1\n[tunnels]\nrequire = true\n",     "org.toml:3:1: unknown field `require`"),
        ("unknown_mode",        "version = 1\nmode = \"audit\"\n",              "org.toml:2:8: unknown variant `audit`"),
        ("bad_entry",           "version = 1\nallowed_domains = [\"ok.com\", \"*.com\"]\n", "org.toml:2:30: entry \"*.com\": `*.com` would match"),
        ("ip_entry",            "version = 1\ndenied_domains = [\"10.0.0.1\"]\n", "org.toml:2:19: entry \"10.0.0.1\": an IP address is not a domain: IPs go in allowed_cidrs"),
        ("port_out_of_range",   "version = 1\nallowed_ports = [443, 70000]\n",  "org.toml:2:23: port 70000 is not in 1-65535"),
        ("port_zero",           "version = 1\nallowed_ports = [0]\n",           "org.toml:2:18: port 0 is not in 1-65535"),
        ("bare_ip_cidr",        "version = 1\nallowed_cidrs = [\"10.0.0.1\"]\n", "org.toml:2:18: entry \"10.0.0.1\": write a CIDR"),
        ("bad_cidr",            "version = 1\nallowed_cidrs = [\"10.0.0.0/33\"]\n", "org.toml:2:18: entry \"10.0.0.0/33\": not a CIDR"),
        ("extra_domains_entry", "version = 1\n[shared_hosting]\nextra_domains = [\"a/b\"]\n", "org.toml:3:18: entry \"a/b\": entries are host names, not URLs: remove the path"),
        ("default_unknown_key", "version = 1\ndefault_network_policy = { type = \"disabled\", x = 1 }\n", "org.toml:2:"),
        ("default_bad_type",    "version = 1\ndefault_network_policy = { type = \"open\" }\n", "org.toml:2:"),
        ("default_empty_list",  "version = 1\ndefault_network_policy = { type = \"allowlist\", allowed_domains = [] }\n", "org.toml:2:26: allowed_domains must not be empty"),
        ("toml_syntax",         "version = 1\nallowed_domains = [\n",           "org.toml:3:1: "),
    ];
    for (rule, text, want) in cases {
        let err = org_err(text).to_string();
        assert!(
            err.starts_with(want),
            "{rule}: got {err:?}, want prefix {want:?}"
        );
    }
}

#[test]
fn every_entry_problem_is_reported() {
    let err = org_err(
        "version = 1\nallowed_domains = [\"*\", \"ok.com\", \"https://x.com\"]\n\
         denied_domains = [\"a.*.com\"]\nallowed_cidrs = [\"nope\"]\n",
    );
    let entries: Vec<_> = err.problems.iter().map(|p| p.entry.as_deref()).collect();
    assert_eq!(
        entries,
        vec![
            Some("*"),
            Some("https://x.com"),
            Some("a.*.com"),
            Some("nope")
        ]
    );
    assert_eq!(err.to_string().lines().count(), 4);
}

#[test]
fn default_policy_widening_is_a_load_error() {
    let err = org_err(
        "version = 1\nallowed_domains = [\"api.github.com\"]\n\
         default_network_policy = { type = \"allowlist\", allowed_domains = [\"api.github.com\", \"evil.example\", \"*.github.com\"] }\n",
    );
    let text = err.to_string();
    assert_eq!(err.problems.len(), 2, "{text}");
    assert!(text.contains("org.toml:3:85: entry \"evil.example\": default_network_policy widens the organization policy: not in the organization allowlist"), "{text}");
    assert!(text.contains("entry \"*.github.com\""), "{text}");
}

#[test]
fn default_policy_cidrs_must_be_covered() {
    let err = org_err(
        "version = 1\nallowed_domains = [\"a.com\"]\nallowed_cidrs = [\"10.0.0.0/8\"]\n\
         default_network_policy = { type = \"allowlist\", allowed_domains = [\"a.com\"], allowed_cidrs = [\"11.0.0.0/8\"] }\n",
    );
    assert_eq!(err.problems[0].entry.as_deref(), Some("11.0.0.0/8"));
}

#[test]
fn request_policy_json() {
    #[rustfmt::skip]
    let cases: &[(&str, &str, Result<usize, &str>)] = &[
        ("disabled",                 r#"{"type":"disabled"}"#,                                   Ok(0)),
        ("allowlist",                r#"{"type":"allowlist","allowed_domains":["a.com","*.b.com:443"]}"#, Ok(2)),
        ("allowlist_cidrs",          r#"{"type":"allowlist","allowed_domains":["a.com"],"allowed_cidrs":["10.0.0.0/8"]}"#, Ok(1)),
        ("empty_allowlist",          r#"{"type":"allowlist","allowed_domains":[]}"#,             Err("p.json:1:1: allowed_domains must not be empty")),
        ("missing_allowlist",        r#"{"type":"allowlist"}"#,                                  Err("p.json:1:1: missing field `allowed_domains`")),
        ("unknown_type",             r#"{"type":"open"}"#,                                       Err("p.json:1:")),
        ("missing_type",             r#"{"allowed_domains":["a.com"]}"#,                         Err("p.json:1:")),
        ("unknown_key_allowlist",    r#"{"type":"allowlist","allowed_domains":["a.com"],"x":1}"#, Err("p.json:1:49: unknown field `x`")),
        ("unknown_key_disabled",     r#"{"type":"disabled","allowed_domains":["a.com"]}"#,      Err("p.json:1:")),
        ("bad_entry_position",       "{\"type\":\"allowlist\",\n \"allowed_domains\":[\"a.com\", \"*.com\"]}", Err("p.json:2:30: entry \"*.com\": `*.com` would match")),
        ("bad_cidr",                 r#"{"type":"allowlist","allowed_domains":["a.com"],"allowed_cidrs":["10.0.0.1"]}"#, Err("p.json:1:66: entry \"10.0.0.1\": write a CIDR")),
        ("not_json",                 "{",                                                        Err("p.json:1:")),
    ];
    for (rule, text, want) in cases {
        let got = RequestPolicy::from_json(text, "p.json");
        match (got, want) {
            (Ok(RequestPolicy::Disabled), Ok(0)) => {}
            (Ok(RequestPolicy::Allowlist { domains, .. }), Ok(n)) => {
                assert_eq!(domains.len(), *n, "{rule}")
            }
            (Err(e), Err(prefix)) => {
                let e = e.to_string();
                assert!(
                    e.starts_with(prefix),
                    "{rule}: got {e:?}, want prefix {prefix:?}"
                );
            }
            (got, _) => panic!("{rule}: got {got:?}"),
        }
    }
}

#[test]
fn unknown_key_is_named() {
    let e = RequestPolicy::from_json(
        r#"{"type":"allowlist","allowed_domains":["a.com"],"extra":1}"#,
        "p.json",
    )
    .unwrap_err();
    assert!(e.to_string().contains("unknown field `extra`"), "{e}");
}

#[test]
fn request_policy_from_value() {
    let v = serde_json::json!({"type": "allowlist", "allowed_domains": ["a.com", "*.com"]});
    let e = RequestPolicy::from_value(&v, "session").unwrap_err();
    assert_eq!(e.to_string().lines().next().unwrap(), "session: entry \"*.com\": `*.com` would match everything under the public suffix `com`; name a registrable domain below it");
    let ok = serde_json::json!({"type": "disabled"});
    assert_eq!(
        RequestPolicy::from_value(&ok, "session"),
        Ok(RequestPolicy::Disabled)
    );
}

#[test]
fn domain_set_index() {
    let set = DomainSet::from_entries(
        [
            "a.b.example.com",
            "*.example.com",
            "*.b.example.com",
            "*.other.com",
            "example.com",
        ]
        .iter()
        .map(|s| DomainEntry::parse(s).unwrap())
        .collect(),
    );
    #[rustfmt::skip]
    let cases: &[(&str, &[&str])] = &[
        ("a.b.example.com", &["a.b.example.com", "*.b.example.com", "*.example.com"]),
        ("x.example.com",   &["*.example.com"]),
        ("example.com",     &["example.com"]),
        ("b.example.com",   &["*.example.com"]),
        ("other.com",       &[]),
        ("badexample.com",  &[]),
    ];
    for (h, want) in cases {
        let got: Vec<&str> = set.matching(&host(h)).map(|e| &*e.text).collect();
        assert_eq!(got, *want, "{h}");
    }
}

/// Entries for one name share a chain in the index: they come back in entry order, and
/// `subtrees_at_or_above` counts a base equal to the name.
#[test]
fn domain_set_index_chains_keep_entry_order() {
    let set = DomainSet::from_entries(
        [
            "*.example.com:8443",
            "api.example.com:443",
            "*.example.com",
            "api.example.com",
        ]
        .iter()
        .map(|s| DomainEntry::parse(s).unwrap())
        .collect(),
    );
    let got: Vec<&str> = set
        .matching(&host("api.example.com"))
        .map(|e| &*e.text)
        .collect();
    let want = [
        "api.example.com:443",
        "api.example.com",
        "*.example.com:8443",
        "*.example.com",
    ];
    assert_eq!(got, want);
    let above: Vec<&str> = set
        .subtrees_at_or_above(&host("example.com"))
        .map(|e| &*e.text)
        .collect();
    assert_eq!(above, ["*.example.com:8443", "*.example.com"]);
    assert_eq!(set.subtrees_at_or_above(&host("com")).count(), 0);
}

#[test]
fn cidrs_are_truncated_to_their_network() {
    let o = org("version = 1\nallowed_cidrs = [\"10.1.2.3/8\"]\n");
    assert_eq!(o.allowed_cidrs[0].to_string(), "10.0.0.0/8");
}
