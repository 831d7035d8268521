//! The law of `diff`, over generated organization files, request policies and targets:
//! when it reports no widening, every connection and request the proxy allows under
//! NEW, it allows under OLD.

use std::net::IpAddr;

use proptest::prelude::*;

use super::*;
use crate::policy::{check_address, decide, decide_request, Effective, Host, Target};

const PATTERNS: &[&str] = &[
    "example.com",
    "a.example.com",
    "b.example.com",
    "x.a.example.com",
    "*.example.com",
    "*.a.example.com",
    "other.org",
    "me.github.io",
];
const PORTS: &[u16] = &[80, 443, 8080];
const CIDRS: &[&str] = &["10.0.0.0/8", "10.0.0.0/16", "127.0.0.0/8", "8.8.8.0/24"];
const HOSTS: &[&str] = &[
    "example.com",
    "a.example.com",
    "b.example.com",
    "x.a.example.com",
    "y.b.example.com",
    "other.org",
    "me.github.io",
    "10.0.0.1",
    "10.1.0.1",
    "127.0.0.1",
    "8.8.8.8",
];
const TARGET_PORTS: &[u16] = &[80, 443, 8080, 22];

/// A string entry: a pattern, maybe with a port.
fn plain_entry() -> impl Strategy<Value = String> {
    (
        prop::sample::select(PATTERNS),
        prop::option::of(prop::sample::select(PORTS)),
    )
        .prop_map(|(p, port)| match port {
            Some(port) => format!("{p}:{port}"),
            None => p.to_string(),
        })
}

const METHODS: &[&str] = &["GET", "POST"];
const PATH_RULES: &[&str] = &["/a/*", "/a/x", "/b"];

/// An entry, maybe with rules, written `host|methods|paths` (`-` for a field not set)
/// until [`toml_list`] or [`json_list`] renders it.
fn entry() -> impl Strategy<Value = String> {
    let field = |from: &'static [&'static str]| {
        prop::option::weighted(0.25, prop::sample::subsequence(from, 1..=from.len()))
    };
    (plain_entry(), field(METHODS), field(PATH_RULES)).prop_map(|(e, m, p)| {
        let f = |l: Option<Vec<&str>>| l.map_or("-".to_string(), |l| l.join(","));
        match (&m, &p) {
            (None, None) => e,
            _ => format!("{e}|{}|{}", f(m), f(p)),
        }
    })
}

/// The list in TOML (`json` false) or JSON; an entry with rules as a table.
fn render_list(list: &[String], json: bool) -> String {
    let items: Vec<String> = list
        .iter()
        .map(|s| {
            let mut parts = s.split('|');
            let host = parts.next().unwrap();
            let (Some(methods), Some(paths)) = (parts.next(), parts.next()) else {
                return format!("{s:?}");
            };
            let kv = |k: &str, v: String| match json {
                true => format!("{k:?}: {v}"),
                false => format!("{k} = {v}"),
            };
            let list = |v: &str| {
                let q: Vec<String> = v.split(',').map(|x| format!("{x:?}")).collect();
                format!("[{}]", q.join(", "))
            };
            let mut fields = vec![kv("host", format!("{host:?}"))];
            if methods != "-" {
                fields.push(kv("methods", list(methods)));
            }
            if paths != "-" {
                fields.push(kv("paths", list(paths)));
            }
            format!("{{ {} }}", fields.join(", "))
        })
        .collect();
    format!("[{}]", items.join(", "))
}

fn quoted(list: &[String]) -> String {
    render_list(list, false)
}

/// An organization file's settings, to render and to change a little.
#[derive(Clone, Debug)]
struct Spec {
    allowed: Vec<String>,
    denied: Vec<String>,
    ports: Vec<u16>,
    cidrs: Vec<String>,
    report: bool,
    deny_shared: bool,
    /// The default policy's entries (an allowlist when `Some`).
    default: Option<Vec<String>>,
}

