//! `audit suggest`: exact names, wildcards only from three siblings and only where they
//! load, are not shared hosting and the organization covers them; ports as used.

use std::path::PathBuf;

use super::*;
use crate::policy::{check_narrowing, RequestPolicy};

const ORG: &str = r#"
version = 1
allowed_domains = ["*.example.com", "*.github.io", "a.example.net", "b.example.net",
                   "c.example.net", "*.example.org", "*.example.org:8080", "x.com", "y.com", "z.com"]
denied_domains = ["secret.example.com"]
"#;

/// Write `lines` of `(event, host, port)` as an audit log and suggest from it.
fn suggest_from(org: &str, lines: &[(&str, &str, u16)]) -> Suggestion {
    let org = OrgPolicy::from_toml(org, "org.toml").unwrap();
    let dir = std::env::temp_dir().join(format!(
        "egress-suggest-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join("audit.jsonl");
    let text: String = lines
        .iter()
        .map(|(event, host, port)| {
            format!("{{\"ts\":\"2026-11-29T10:00:00Z\",\"event\":\"{event}\",\"host\":\"{host}\",\"port\":{port}}}\n")
        })
        .collect();
    std::fs::write(&path, text).unwrap();
    let s = suggest(&org, &[path]).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    // Whatever it suggests loads against the organization.
    let policy = RequestPolicy::from_value(&s.policy(), "suggested").unwrap();
    check_narrowing(&org, &[], &policy).unwrap();
    s
}

fn domains(s: &Suggestion) -> Vec<&str> {
    s.allowed_domains.iter().map(|e| &*e.entry).collect()
}

/// Log lines as (event, host, port).
type Lines = &'static [(&'static str, &'static str, u16)];

const A: &str = "egress.allowed";
const W: &str = "egress.would_deny";

#[test]
fn suggestions() {
    #[rustfmt::skip]
    let cases: &[(&str, Lines, &[&str])] = &[
        ("one_name_one_port",            &[(A, "a.example.com", 443)],                                      &["a.example.com:443"]),
        ("every_org_port_is_port_less",  &[(A, "a.example.com", 443), (A, "a.example.com", 80)],           &["a.example.com"]),
        ("would_deny_counts_as_used",    &[(W, "a.example.com", 443)],                                      &["a.example.com:443"]),
        ("denied_records_are_not_used",  &[("egress.denied", "a.example.com", 443)],                        &[]),
        ("two_siblings_stay_names",      &[(A, "a.example.com", 443), (A, "b.example.com", 443)],          &["a.example.com:443", "b.example.com:443"]),
        ("three_siblings_collapse",      &[(A, "a.example.com", 443), (A, "b.example.com", 443), (A, "c.example.com", 443)], &["*.example.com:443"]),
        ("wildcard_takes_the_union_of_ports", &[(A, "a.example.com", 443), (A, "b.example.com", 80), (A, "c.example.com", 443)], &["*.example.com"]),
        ("covered_deeper_name_is_dropped", &[(A, "a.example.com", 443), (A, "b.example.com", 443), (A, "c.example.com", 443), (A, "x.a.example.com", 443)], &["*.example.com:443"]),
        ("nested_wildcard_is_dropped",   &[(A, "a.x.example.com", 443), (A, "b.x.example.com", 443), (A, "c.x.example.com", 443), (A, "d.example.com", 443), (A, "e.example.com", 443), (A, "f.example.com", 443)], &["*.example.com:443"]),
        ("apex_is_not_under_its_wildcard", &[(A, "a.example.org", 443), (A, "b.example.org", 443), (A, "c.example.org", 443), (A, "example.org", 443)], &["*.example.org:443"]),
        ("not_over_a_public_suffix",     &[(A, "x.com", 443), (A, "y.com", 443), (A, "z.com", 443)],      &["x.com:443", "y.com:443", "z.com:443"]),
        ("not_on_shared_hosting",        &[(A, "a.github.io", 443), (A, "b.github.io", 443), (A, "c.github.io", 443)], &["a.github.io:443", "b.github.io:443", "c.github.io:443"]),
        ("not_where_the_org_has_only_names", &[(A, "a.example.net", 443), (A, "b.example.net", 443), (A, "c.example.net", 443)], &["a.example.net:443", "b.example.net:443", "c.example.net:443"]),
        ("other_ports_written_out",      &[(A, "a.example.org", 443), (A, "a.example.org", 80), (A, "a.example.org", 8080)], &["a.example.org", "a.example.org:8080"]),
        ("names_normalised",             &[(A, "A.Example.COM.", 443)],                                    &["a.example.com:443"]),
    ];
    for (name, lines, want) in cases {
        let s = suggest_from(ORG, lines);
        assert_eq!(domains(&s), *want, "{name}");
    }
}

#[test]
fn what_the_organization_refuses_is_left_out_with_its_reason() {
    let s = suggest_from(
        ORG,
        &[
            (A, "a.example.com", 443),
            (W, "evil.test", 443),
            (W, "secret.example.com", 443),
            (W, "a.example.com", 22),
        ],
    );
    assert_eq!(domains(&s), ["a.example.com:443"]);
    let left: Vec<(&str, u16, &str)> = s
        .left_out
        .iter()
        .map(|l| (&*l.host, l.port, l.reason))
        .collect();
    assert!(
        left.contains(&("evil.test", 443, "not_in_org_allowlist")),
        "{left:?}"
    );
    assert!(
        left.contains(&("secret.example.com", 443, "denied_domain")),
        "{left:?}"
    );
    assert!(
        left.contains(&("a.example.com", 22, "port_not_allowed")),
        "{left:?}"
    );
    assert!(left_out(&s).contains("evil.test:443"));
}

#[test]
fn shared_hosting_names_are_kept_and_listed() {
    let s = suggest_from(ORG, &[(A, "me.github.io", 443)]);
    assert_eq!(domains(&s), ["me.github.io:443"]);
    assert_eq!(s.shared_hosting, ["me.github.io"]);
}

#[test]
fn nothing_used_is_the_disabled_policy() {
    let s = suggest_from(ORG, &[(W, "evil.test", 443)]);
    assert_eq!(s.policy(), json!({"type": "disabled"}));
}

#[test]
fn literal_ips_inside_the_org_cidrs_become_host_routes() {
    let org =
        "version = 1\nallowed_domains = [\"a.example.com\"]\nallowed_cidrs = [\"10.0.0.0/8\"]\n";
    let s = suggest_from(
        org,
        &[
            (A, "a.example.com", 443),
            (A, "10.1.2.3", 443),
            (A, "8.8.8.8", 443),
        ],
    );
    assert_eq!(s.policy()["allowed_cidrs"], json!(["10.1.2.3/32"]));
    assert_eq!(s.left_out[0].host, "8.8.8.8");
}

#[test]
fn under_an_entry_with_rules_the_suggestion_has_rules_narrowed_to_the_methods_used() {
    let org = r#"
version = 1
allowed_domains = [{ host = "api.example.com", methods = ["GET", "POST"], paths = ["/v1/*"] }]
"#;
    let org = OrgPolicy::from_toml(org, "org.toml").unwrap();
    let dir = std::env::temp_dir().join(format!("egress-suggest-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("audit.jsonl");
    let line = |method: &str| {
        format!("{{\"ts\":\"2026-11-29T10:00:00Z\",\"event\":\"egress.allowed\",\"method\":\"{method}\",\"host\":\"api.example.com\",\"port\":443,\"url\":\"https://api.example.com/v1/x\"}}\n")
    };
    std::fs::write(&path, line("CONNECT") + &line("GET") + &line("GET")).unwrap();
    let s = suggest(&org, &[path]).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        s.policy()["allowed_domains"],
        json!([{"host": "api.example.com:443", "methods": ["GET"], "paths": ["/v1/*"]}])
    );
    let policy = RequestPolicy::from_value(&s.policy(), "suggested").unwrap();
    check_narrowing(&org, &[], &policy).unwrap();
}
