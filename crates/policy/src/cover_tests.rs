//! The narrowing relation: a coverage table, the law "covered means every host:port R
//! matches, O matches", and `check_narrowing` naming every offender.

use super::*;
use crate::host::HostName;
use proptest::prelude::*;

const PORTS: &[u16] = &[80, 443];

fn entry(s: &str) -> DomainEntry {
    DomainEntry::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

fn set(list: &[&str]) -> DomainSet {
    DomainSet::from_entries(list.iter().map(|s| entry(s)).collect())
}

#[test]
fn entry_coverage() {
    #[rustfmt::skip]
    let cases: &[(&str, &str, &str, bool)] = &[
        ("exact_by_same_exact",            "a.example.com",     "a.example.com",   true),
        ("exact_not_by_other_exact",       "a.example.com",     "b.example.com",   false),
        ("exact_by_subtree_above",         "a.example.com",     "*.example.com",   true),
        ("exact_deep_by_subtree_above",    "x.a.example.com",   "*.example.com",   true),
        ("apex_not_by_its_subtree",        "example.com",       "*.example.com",   false),
        ("subtree_by_same_subtree",        "*.example.com",     "*.example.com",   true),
        ("subtree_by_subtree_above",       "*.a.example.com",   "*.example.com",   true),
        ("subtree_not_by_subtree_below",   "*.example.com",     "*.a.example.com", false),
        ("subtree_never_by_exact_apex",    "*.example.com",     "example.com",     false),
        ("subtree_never_by_exact_below",   "*.example.com",     "a.example.com",   false),
        ("boundary_respected",             "a.badexample.com",  "*.example.com",   false),
        ("port_by_portless_default",       "a.com:443",         "a.com",           true),
        ("port_not_by_portless_other",     "a.com:8080",        "a.com",           false),
        ("port_by_same_port",              "a.com:8080",        "a.com:8080",      true),
        ("portless_not_by_one_port",       "a.com",             "a.com:443",       false),
        ("portless_by_portless",           "a.com",             "a.com",           true),
        ("port_not_by_other_port",         "a.com:443",         "a.com:80",        false),
    ];
    for (rule, r, o, want) in cases {
        assert_eq!(entry_covered(&entry(r), &entry(o), PORTS), *want, "{rule}");
    }
}

#[test]
fn set_coverage() {
    #[rustfmt::skip]
    let cases: &[(&str, &[&str], &str, bool)] = &[
        ("ports_split_over_entries",   &["a.com:80", "a.com:443"],  "a.com",            true),
        ("one_port_missing",           &["a.com:443"],              "a.com",            false),
        ("ports_from_subtree_and_exact", &["*.com.example", "a.com.example:80"], "x.com.example:80", true),
        ("subtree_by_higher_subtree",  &["b.com", "*.example.com"], "*.x.example.com",  true),
        ("subtree_not_by_exacts",      &["a.example.com"],          "*.example.com",    false),
        ("empty_set_covers_nothing",   &[],                         "a.com",            false),
    ];
    for (rule, list, r, want) in cases {
        assert_eq!(set_covers(&set(list), &entry(r), PORTS), *want, "{rule}");
    }
}

fn org(allowed: &[&str], cidrs: &[&str]) -> OrgPolicy {
    let quote = |l: &[&str]| {
        l.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let text = format!(
        "version = 1\nallowed_domains = [{}]\nallowed_cidrs = [{}]\n",
        quote(allowed),
        quote(cidrs)
    );
    OrgPolicy::from_toml(&text, "org.toml").unwrap()
}

fn allowlist(domains: &[&str], cidrs: Option<&[&str]>) -> RequestPolicy {
    let mut policy = serde_json::json!({"type": "allowlist", "allowed_domains": domains});
    if let Some(cidrs) = cidrs {
        policy["allowed_cidrs"] = cidrs.into();
    }
    RequestPolicy::from_value(&policy, "request.json").unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn narrowing_names_every_offender() {
    let org = org(&["api.github.com", "*.example.org"], &["10.0.0.0/8"]);
    let req = allowlist(
        &[
            "api.github.com",
            "evil.example",
            "a.example.org",
            "*.github.com",
            "example.org",
        ],
        Some(&["10.1.0.0/16", "192.168.0.0/16"]),
    );
    let err = check_narrowing(&org, &[], &req).unwrap_err();
    assert_eq!(
        err.offending,
        vec![
            "evil.example: not in the organization allowlist",
            "*.github.com: not in the organization allowlist",
            "example.org: not in the organization allowlist",
            "192.168.0.0/16: not within the organization allowed_cidrs",
        ]
    );
    assert!(err.to_string().contains("; *.github.com: not in"));
}

/// (rule, upper levels, request policy, expected offenders).
type NarrowCase<'a> = (
    &'a str,
    Vec<&'a RequestPolicy>,
    RequestPolicy,
    Result<(), Vec<&'a str>>,
);

#[test]
fn narrowing_against_upper_levels() {
    let org = org(&["api.github.com", "*.example.org"], &["10.0.0.0/8"]);
    let upper = allowlist(&["*.example.org"], None);
    let upper_cidrs = allowlist(&["*.example.org"], Some(&["10.1.0.0/16"]));
    let disabled = RequestPolicy::Disabled;
    #[rustfmt::skip]
    let cases: Vec<NarrowCase> = vec![
        ("disabled_narrows_everything", vec![&disabled], RequestPolicy::Disabled, Ok(())),
        ("covered_by_all_levels",  vec![&upper], allowlist(&["a.example.org"], None), Ok(())),
        ("allowlist_under_disabled", vec![&disabled], allowlist(&["a.example.org", "api.github.com"], None),
            Err(vec!["a.example.org: network is disabled at the level above",
                     "api.github.com: network is disabled at the level above"])),
        ("in_org_not_in_upper",    vec![&upper], allowlist(&["api.github.com", "b.example.org"], None),
            Err(vec!["api.github.com: not in the request policy above"])),
        ("cidr_upper_without_cidrs", vec![&upper], allowlist(&["a.example.org"], Some(&["10.1.0.0/16"])),
            Err(vec!["10.1.0.0/16: the level above allows no IP addresses (it has no allowed_cidrs)"])),
        ("cidr_within_upper",      vec![&upper_cidrs], allowlist(&["a.example.org"], Some(&["10.1.2.0/24"])), Ok(())),
        ("cidr_outside_upper",     vec![&upper_cidrs], allowlist(&["a.example.org"], Some(&["10.2.0.0/16"])),
            Err(vec!["10.2.0.0/16: not within the allowed_cidrs of the level above"])),
        ("every_upper_checked",    vec![&upper_cidrs, &upper], allowlist(&["a.example.org"], Some(&["10.1.2.0/24"])),
            Err(vec!["10.1.2.0/24: the level above allows no IP addresses (it has no allowed_cidrs)"])),
    ];
    for (rule, uppers, req, want) in cases {
        let got = check_narrowing(&org, &uppers, &req).map_err(|w| w.offending);
        let want = want.map_err(|v| v.into_iter().map(String::from).collect::<Vec<_>>());
        assert_eq!(got, want, "{rule}");
    }
}

fn label() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("a"), Just("b"), Just("c")]
}

