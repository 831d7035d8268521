//! `egress-proxy check` at the command level: verdicts, reasons and rules from the
//! proxy's decision code, `--explain`, `--resolve`, formats and exit codes.

use crate::lint::egress;

const ORG: &str = "tests/fixtures/check/org.toml";

fn check(args: &[&str]) -> crate::lint::Out {
    let mut all = vec!["check", "--org", ORG];
    all.extend_from_slice(args);
    egress(&all)
}

/// `(verdict, reason, rule, level, shared_hosting, exit code)` of one target.
type Expected<'a> = (&'a str, &'a str, &'a str, &'a str, bool, i32);

/// `(verdict, reason, rule, level, shared_hosting, exit code)` of the one target, from JSON.
fn decided(args: &[&str]) -> (String, String, String, String, bool, i32) {
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    let out = check(&all);
    let r = &out.json()["results"][0];
    let s = |k: &str| r[k].as_str().unwrap_or("-").to_string();
    (
        s("verdict"),
        s("reason"),
        s("rule"),
        s("level"),
        r["shared_hosting"].as_bool().unwrap(),
        out.code,
    )
}

#[test]
fn targets_are_decided_like_the_proxy_decides_them() {
    #[rustfmt::skip]
    let cases: &[(&[&str], Expected)] = &[
        (&["https://example.com/path?q=1"],            ("allow", "-", "example.com", "request", false, 0)),
        (&["example.com"],                             ("allow", "-", "example.com", "request", false, 0)),
        (&["http://docs.example.org/"],                ("deny", "port_not_allowed", "*.example.org:443", "org", false, 1)),
        (&["docs.example.org:443"],                    ("allow", "-", "*.example.org:443", "request", false, 0)),
        (&["evil.test"],                               ("deny", "not_in_org_allowlist", "-", "org", false, 1)),
        (&["private.example.org"],                     ("deny", "denied_domain", "private.example.org", "org", false, 1)),
        (&["example.com:8080"],                        ("deny", "port_not_allowed", "example.com", "org", false, 1)),
        (&["https://me.github.io/"],                   ("allow", "-", "me.github.io", "request", true, 0)),
        (&["10.20.0.5"],                               ("allow", "-", "10.20.0.0/16", "request", false, 0)),
        (&["http://[::1]:80/"],                        ("deny", "private_address", "-", "address", false, 1)),
        (&["--policy", "tests/fixtures/check/narrow.json", "docs.example.org"],
                                                       ("deny", "not_in_request_policy", "-", "request", false, 1)),
        (&["--resolve", "example.com=127.0.0.1", "example.com"],
                                                       ("deny", "private_address", "-", "address", false, 1)),
        (&["--resolve", "example.com=10.20.1.1", "example.com"],
                                                       ("allow", "-", "example.com", "request", false, 0)),
        (&["--resolve", "example.com=93.184.216.34", "example.com"],
                                                       ("allow", "-", "example.com", "request", false, 0)),
        (&["--resolve", "other.test=127.0.0.1", "example.com"],
                                                       ("allow", "-", "example.com", "request", false, 0)),
    ];
    for (args, want) in cases {
        let got = decided(args);
        let got_ref = (&*got.0, &*got.1, &*got.2, &*got.3, got.4, got.5);
        assert_eq!(got_ref, *want, "{args:?}");
    }
}

#[test]
fn without_policy_the_org_default_applies_as_in_serve() {
    // The shipped policy's default is {"type": "disabled"}.
    let out = egress(&["check", "api.github.com"]);
    assert_eq!(out.code, 1);
    assert!(
        out.stdout.contains("deny network_disabled (level request)"),
        "{}",
        out.stdout
    );
    let out = egress(&[
        "check",
        "--policy",
        "policies/requests/github-api.json",
        "api.github.com",
    ]);
    assert_eq!(out.code, 0, "{}", out.stdout);
}

#[test]
fn text_output_names_verdict_reason_rule_and_level() {
    let out = check(&["https://example.com/", "evil.test:8443"]);
    assert_eq!(out.code, 1, "any denied target is exit 1");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[0],
        "https://example.com/ -> example.com:443: allow (level request, rule `example.com`)"
    );
    assert_eq!(
        lines[1],
        "evil.test:8443 -> evil.test:8443: deny not_in_org_allowlist (level org)"
    );
}

