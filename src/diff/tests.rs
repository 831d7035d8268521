//! `diff` over pairs of policies: one line per kind of change (each widening kind, each
//! narrowing kind, reformatting as no change), and the law "no widening reported means
//! every host:port `check` allows under NEW, it allows under OLD".

use std::net::IpAddr;

use proptest::prelude::*;

use super::*;
use crate::policy::{check_address, decide, Effective, Host, Target};

fn org_diff(old: &str, new: &str) -> Diff {
    let old = format!("version = 1\n{old}");
    let new = format!("version = 1\n{new}");
    diff_texts(FileKind::Org, (&old, "old.toml"), (&new, "new.toml"))
        .unwrap_or_else(|e| panic!("{e}\n--- old\n{old}\n--- new\n{new}"))
}

fn request_diff(old: &str, new: &str) -> Diff {
    diff_texts(FileKind::Request, (old, "old.json"), (new, "new.json")).unwrap()
}

fn kinds(d: &Diff) -> Vec<(Effect, Kind)> {
    d.changes.iter().map(|c| (c.effect, c.kind)).collect()
}

use Effect::{Narrowing as N, Neutral as O, Widening as W};

/// The changes a case expects, as (effect, kind).
type Want = &'static [(Effect, Kind)];

#[test]
fn each_kind_of_organization_change() {
    #[rustfmt::skip]
    let cases: &[(&str, &str, &str, Want)] = &[
        // name, OLD (after `version = 1`), NEW, the changes expected
        ("identical", r#"allowed_domains = ["a.example.com"]"#, r#"allowed_domains = ["a.example.com"]"#, &[]),
        ("reordered", r#"allowed_domains = ["a.example.com", "b.example.com"]"#, r#"allowed_domains = ["b.example.com", "a.example.com"]"#, &[]),
        ("reformatted", r#"allowed_domains = ["a.example.com", "b.example.com"]"#, "# a comment\nallowed_domains = [\n  \"A.Example.COM.\",   # upper case, trailing dot\n  \"b.example.com\",\n]\nallowed_ports = [443, 80]", &[]),
        ("redundant_entry_added", r#"allowed_domains = ["*.example.com"]"#, r#"allowed_domains = ["*.example.com", "a.example.com", "a.example.com:443"]"#, &[]),
        ("redundant_entry_removed", r#"allowed_domains = ["*.example.com", "a.example.com"]"#, r#"allowed_domains = ["*.example.com"]"#, &[]),
        ("wildcard_replacing_names_is_one_widening", r#"allowed_domains = ["a.example.com", "b.example.com"]"#, r#"allowed_domains = ["*.example.com"]"#, &[(W, Kind::AllowAdded)]),
        ("allow_entry_added", r#"allowed_domains = ["a.example.com"]"#, r#"allowed_domains = ["a.example.com", "c.example.net"]"#, &[(W, Kind::AllowAdded)]),
        ("allow_port_added", r#"allowed_domains = ["a.example.com"]"#, r#"allowed_domains = ["a.example.com", "a.example.com:8443"]"#, &[(W, Kind::AllowAdded)]),
        ("deny_entry_removed", "allowed_domains = [\"*.example.com\"]\ndenied_domains = [\"x.example.com\"]", r#"allowed_domains = ["*.example.com"]"#, &[(W, Kind::DenyRemoved)]),
        ("deny_narrowed_to_a_port", "denied_domains = [\"x.example.com\"]", "denied_domains = [\"x.example.com:443\"]", &[(W, Kind::DenyRemoved)]),
        ("enforce_to_report", r#"mode = "enforce""#, r#"mode = "report""#, &[(W, Kind::Mode)]),
        ("shared_hosting_deny_to_flag", "[shared_hosting]\naction = \"deny\"", "[shared_hosting]\naction = \"flag\"", &[(W, Kind::SharedHostingAction)]),
        ("shared_hosting_extra_removed_under_deny", "[shared_hosting]\naction = \"deny\"\nextra_domains = [\"bin.example.com\"]", "[shared_hosting]\naction = \"deny\"", &[(W, Kind::SharedHostingDomains)]),
        ("shared_hosting_extra_removed_under_flag", "[shared_hosting]\nextra_domains = [\"bin.example.com\"]", "", &[(O, Kind::SharedHostingDomains)]),
        ("tunnels_require_tls_off", "[tunnels]\nrequire_tls = true", "[tunnels]\nrequire_tls = false", &[(W, Kind::Tunnels)]),
        ("tunnels_require_sni_off_by_default_on_443", "", "[tunnels]\nrequire_sni = false", &[(W, Kind::Tunnels)]),
        ("default_policy_opened", "allowed_domains = [\"a.example.com\"]", "allowed_domains = [\"a.example.com\"]\ndefault_network_policy = { type = \"allowlist\", allowed_domains = [\"a.example.com\"] }", &[(W, Kind::PolicyType)]),
        ("default_policy_entry_added", "allowed_domains = [\"*.example.com\"]\ndefault_network_policy = { type = \"allowlist\", allowed_domains = [\"a.example.com\"] }", "allowed_domains = [\"*.example.com\"]\ndefault_network_policy = { type = \"allowlist\", allowed_domains = [\"a.example.com\", \"b.example.com\"] }", &[(W, Kind::AllowAdded)]),
        ("allowed_port_added_widens_portless_entries", "allowed_domains = [\"a.example.com\", \"b.example.com\"]", "allowed_domains = [\"a.example.com\", \"b.example.com\"]\nallowed_ports = [80, 443, 8080]", &[(W, Kind::PortsAdded)]),
        ("allowed_port_added_with_nothing_port_less", "allowed_domains = [\"a.example.com:443\"]", "allowed_domains = [\"a.example.com:443\"]\nallowed_ports = [80, 443, 8080]", &[(O, Kind::PortsAdded)]),
        ("cidr_added", "allowed_cidrs = [\"10.0.0.0/16\"]", "allowed_cidrs = [\"10.0.0.0/16\", \"192.168.0.0/24\"]", &[(W, Kind::CidrAdded)]),
        ("cidr_widened", "allowed_cidrs = [\"10.0.0.0/16\"]", "allowed_cidrs = [\"10.0.0.0/8\"]", &[(W, Kind::CidrAdded)]),
        ("cidr_split_inside_is_no_change", "allowed_cidrs = [\"10.0.0.0/16\"]", "allowed_cidrs = [\"10.0.0.0/16\", \"10.0.1.0/24\"]", &[]),
        ("name_changed", "name = \"a\"", "name = \"b\"", &[(O, Kind::Name)]),
        ("limits_removed", "[limits]\nupload_bytes = 1000", "", &[(W, Kind::Budget)]),
        ("budget_raised", "[limits]\nupload_bytes = 1000", "[limits]\nupload_bytes = 2000", &[(W, Kind::Budget)]),
        ("rule_entry_gains_a_method", r#"allowed_domains = [{ host = "a.example.com", methods = ["GET"] }]"#, r#"allowed_domains = [{ host = "a.example.com", methods = ["GET", "POST"] }]"#, &[(W, Kind::AllowAdded)]),
        ("rule_entry_loses_its_paths", r#"allowed_domains = [{ host = "a.example.com", paths = ["/api/*"] }]"#, r#"allowed_domains = ["a.example.com"]"#, &[(W, Kind::AllowAdded), (O, Kind::Inspection)]),
        ("inspection_turned_on", r#"allowed_domains = ["a.example.com"]"#, r#"allowed_domains = [{ host = "a.example.com", inspect = true }]"#, &[(O, Kind::Inspection)]),
        ("credentials_added", r#"allowed_domains = [{ host = "a.example.com", inspect = true }]"#, "allowed_domains = [{ host = \"a.example.com\", inspect = true }]\n[[credentials]]\nhost = \"a.example.com\"\nheader = \"Authorization\"\nvalue_file = \"/run/secrets/a\"", &[(O, Kind::Credentials)]),
        // Narrowing kinds.
        ("allow_entry_removed", r#"allowed_domains = ["a.example.com", "c.example.net"]"#, r#"allowed_domains = ["a.example.com"]"#, &[(N, Kind::AllowRemoved)]),
        ("wildcard_replaced_by_a_name", r#"allowed_domains = ["*.example.com"]"#, r#"allowed_domains = ["a.example.com"]"#, &[(N, Kind::AllowRemoved)]),
        ("allow_entry_pinned_to_a_port", r#"allowed_domains = ["a.example.com"]"#, r#"allowed_domains = ["a.example.com:443"]"#, &[(N, Kind::AllowRemoved)]),
        ("deny_entry_added", "allowed_domains = [\"*.example.com\"]", "allowed_domains = [\"*.example.com\"]\ndenied_domains = [\"x.example.com\"]", &[(N, Kind::DenyAdded)]),
        ("report_to_enforce", r#"mode = "report""#, r#"mode = "enforce""#, &[(N, Kind::Mode)]),
        ("shared_hosting_flag_to_deny", "", "[shared_hosting]\naction = \"deny\"", &[(N, Kind::SharedHostingAction)]),
        ("tunnels_require_tls_on_everywhere", "", "[tunnels]\nrequire_tls = true", &[(N, Kind::Tunnels)]),
        ("allowed_port_removed", "allowed_domains = [\"a.example.com\"]", "allowed_domains = [\"a.example.com\"]\nallowed_ports = [443]", &[(N, Kind::PortsRemoved)]),
        ("cidr_removed", "allowed_cidrs = [\"10.0.0.0/16\", \"192.168.0.0/24\"]", "allowed_cidrs = [\"10.0.0.0/16\"]", &[(N, Kind::CidrRemoved)]),
        ("limits_set", "", "[limits]\nupload_bytes = 1000", &[(N, Kind::Budget)]),
        ("rule_entry_narrowed_to_read_only", r#"allowed_domains = ["a.example.com"]"#, r#"allowed_domains = [{ host = "a.example.com", access = "read-only" }]"#, &[(N, Kind::AllowRemoved), (O, Kind::Inspection)]),
        ("default_policy_closed", "allowed_domains = [\"a.example.com\"]\ndefault_network_policy = { type = \"allowlist\", allowed_domains = [\"a.example.com\"] }", "allowed_domains = [\"a.example.com\"]", &[(N, Kind::PolicyType)]),
    ];
    for (name, old, new, want) in cases {
        let d = org_diff(old, new);
        assert_eq!(kinds(&d), *want, "{name}: {:#?}", d.changes);
        let widens = want.iter().any(|(e, _)| *e == W);
        assert_eq!(d.widens(), widens, "{name}");
    }
}

#[test]
fn each_kind_of_request_policy_change() {
    let allow = |list: &str| format!(r#"{{"type": "allowlist", "allowed_domains": [{list}]}}"#);
    #[rustfmt::skip]
    let cases: Vec<(&str, String, String, Want)> = vec![
        ("reordered", allow(r#""a.example.com", "b.example.com""#), allow(r#""b.example.com", "a.example.com""#), &[]),
        ("reformatted", allow(r#""a.example.com""#), "{\n  \"allowed_domains\": [\"A.EXAMPLE.com\"],\n  \"type\": \"allowlist\"\n}".into(), &[]),
        ("redundant_entry_added", allow(r#""*.example.com""#), allow(r#""*.example.com", "a.example.com""#), &[]),
        ("entry_added", allow(r#""a.example.com""#), allow(r#""a.example.com", "b.example.com""#), &[(W, Kind::AllowAdded)]),
        ("wildcard_replacing_names", allow(r#""a.example.com", "b.example.com""#), allow(r#""*.example.com""#), &[(W, Kind::AllowAdded)]),
        // Without an organization, a port-less entry stands for its ports, whatever they
        // are: a port written out is not known to be among them.
        ("port_written_out_is_not_known_covered", allow(r#""a.example.com""#), allow(r#""a.example.com:443""#), &[(W, Kind::AllowAdded), (N, Kind::AllowRemoved)]),
        ("entry_removed", allow(r#""a.example.com", "b.example.com""#), allow(r#""a.example.com""#), &[(N, Kind::AllowRemoved)]),
        ("opened", r#"{"type": "disabled"}"#.into(), allow(r#""a.example.com""#), &[(W, Kind::PolicyType)]),
        ("closed", allow(r#""a.example.com""#), r#"{"type": "disabled"}"#.into(), &[(N, Kind::PolicyType)]),
        ("cidr_added", r#"{"type": "allowlist", "allowed_domains": ["a.example.com"], "allowed_cidrs": ["10.0.0.0/24"]}"#.into(), r#"{"type": "allowlist", "allowed_domains": ["a.example.com"], "allowed_cidrs": ["10.0.0.0/24", "10.0.9.0/24"]}"#.into(), &[(W, Kind::CidrAdded)]),
        ("budget_dropped_is_the_level_above", r#"{"type": "allowlist", "allowed_domains": ["a.example.com"], "max_upload_bytes": 10}"#.into(), allow(r#""a.example.com""#), &[(W, Kind::Budget)]),
        ("budget_lowered", r#"{"type": "allowlist", "allowed_domains": ["a.example.com"], "max_upload_bytes": 10}"#.into(), r#"{"type": "allowlist", "allowed_domains": ["a.example.com"], "max_upload_bytes": 5}"#.into(), &[(N, Kind::Budget)]),
        ("methods_added", allow(r#"{"host": "a.example.com", "methods": ["GET"]}"#), allow(r#"{"host": "a.example.com", "methods": ["GET", "PUT"]}"#), &[(W, Kind::AllowAdded)]),
        ("cidrs_dropped_let_names_land_anywhere", r#"{"type": "allowlist", "allowed_domains": ["a.example.com"], "allowed_cidrs": ["10.0.0.0/24"]}"#.into(), allow(r#""a.example.com""#), &[(N, Kind::CidrRemoved), (W, Kind::CidrAdded)]),
    ];
    for (name, old, new, want) in cases {
        let d = request_diff(&old, &new);
        assert_eq!(kinds(&d), want, "{name}: {:#?}", d.changes);
    }
}

#[test]
fn a_widening_entry_is_located_in_new_and_marked_when_on_shared_hosting() {
    let d = org_diff(
        r#"allowed_domains = ["a.example.com"]"#,
        "allowed_domains = [\n  \"a.example.com\",\n  \"me.github.io\",\n]",
    );
    let c = &d.changes[0];
    assert_eq!((c.line, c.column), (4, 3), "{c:?}");
    assert!(c.shared_hosting);
    assert_eq!(c.entry.as_deref(), Some("me.github.io"));
    let d = org_diff("", "mode = \"report\"");
    assert_eq!((d.changes[0].line, d.changes[0].column), (2, 1));
}

#[test]
fn mixing_an_organization_file_and_a_request_policy_is_an_error() {
    let dir = std::env::temp_dir().join(format!("egress-diff-mix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (toml, json) = (dir.join("org.toml"), dir.join("p.json"));
    std::fs::write(&toml, "version = 1\n").unwrap();
    std::fs::write(&json, r#"{"type": "disabled"}"#).unwrap();
    let e = run(&toml, &json).unwrap_err();
    assert!(matches!(e, DiffError::Mixed { .. }), "{e}");
    assert!(e.to_string().contains("same kind"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

// The law, over generated organization files and targets.

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

/// An entry: a pattern, maybe with a port.
fn entry() -> impl Strategy<Value = String> {
    (
        prop::sample::select(PATTERNS),
        prop::option::of(prop::sample::select(PORTS)),
    )
        .prop_map(|(p, port)| match port {
            Some(port) => format!("{p}:{port}"),
            None => p.to_string(),
        })
}

fn quoted(list: &[String]) -> String {
    let q: Vec<String> = list.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", q.join(", "))
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
        prop::collection::vec(entry(), 0..3),
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
    let flip = || prop::bool::weighted(0.15);
    (
        spec(),
        (keep(), add(), keep(), add(), keep()),
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

/// What `check` says: the decision, then the address check of a literal IP.
fn allowed(org: &OrgPolicy, levels: &[&RequestPolicy], target: &Target) -> bool {
    let eff = Effective { org, levels };
    if !decide(&eff, target).is_allowed() {
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
                if allowed(&n, &no, &t) {
                    prop_assert!(allowed(&o, &oo, &t),
                        "{} allowed by NEW only, yet no widening:\n{old}\n---\n{new}\n{:#?}",
                        t.host.authority(t.port), d.changes);
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
        let json = |l: &[String]| format!(r#"{{"type": "allowlist", "allowed_domains": {}}}"#, quoted(l));
        let (old, new) = (json(&old), json(&new));
        let (o, n) = (RequestPolicy::from_json(&old, "o").unwrap(), RequestPolicy::from_json(&new, "n").unwrap());
        let d = diff_texts(FileKind::Request, (&old, "o"), (&new, "n")).unwrap();
        if d.widens() {
            return Ok(());
        }
        for t in targets() {
            if allowed(&org, &[&n], &t) {
                prop_assert!(allowed(&org, &[&o], &t),
                    "{} allowed by NEW only:\n{old}\n{new}\n{:#?}", t.host.authority(t.port), d.changes);
            }
        }
    }
}