fn name_strategy() -> impl Strategy<Value = String> {
    proptest::collection::vec(label(), 1..=4).prop_map(|l| l.join("."))
}

fn port() -> impl Strategy<Value = Option<u16>> {
    prop_oneof![
        Just(None),
        Just(Some(80)),
        Just(Some(443)),
        Just(Some(8080))
    ]
}

fn entry_strategy() -> impl Strategy<Value = DomainEntry> {
    // A `.x` suffix keeps every wildcard off a public suffix: `*.x` itself is never made.
    (any::<bool>(), name_strategy(), port()).prop_map(|(wild, name, port)| {
        let mut text = format!("{name}.x");
        if wild {
            text = format!("*.{text}");
        }
        if let Some(p) = port {
            text = format!("{text}:{p}");
        }
        DomainEntry::parse(&text).unwrap()
    })
}

proptest! {
    #[test]
    fn covered_means_every_match_of_r_matches_o(
        r in entry_strategy(),
        o in entry_strategy(),
        host in name_strategy(),
        p in prop_oneof![Just(80u16), Just(443), Just(8080)],
    ) {
        let host = HostName::parse(&format!("{host}.x")).unwrap();
        if entry_covered(&r, &o, PORTS) && r.matches(&host, p, PORTS) {
            prop_assert!(o.matches(&host, p, PORTS), "{} covered by {} but {host}:{p}", r, o);
        }
        // set_covers of a one-entry set agrees with entry_covered.
        let one = DomainSet::from_entries(vec![o.clone()]);
        prop_assert_eq!(set_covers(&one, &r, PORTS), entry_covered(&r, &o, PORTS));
    }
}

/// An entry with rules, as the compiler makes it: `methods` (or read-only) and `paths`.
fn ruled(host: &str, methods: Option<&[&str]>, paths: Option<&[&str]>) -> DomainEntry {
    use crate::rules::{PathRule, Rules};
    let mut e = entry(host);
    let methods = methods.map(|m| m.iter().map(|s| s.to_string()).collect());
    let paths = paths.map(|p| p.iter().map(|s| PathRule::parse(s).unwrap()).collect());
    e.rules = Some(std::sync::Arc::new(Rules::new(
        host, methods, paths, false, false,
    )));
    e
}

