use super::*;
use crate::{check_narrowing, OrgPolicy, ProblemKind, RequestPolicy};

/// A value of each built-in's documented shape, and a near miss of it.
#[rustfmt::skip]
const SAMPLES: &[(Builtin, &str, &str)] = &[
    (Builtin::AwsAccessKeyId, "AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPL"),
    (Builtin::GithubToken, "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345678"),
    (Builtin::PrivateKey, "-----BEGIN OPENSSH PRIVATE KEY-----", "-----BEGIN PUBLIC KEY-----"),
    (Builtin::SlackToken, "xoxb-123456789012-abcdefghijKLMN", "xoxq-123456789012-abcdefghijKLMN"),
    (Builtin::GoogleApiKey, "AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA1234567890abcdefghijklmnopqrstu"),
    (Builtin::StripeSecretKey, "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_test_4eC39HqLyjWDarjtT1zdp7dc"),
    (Builtin::OpenaiApiKey, "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCDEF", "sk-proj-abcdefghijklmnopqrstuvwxyz0123"),
    (Builtin::Jwt, "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig", "eyJhbGciOiJIUzI1NiJ9.notapayload"),
];

#[test]
fn each_builtin_matches_its_shape_not_a_near_miss_and_is_bounded() {
    assert_eq!(SAMPLES.len(), Builtin::ALL.len());
    for (b, hit, miss) in SAMPLES {
        let d = b.detector();
        assert!(d.bytes.is_match(hit.as_bytes()), "{b:?}");
        assert!(!d.bytes.is_match(miss.as_bytes()), "{b:?} near miss");
        assert!(
            d.longest <= MAX_MATCH && d.longest >= hit.len().min(MAX_MATCH) / 2,
            "{b:?}"
        );
        assert!(
            d.names.is_match(hit.to_ascii_lowercase().as_bytes()),
            "{b:?} in a name"
        );
    }
}

fn org(dlp: &str) -> Result<OrgPolicy, crate::PolicyError> {
    OrgPolicy::from_toml(&format!("version = 1\n{dlp}"), "org.toml")
}

#[test]
fn dlp_table_loads_detectors_patterns_and_action() {
    let o = org("[dlp]\ndetectors = [\"jwt\", \"github_token\"]\naction = \"report\"\n[[dlp.patterns]]\nname = \"employee-id\"\nregex = \"EMP-[0-9]{6}\"\n").unwrap();
    let names: Vec<&str> = o.dlp().detectors.iter().map(|d| &*d.name).collect();
    assert_eq!(names, ["jwt", "github_token", "employee-id"]);
    assert_eq!(o.dlp_action(), DlpAction::Report);
    assert_eq!(o.dlp().detectors[2].longest, 10);
    assert_eq!(org("").unwrap().dlp_action(), DlpAction::Refuse);
}

#[test]
fn dlp_table_errors_name_the_entry() {
    #[rustfmt::skip]
    let cases: &[(&str, &str)] = &[
        ("[dlp]\ndetectors = [\"ssh\"]\n", "org.toml:3:14: unknown variant `ssh`"),
        ("[dlp]\naction = \"warn\"\n", "org.toml:3:10: unknown variant `warn`"),
        ("[dlp]\nbogus = 1\n", "org.toml:3:1: unknown field `bogus`"),
        ("[[dlp.patterns]]\nname = \"x\"\nregex = \"A+\"\n", "org.toml:4:9: entry \"A+\": pattern `x`: its matches can be of any length"),
        ("[[dlp.patterns]]\nname = \"x\"\nregex = \"A{300}\"\n", "org.toml:4:9: entry \"A{300}\": pattern `x`: its matches can be 300 bytes long"),
        ("[[dlp.patterns]]\nname = \"x\"\nregex = \"A?\"\n", "it matches the empty string"),
        ("[[dlp.patterns]]\nname = \"x\"\nregex = \"(\"\n", "pattern `x`: not a regular expression"),
        ("[[dlp.patterns]]\nname = \"jwt\"\nregex = \"J{3}\"\n", "a pattern named `jwt` is there already"),
        ("[[dlp.patterns]]\nname = \"a b\"\nregex = \"J{3}\"\n", "a pattern's name is 1 to 64"),
        ("[[dlp.patterns]]\nname = \"x\"\n", "missing field `regex`"),
    ];
    for (text, want) in cases {
        let err = org(text).unwrap_err().to_string();
        assert!(err.contains(want), "{text:?}: got {err:?}, want {want:?}");
    }
    let c = OrgPolicy::compile_toml(
        "version = 1\n[[dlp.patterns]]\nname = \"x\"\nregex = \"A.*\"\n",
        "o",
    );
    assert_eq!(
        c.problems[0].kind,
        ProblemKind::UnboundedPattern { name: "x".into() }
    );
}

fn request(dlp: &str) -> RequestPolicy {
    let text = format!(r#"{{"type": "allowlist", "allowed_domains": ["a.com"], "dlp": {dlp}}}"#);
    RequestPolicy::from_json(&text, "p.json").unwrap()
}

#[test]
fn a_request_level_adds_detectors_and_may_not_turn_refuse_into_report() {
    let o = org("allowed_domains = [\"a.com\"]\n").unwrap();
    let adds = request(r#"{"detectors": ["jwt"], "patterns": [{"name": "p", "regex": "Q{9}"}]}"#);
    assert!(check_narrowing(&o, &[], &adds).is_ok());
    let report = request(r#"{"action": "report"}"#);
    let w = check_narrowing(&o, &[], &report).unwrap_err().to_string();
    assert!(
        w.starts_with("dlp.action = \"report\": the organization refuses"),
        "{w}"
    );
    // Under an organization that reports: allowed, unless a level above refuses.
    let reporting = org("allowed_domains = [\"a.com\"]\n[dlp]\naction = \"report\"\n").unwrap();
    assert!(check_narrowing(&reporting, &[], &report).is_ok());
    let refuse = request(r#"{"action": "refuse"}"#);
    assert!(check_narrowing(&reporting, &[], &refuse).is_ok());
    let w = check_narrowing(&reporting, &[&refuse], &report).unwrap_err();
    assert!(w.to_string().contains("the level above refuses"), "{w}");
}