#[test]
fn explain_prints_each_step() {
    let out = check(&[
        "--explain",
        "--policy",
        "tests/fixtures/check/narrow.json",
        "https://me.github.io/",
    ]);
    assert_eq!(out.code, 1);
    for step in [
        "1. target: the name me.github.io, port 443",
        "2. org denied_domains: no entry matches",
        "3. org allowed_domains: `me.github.io` matches on port 443",
        "4. request policy (--policy tests/fixtures/check/narrow.json): no entry matches: denied",
        "verdict: deny (not_in_request_policy, level request)",
    ] {
        assert!(out.stdout.contains(step), "{step}\n{}", out.stdout);
    }
    let out = check(&["--explain", "https://me.github.io/"]);
    assert!(
        out.stdout
            .contains("shared hosting: yes (under `github.io`)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("address: not resolved"),
        "{}",
        out.stdout
    );
    let out = check(&[
        "--explain",
        "--resolve",
        "example.com=169.254.169.254",
        "example.com",
    ]);
    assert!(
        out.stdout
            .contains("address 169.254.169.254: refused (private_address)"),
        "{}",
        out.stdout
    );
}

#[test]
fn json_output_is_one_document() {
    let out = check(&["--format", "json", "example.com", "evil.test"]);
    let doc = out.json();
    assert_eq!(doc["all_allowed"], false);
    assert_eq!(doc["results"].as_array().unwrap().len(), 2);
    assert_eq!(doc["results"][0]["port"], 443);
    assert_eq!(doc["results"][1]["reason"], "not_in_org_allowlist");
}

#[test]
fn errors_exit_2() {
    for args in [
        &["ftp://example.com/"][..],
        &["http://"],
        &["example.com:99999"],
        &["https://user@example.com/"],
        &["bad..name"],
        &["--resolve", "example.com", "example.com"],
        &[
            "--policy",
            "tests/fixtures/check/widening.json",
            "example.com",
        ],
        &[
            "--policy",
            "tests/fixtures/check/missing.json",
            "example.com",
        ],
        &["--format", "yaml", "example.com"],
        &[],
    ] {
        let out = check(args);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
    }
    let out = egress(&[
        "check",
        "--org",
        "tests/fixtures/lint/bad/unknown-key.toml",
        "example.com",
    ]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("unknown field"), "{}", out.stderr);
}

/// `--explain` prints the steps the decision took, so it cannot disagree with the
/// verdict: an IPv4-mapped IPv6 address is judged by its IPv4 address in both.
#[test]
fn explain_agrees_with_the_verdict_on_an_ipv4_mapped_address() {
    let out = check(&["--explain", "[::ffff:10.20.0.5]:443"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stdout
            .contains("org allowed_cidrs: `10.20.0.0/16` covers ::ffff:10.20.0.5"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("nothing covers"), "{}", out.stdout);
}

const RULES_ORG: &str = "tests/fixtures/check/rules.toml";
const READ_ONLY: &str = "{ host = \"git.test\", access = \"read-only\" }";
const UPLOAD: &str =
    "{ host = \"git.test\", methods = [\"POST\"], paths = [\"/acme/repo.git/git-upload-pack\"] }";

/// `check --method` judges a request by the entries' methods and paths; a URL alone is
/// a GET of its path, `host[:port]` alone a CONNECT.
#[test]
fn method_and_path_are_judged_by_entries_with_rules() {
    let base = ["--org", RULES_ORG];
    #[rustfmt::skip]
    let cases: &[(&[&str], Expected)] = &[
        (&["https://git.test/acme/repo.git/info/refs"], ("allow", "-", READ_ONLY, "request", false, 0)),
        (&["--method", "POST", "https://git.test/acme/repo.git/git-upload-pack"],
                                                         ("allow", "-", UPLOAD, "request", false, 0)),
        (&["--method", "POST", "https://git.test/acme/repo.git/git-receive-pack"],
                                                         ("deny", "path_not_allowed", UPLOAD, "org", false, 1)),
        (&["--method", "DELETE", "https://git.test/acme/repo.git"],
                                                         ("deny", "method_not_allowed", READ_ONLY, "org", false, 1)),
        (&["--method", "POST", "git.test"],              ("deny", "path_not_allowed", UPLOAD, "org", false, 1)),
        (&["git.test"],                                  ("allow", "-", READ_ONLY, "request", false, 0)),
        (&["--method", "DELETE", "https://docs.test/x"], ("allow", "-", "docs.test", "request", false, 0)),
    ];
    for (args, want) in cases {
        let mut all = base.to_vec();
        all.extend_from_slice(args);
        let got = egress_decided(&all);
        let got_ref = (&*got.0, &*got.1, &*got.2, &*got.3, got.4, got.5);
        assert_eq!(got_ref, *want, "{args:?}");
    }
}

fn egress_decided(args: &[&str]) -> (String, String, String, String, bool, i32) {
    let mut all = vec!["check", "--format", "json"];
    all.extend_from_slice(args);
    let out = egress(&all);
    let r = &out.json()["results"][0];
    let s = |k: &str| r[k].as_str().unwrap_or("-").to_string();
    let (verdict, reason, rule, level) = (s("verdict"), s("reason"), s("rule"), s("level"));
    (
        verdict,
        reason,
        rule,
        level,
        r["shared_hosting"].as_bool().unwrap(),
        out.code,
    )
}

#[test]
fn explain_shows_the_entry_and_rule_steps() {
    let out = egress(&[
        "check",
        "--org",
        RULES_ORG,
        "--explain",
        "--method",
        "POST",
        "https://git.test/acme/repo.git/git-receive-pack",
    ]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(
        out.stdout.contains(&format!(
            "org allowed_domains: no entry allowing POST allows the path /acme/repo.git/git-receive-pack (first: `{UPLOAD}`): denied, path_not_allowed"
        )),
        "{}",
        out.stdout
    );
    let out = egress(&["check", "--org", RULES_ORG, "--explain", "git.test"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stdout.contains("a CONNECT to it is intercepted"),
        "{}",
        out.stdout
    );
    let json = egress(&[
        "check",
        "--org",
        RULES_ORG,
        "--format",
        "json",
        "https://git.test/a/../b",
    ]);
    let r = &json.json()["results"][0];
    assert_eq!(
        (r["method"].as_str(), r["path"].as_str()),
        (Some("GET"), Some("/b")),
        "{r}"
    );
    assert_eq!(r["intercepted"], true, "{r}");
}

#[test]
fn a_bad_method_or_path_is_an_error() {
    let out = egress(&["check", "--org", RULES_ORG, "--method", "post", "git.test"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("--method \"post\""), "{}", out.stderr);
    let out = egress(&["check", "--org", RULES_ORG, "https://git.test/a%2Fb"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("invalid_request"), "{}", out.stderr);
}