#[test]
fn rules_coverage() {
    let get: &[&str] = &["GET"];
    let get_post: &[&str] = &["GET", "POST"];
    let acme: &[&str] = &["/repos/acme/*"];
    #[rustfmt::skip]
    let cases: &[(&str, DomainEntry, DomainEntry, bool)] = &[
        ("methods_subset",            ruled("a.com", Some(get), None), ruled("a.com", Some(get_post), None), true),
        ("methods_superset",          ruled("a.com", Some(get_post), None), ruled("a.com", Some(get), None), false),
        ("no_methods_under_methods",  ruled("a.com", None, Some(acme)), ruled("a.com", Some(get), Some(acme)), false),
        ("plain_under_methods",       entry("a.com"), ruled("a.com", Some(get), None), false),
        ("plain_under_paths",         entry("a.com"), ruled("a.com", None, Some(acme)), false),
        ("rules_under_plain",         ruled("a.com", Some(get), Some(acme)), entry("a.com"), true),
        ("exact_path_in_prefix",      ruled("a.com", None, Some(&["/repos/acme/w"])), ruled("a.com", None, Some(acme)), true),
        ("prefix_in_prefix",          ruled("a.com", None, Some(&["/repos/acme/w/*"])), ruled("a.com", None, Some(acme)), true),
        ("prefix_not_in_exact",       ruled("a.com", None, Some(acme)), ruled("a.com", None, Some(&["/repos/acme/w"])), false),
        ("one_path_outside",          ruled("a.com", None, Some(&["/repos/acme/w", "/user"])), ruled("a.com", None, Some(acme)), false),
        ("sibling_prefix",            ruled("a.com", None, Some(&["/repos/acmex/*"])), ruled("a.com", None, Some(acme)), false),
        ("rules_and_host_both_count", ruled("b.com", Some(get), None), ruled("a.com", Some(get), None), false),
    ];
    for (rule, r, o, want) in cases {
        assert_eq!(entry_covered(r, o, PORTS), *want, "{rule}");
    }
}

#[test]
fn widening_by_rules_names_the_field() {
    let text = r#"version = 1
allowed_domains = [
  { host = "git.test", access = "read-only" },
  { host = "api.test", methods = ["GET"], paths = ["/repos/acme/*"] },
]
"#;
    let org = OrgPolicy::from_toml(text, "org.toml").unwrap();
    let req = RequestPolicy::from_json(
        r#"{"type": "allowlist", "allowed_domains": ["git.test",
            {"host": "api.test", "methods": ["GET"], "paths": ["/user"]},
            {"host": "api.test", "methods": ["GET", "DELETE"], "paths": ["/repos/acme/x"]},
            {"host": "api.test", "methods": ["GET"], "paths": ["/repos/acme/x/*"]}]}"#,
        "request.json",
    )
    .unwrap();
    let err = check_narrowing(&org, &[], &req).unwrap_err();
    let read_only = "{ host = \"git.test\", access = \"read-only\" }";
    let api = "{ host = \"api.test\", methods = [\"GET\"], paths = [\"/repos/acme/*\"] }";
    assert_eq!(
        err.offending,
        vec![
            format!("git.test: allows methods that `{read_only}` does not (its methods must be among them)"),
            format!("{{ host = \"api.test\", methods = [\"GET\"], paths = [\"/user\"] }}: allows paths that `{api}` does not (its paths must be among them)"),
            format!("{{ host = \"api.test\", methods = [\"GET\", \"DELETE\"], paths = [\"/repos/acme/x\"] }}: allows methods that `{api}` does not (its methods must be among them)"),
        ]
    );
}

fn methods_strategy() -> impl Strategy<Value = Option<Vec<&'static str>>> {
    let one = prop_oneof![Just("GET"), Just("POST"), Just("HEAD")];
    proptest::option::of(proptest::collection::vec(one, 1..=2))
}

fn paths_strategy() -> impl Strategy<Value = Option<Vec<&'static str>>> {
    let one = prop_oneof![
        Just("/a"),
        Just("/a/*"),
        Just("/a/b"),
        Just("/a/b/*"),
        Just("/b/*"),
        Just("/*")
    ];
    proptest::option::of(proptest::collection::vec(one, 1..=2))
}

fn ruled_strategy() -> impl Strategy<Value = DomainEntry> {
    (entry_strategy(), methods_strategy(), paths_strategy()).prop_map(|(e, m, p)| {
        if m.is_none() && p.is_none() {
            return e;
        }
        let text = e.text.to_string();
        ruled(&text, m.as_deref(), p.as_deref())
    })
}

proptest! {
    /// The law with rules: covered means every host:port:method:path R allows, O allows.
    #[test]
    fn covered_means_every_request_r_allows_o_allows(
        r in ruled_strategy(),
        o in ruled_strategy(),
        host in name_strategy(),
        p in prop_oneof![Just(80u16), Just(443), Just(8080)],
        method in prop_oneof![Just("GET"), Just("POST"), Just("HEAD")],
        path in prop_oneof![Just("/"), Just("/a"), Just("/a/b"), Just("/a/b/c"), Just("/b/x")],
    ) {
        let host = HostName::parse(&format!("{host}.x")).unwrap();
        let path = crate::normalize_path(path).unwrap();
        let allows = |e: &DomainEntry| {
            e.matches(&host, p, PORTS)
                && e.rules.as_ref().is_none_or(|x| x.allows_method(method) && x.allows_path(&path))
        };
        if entry_covered(&r, &o, PORTS) && allows(&r) {
            prop_assert!(allows(&o), "{} covered by {} but {method} {host}:{p}{path}", r.rule(), o.rule());
        }
        let one = DomainSet::from_entries(vec![o.clone()]);
        prop_assert_eq!(set_covers(&one, &r, PORTS), entry_covered(&r, &o, PORTS));
    }
}
