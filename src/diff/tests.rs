//! `diff` over pairs of policies: one line per kind of change (each widening kind, each
//! narrowing kind, reformatting as no change). The law it keeps is in `law_tests.rs`.

use super::*;

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