impl Spec {
    fn render(&self) -> String {
        let mut s = format!(
            "version = 1\nmode = \"{}\"\nallowed_domains = {}\ndenied_domains = {}\nallowed_ports = {:?}\nallowed_cidrs = {}\n",
            if self.report { "report" } else { "enforce" },
            quoted(&self.allowed),
            quoted(&self.denied),
            self.ports,
            quoted(&self.cidrs),
        );
        if let Some(list) = self.default.as_ref().filter(|l| !l.is_empty()) {
            s += &format!(
                "default_network_policy = {{ type = \"allowlist\", allowed_domains = {} }}\n",
                quoted(list)
            );
        }
        let action = if self.deny_shared { "deny" } else { "flag" };
        s + &format!("[shared_hosting]\naction = \"{action}\"\n")
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec(entry(), 0..5),
        prop::collection::vec(plain_entry(), 0..3),
        prop::sample::subsequence(PORTS, 0..=3),
        prop::sample::subsequence(CIDRS, 0..=2),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(prop::collection::vec(any::<prop::sample::Index>(), 1..3)),
    )
        .prop_map(
            |(allowed, denied, ports, cidrs, report, deny_shared, picks)| {
                // The default takes some of the organization's own entries, so it loads.
                let default = picks.filter(|_| !allowed.is_empty()).map(|picks| {
                    picks
                        .iter()
                        .map(|i| allowed[i.index(allowed.len())].clone())
                        .collect()
                });
                Spec {
                    allowed,
                    denied,
                    ports,
                    cidrs: cidrs.iter().map(|c| c.to_string()).collect(),
                    report,
                    deny_shared,
                    default,
                }
            },
        )
}

/// A list with some entries dropped and maybe one added.
fn edit(list: &[String], keep: &[bool], add: Option<String>) -> Vec<String> {
    let mut out: Vec<String> = list
        .iter()
        .zip(keep.iter().chain(std::iter::repeat(&true)))
        .filter(|(_, k)| **k)
        .map(|(e, _)| e.clone())
        .collect();
    out.extend(add);
    out
}

/// OLD and a NEW made from it by small edits, so that many pairs do not widen.
fn old_and_new() -> impl Strategy<Value = (Spec, Spec)> {
    let keep = || prop::collection::vec(prop::bool::weighted(0.8), 5);
    let add = || prop::option::weighted(0.3, entry());
    let add_plain = || prop::option::weighted(0.3, plain_entry());
    let flip = || prop::bool::weighted(0.15);
    (
        spec(),
        (keep(), add(), keep(), add_plain(), keep()),
        (
            prop::sample::subsequence(PORTS, 0..=3),
            flip(),
            flip(),
            flip(),
        ),
        (
            keep(),
            prop::option::weighted(0.2, prop::sample::select(CIDRS)),
        ),
    )
        .prop_map(
            |(old, (ka, aa, kd, ad, kdef), (ports, ports_flip, report, shared), (kc, ac))| {
                let new = Spec {
                    allowed: edit(&old.allowed, &ka, aa),
                    denied: edit(&old.denied, &kd, ad),
                    ports: if ports_flip { ports } else { old.ports.clone() },
                    cidrs: edit(&old.cidrs, &kc, ac.map(str::to_string)),
                    report: old.report ^ report,
                    deny_shared: old.deny_shared ^ shared,
                    default: old.default.as_ref().map(|d| edit(d, &kdef, None)),
                };
                (old, new)
            },
        )
}

/// Requests judged as well as connections: a method and a path, or none (`CONNECT`).
const REQUESTS: &[Option<(&str, &str)>] = &[
    None,
    Some(("GET", "/a/x")),
    Some(("POST", "/a/y")),
    Some(("GET", "/b")),
    Some(("PUT", "/c")),
];

