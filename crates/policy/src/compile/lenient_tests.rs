//! The lenient compile: what it keeps of a file with problems, where each entry was
//! written, every problem with its kind, and the loaders agreeing with it.

use super::*;
use crate::file::{
    CANARIES_KEYS, DLP_KEYS, LIMITS_KEYS, ORG_KEYS, SHARED_HOSTING_KEYS, TUNNELS_KEYS,
};
use crate::host::EntryError;

/// The text at a span: where an entry's literal starts.
fn at(text: &str, offset: usize) -> &str {
    &text[offset..]
}

#[test]
fn lenient_compile_keeps_what_reads_and_says_where() {
    let text = "version = 2\nallowed_domains = [\"a.com\", \"*.com\", 3, \"b.com:8443\"]\n\
                alowed = 1\nallowed_ports = [443, 0]\nallowed_cidrs = [\"10.1.2.3/16\", \"nope\"]\n\
                [shared_hosting]\nextra_domains = [\"x.example\"]\n";
    let c = OrgPolicy::compile_toml(text, "org.toml");
    let o = &c.policy;
    let allowed: Vec<&str> = o.allowed.entries().iter().map(|e| &*e.text).collect();
    assert_eq!(allowed, ["a.com", "b.com:8443"]);
    assert_eq!(o.allowed_ports, [443]);
    assert_eq!(o.allowed_cidrs[0].to_string(), "10.1.0.0/16");
    assert_eq!(o.shared_hosting_extra.len(), 1);
    let s = &c.spans;
    assert!(at(text, s.allowed_domains[0]).starts_with("\"a.com\""));
    assert!(at(text, s.allowed_domains[1]).starts_with("\"b.com:8443\""));
    assert!(at(text, s.allowed_ports[0]).starts_with("443"));
    assert_eq!(s.allowed_cidrs[0].text, "10.1.2.3/16");
    assert!(at(text, s.allowed_cidrs[0].at).starts_with("\"10.1.2.3/16\""));
    assert!(at(text, s.extra_domains[0]).starts_with("\"x.example\""));
    let kinds: Vec<(usize, &ProblemKind)> = c
        .problems
        .iter()
        .map(|p| (p.line.unwrap(), &p.kind))
        .collect();
    let domain = |list: &str, error| ProblemKind::Domain {
        list: list.into(),
        error,
    };
    let want = [
        (1, &ProblemKind::Invalid),
        (
            2,
            &domain(
                "allowed_domains",
                EntryError::PublicSuffixWildcard("com".into()),
            ),
        ),
        (2, &ProblemKind::Invalid),
        (
            3,
            &ProblemKind::UnknownKey {
                table: "",
                key: "alowed".into(),
                known: &ORG_KEYS,
            },
        ),
        (4, &ProblemKind::Invalid),
        (
            5,
            &ProblemKind::Cidr {
                list: "allowed_cidrs".into(),
            },
        ),
    ];
    assert_eq!(kinds, want);
    // The loader is the same compile, refused for these problems.
    let err = OrgPolicy::from_toml(text, "org.toml").unwrap_err();
    assert_eq!(err.problems, c.problems);
}

#[test]
fn strict_and_lenient_agree() {
    let orgs = [
        "version = 1\n",
        "version = 1\nallowed_domain = []\n",
        "version = 1\nallowed_domains = [\n",
        "version = 1\nmode = \"audit\"\ntunnels = { require_tls = 1 }\n",
        "version = 1\ndefault_network_policy = { type = \"allowlist\", allowed_domains = [\"a.com\"] }\n",
    ];
    for text in orgs {
        let lenient = OrgPolicy::compile_toml(text, "org.toml").problems;
        let strict = OrgPolicy::from_toml(text, "org.toml")
            .err()
            .map(|e| e.problems);
        assert_eq!(strict.unwrap_or_default(), lenient, "{text}");
    }
    let requests = [
        r#"{"type":"disabled"}"#,
        r#"{"type":"disabled","type":"allowlist"}"#,
        r#"{"type":"allowlist","allowed_domains":["a.com", 1],"x":null}"#,
        r#"[1]"#,
        "{",
    ];
    for text in requests {
        let lenient = RequestPolicy::compile_json(text, "p.json").problems;
        let strict = RequestPolicy::from_json(text, "p.json")
            .err()
            .map(|e| e.problems);
        assert_eq!(strict.unwrap_or_default(), lenient, "{text}");
    }
}

/// Every key of the key lists is one the compiler reads: set to a value of the wrong
/// type, each is a type problem, never an unknown key.
#[test]
fn every_known_key_is_read() {
    let mut text = String::new();
    for key in ORG_KEYS
        .iter()
        .filter(|k| !["shared_hosting", "tunnels", "limits", "canaries", "dlp"].contains(k))
    {
        text += &format!("{key} = {{}}\n");
    }
    for (table, keys) in [
        ("shared_hosting", &SHARED_HOSTING_KEYS[..]),
        ("tunnels", &TUNNELS_KEYS),
        ("limits", &LIMITS_KEYS),
        ("canaries", &CANARIES_KEYS),
        ("dlp", &DLP_KEYS),
    ] {
        text += &format!("[{table}]\n");
        for key in keys {
            text += &format!("{key} = {{}}\n");
        }
    }
    let problems = OrgPolicy::compile_toml(&text, "org.toml").problems;
    assert_eq!(problems.len(), ORG_KEYS.len() - 5 + 10, "{problems:#?}");
    assert!(
        problems.iter().all(|p| p.kind == ProblemKind::Invalid),
        "{problems:#?}"
    );
    let request = r#"{"type": "allowlist", "allowed_domains": {}, "allowed_cidrs": {},
        "max_upload_bytes": {}, "dlp": []}"#;
    let problems = RequestPolicy::compile_json(request, "p.json").problems;
    assert_eq!(problems.len(), 4, "{problems:#?}");
    assert!(problems.iter().all(|p| p.kind == ProblemKind::Invalid));
}

#[test]
fn request_spans_point_at_each_literal() {
    let text = "{\"type\": \"allowlist\",\n \"allowed_domains\": [\"a.com\", \"a.com\", \"b\\u002ecom\"],\n \"allowed_cidrs\": [\"10.1.2.3/16\"]}";
    let c = RequestPolicy::compile_json(text, "p.json");
    assert_eq!(c.problems, []);
    let RequestPolicy::Allowlist { domains, .. } = &c.policy else {
        panic!("{:?}", c.policy);
    };
    assert_eq!(&*domains.entries()[2].text, "b.com");
    let spans = &c.spans.allowed_domains;
    assert!(at(text, spans[0]).starts_with("\"a.com\", \"a.com\""));
    assert!(at(text, spans[1]).starts_with("\"a.com\", \"b"));
    assert!(at(text, spans[2]).starts_with("\"b\\u002ecom\""));
    assert!(at(text, c.spans.allowed_cidrs[0].at).starts_with("\"10.1.2.3/16\""));
}

#[test]
fn json_null_cidrs_are_none_and_repeated_keys_refused() {
    let p = RequestPolicy::from_json(
        r#"{"type":"allowlist","allowed_domains":["a.com"],"allowed_cidrs":null}"#,
        "p.json",
    );
    assert!(matches!(
        p,
        Ok(RequestPolicy::Allowlist { cidrs: None, .. })
    ));
    let e = RequestPolicy::from_json(r#"{"type":"disabled", "type":"disabled"}"#, "p.json");
    assert_eq!(
        e.unwrap_err().to_string(),
        "p.json:1:21: duplicate field `type`"
    );
}