/// What the proxy decides (as `check` does, for a connection): the decision, then the
/// address check of a literal IP.
fn allowed(
    org: &OrgPolicy,
    levels: &[&RequestPolicy],
    target: &Target,
    request: Option<(&str, &str)>,
) -> bool {
    let eff = Effective { org, levels };
    let decision = match request {
        None => decide(&eff, target),
        Some((method, path)) => {
            let path = crate::policy::normalize_path(path).unwrap();
            decide_request(
                &eff,
                target,
                &crate::policy::Http {
                    method,
                    path: &path,
                },
            )
        }
    };
    if !decision.is_allowed() {
        return false;
    }
    match target.host {
        Host::Ip(ip) => check_address(&eff, ip, &[], target.port).is_allowed(),
        Host::Name(_) => true,
    }
}

fn targets() -> Vec<Target> {
    let mut v = Vec::new();
    for h in HOSTS {
        for &port in TARGET_PORTS {
            let host = match h.parse::<IpAddr>() {
                Ok(ip) => Host::Ip(ip),
                Err(_) => Host::parse(h).unwrap(),
            };
            v.push(Target { host, port });
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn no_widening_means_new_allows_nothing_old_refused((old, new) in old_and_new()) {
        let (old, new) = (old.render(), new.render());
        let (Ok(o), Ok(n)) = (OrgPolicy::from_toml(&old, "old"), OrgPolicy::from_toml(&new, "new")) else {
            return Ok(()); // a pair that does not load is not diffed
        };
        let d = diff_texts(FileKind::Org, (&old, "old"), (&new, "new")).unwrap();
        if d.widens() {
            return Ok(());
        }
        for t in targets() {
            // The organization alone, and as `check` decides (its default policy).
            for (no, oo) in [(vec![], vec![]), (vec![n.default_policy()], vec![o.default_policy()])] {
                for &r in REQUESTS {
                    if allowed(&n, &no, &t, r) {
                        prop_assert!(allowed(&o, &oo, &t, r),
                            "{} {r:?} allowed by NEW only, yet no widening:\n{old}\n---\n{new}\n{:#?}",
                            t.host.authority(t.port), d.changes);
                    }
                }
            }
        }
    }

    #[test]
    fn no_widening_of_a_request_policy_means_it_allows_nothing_more(
        org in spec(),
        old in prop::collection::vec(entry(), 1..4),
        new in prop::collection::vec(entry(), 1..4),
    ) {
        let Ok(org) = OrgPolicy::from_toml(&org.render(), "org") else { return Ok(()) };
        let json = |l: &[String]| {
            format!(r#"{{"type": "allowlist", "allowed_domains": {}}}"#, render_list(l, true))
        };
        let (old, new) = (json(&old), json(&new));
        let (o, n) = (RequestPolicy::from_json(&old, "o").unwrap(), RequestPolicy::from_json(&new, "n").unwrap());
        let d = diff_texts(FileKind::Request, (&old, "o"), (&new, "n")).unwrap();
        if d.widens() {
            return Ok(());
        }
        for t in targets() {
            for &r in REQUESTS {
                if allowed(&org, &[&n], &t, r) {
                    prop_assert!(allowed(&org, &[&o], &t, r),
                        "{} {r:?} allowed by NEW only:\n{old}\n{new}\n{:#?}", t.host.authority(t.port), d.changes);
                }
            }
        }
    }
}

#[test]
fn generated_entries_with_rules_load_in_both_syntaxes() {
    let list = vec![
        "a.example.com:443|GET,POST|/a/*,/b".to_string(),
        "*.example.com|-|/a/x".to_string(),
        "other.org".to_string(),
    ];
    let toml = format!(
        "version = 1\nallowed_domains = {}\n",
        render_list(&list, false)
    );
    let org = OrgPolicy::from_toml(&toml, "t").unwrap_or_else(|e| panic!("{e}\n{toml}"));
    assert_eq!(
        org.allowed()
            .entries()
            .iter()
            .filter(|e| e.rules.is_some())
            .count(),
        2
    );
    let json = format!(
        r#"{{"type": "allowlist", "allowed_domains": {}}}"#,
        render_list(&list, true)
    );
    RequestPolicy::from_json(&json, "j").unwrap_or_else(|e| panic!("{e}\n{json}"));
}
