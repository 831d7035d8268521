//! `egress-proxy lint` at the command level: every rule on a fixture that triggers it and
//! on fixtures that do not, every exit code, every format (SARIF checked against the
//! 2.1.0 schema's required structure).

use std::process::Command;

use serde_json::Value;

/// What one run of the binary gave.
pub(crate) struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", self.stdout, self.stderr))
    }
}

/// Run `egress-proxy ARGS` in the crate root (fixture paths are relative to it).
pub(crate) fn egress(args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_egress-proxy"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("EGRESS_PROXY_LOG", "warn")
        .output()
        .expect("run egress-proxy");
    Out {
        code: out.status.code().expect("exited"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

const BAD: &str = "tests/fixtures/lint/bad";

fn findings(out: &Out) -> Vec<Value> {
    out.json()["findings"].as_array().expect("findings").clone()
}

fn rules_of(out: &Out) -> Vec<String> {
    findings(out)
        .iter()
        .map(|f| f["rule"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_rule_fires_on_its_fixture_with_position_and_exit_code() {
    #[rustfmt::skip]
    let cases: &[(&str, &str, &str, u64, u64)] = &[
        // file,                           rule,                     severity,  line, column
        ("parse-error.toml",             "parse-error",            "error",   3, 1),
        ("parse-error.json",             "parse-error",            "error",   1, 43),
        ("parse-error-shape.toml",       "parse-error",            "error",   1, 1),
        ("unknown-key.toml",             "unknown-key",            "error",   2, 1),
        ("unknown-key.json",             "unknown-key",            "error",   3, 2),
        ("invalid-pattern.toml",         "invalid-pattern",        "error",   4, 3),
        ("invalid-pattern-cidr.toml",    "invalid-pattern",        "error",   2, 18),
        ("wildcard-public-suffix.toml",  "wildcard-public-suffix", "error",   2, 35),
        ("shared-hosting-flag.toml",     "shared-hosting",         "warning", 2, 35),
        ("shared-hosting-deny.toml",     "shared-hosting",         "error",   2, 35),
        ("redundant-entry.toml",         "redundant-entry",        "warning", 2, 37),
        ("duplicate-entry.toml",         "duplicate-entry",        "warning", 2, 53),
        ("allow-deny-conflict.toml",     "allow-deny-conflict",    "error",   2, 20),
        ("private-cidr.toml",            "private-cidr",           "warning", 2, 18),
        ("not-normalized.toml",          "not-normalized",         "warning", 2, 20),
        ("mixed-script.toml",            "mixed-script",           "warning", 2, 35),
        ("credential-plain-http.toml",   "credential-plain-http",  "warning", 2, 29),
        ("canaries-blind.toml",          "canaries-blind",         "info",    2, 20),
        ("dlp-pattern-unbounded.toml",   "dlp-pattern-unbounded",  "error",   8, 9),
    ];
    for (file, rule, severity, line, column) in cases {
        let path = format!("{BAD}/{file}");
        let out = egress(&["lint", "--format", "json", &path]);
        let found = findings(&out);
        assert_eq!(found.len(), 1, "{file}: {found:#?}");
        let f = &found[0];
        assert_eq!(f["rule"], *rule, "{file}");
        assert_eq!(f["severity"], *severity, "{file}");
        assert_eq!(
            (f["line"].as_u64(), f["column"].as_u64()),
            (Some(*line), Some(*column)),
            "{file}"
        );
        assert_eq!(f["file"], path, "{file}");
        assert!(!f["message"].as_str().unwrap().is_empty());
        let want = if *severity == "error" { 1 } else { 0 };
        assert_eq!(out.code, want, "{file}: exit code");
    }
}

#[test]
fn an_info_finding_never_fails_a_run_even_with_deny_warnings() {
    let path = format!("{BAD}/canaries-blind.toml");
    let out = egress(&["lint", "--deny-warnings", &path]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("canaries-blind"), "{}", out.stdout);
    let sarif = egress(&["lint", "--format", "sarif", &path]).json();
    assert_eq!(sarif["runs"][0]["results"][0]["level"], "note", "{sarif}");
}

#[test]
fn clean_fixtures_trigger_no_rule() {
    // Apex and subtree of one name, shared hosting only in extra_domains, a public CIDR,
    // an IDN in one script, a covered default policy and request files.
    let out = egress(&[
        "lint",
        "--format",
        "json",
        "--deny-warnings",
        "tests/fixtures/lint/clean",
    ]);
    assert_eq!(findings(&out), Vec::<Value>::new(), "{}", out.stdout);
    assert_eq!(out.code, 0);
    assert_eq!(out.json()["files"].as_array().unwrap().len(), 3);
}

#[test]
fn shipped_policies_are_clean_even_with_deny_warnings() {
    let out = egress(&["lint", "--deny-warnings", "policies/"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr.contains("0 errors, 0 warnings in 4 files"),
        "{}",
        out.stderr
    );
}

#[test]
fn fixes_are_suggested_where_they_help() {
    let out = egress(&[
        "lint",
        "--format",
        "json",
        &format!("{BAD}/not-normalized.toml"),
    ]);
    assert_eq!(findings(&out)[0]["fix"], "example.com");
    let out = egress(&[
        "lint",
        "--format",
        "json",
        &format!("{BAD}/unknown-key.toml"),
    ]);
    assert_eq!(findings(&out)[0]["fix"], "allowed_domains");
    let out = egress(&["lint", &format!("{BAD}/not-normalized.toml")]);
    assert!(
        out.stdout.contains("help: replace with `example.com`"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_file_with_an_unknown_key_still_gets_every_other_finding() {
    let out = egress(&["lint", "--format", "json", &format!("{BAD}/multi.toml")]);
    let mut rules = rules_of(&out);
    rules.sort();
    assert_eq!(rules, ["invalid-pattern", "not-normalized", "unknown-key"]);
    assert_eq!(out.code, 1);
}

#[test]
fn widening_request_policies_name_every_offending_entry() {
    let out = egress(&["lint", "--format", "json", "tests/fixtures/lint/widens"]);
    let found = findings(&out);
    let offending: Vec<(&str, u64)> = found
        .iter()
        .map(|f| {
            assert_eq!(f["rule"], "widens-org-policy");
            assert_eq!(f["severity"], "error");
            let msg = f["message"].as_str().unwrap();
            let entry = msg.split('`').nth(1).unwrap();
            (entry, f["line"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(
        offending,
        [
            ("evil.test", 5),
            ("*.example.com", 6),
            ("docs.example.org:8443", 7),
            ("9.9.9.0/24", 9)
        ]
    );
    assert_eq!(out.code, 1);
}

#[test]
fn widening_needs_an_organization_policy() {
    // The request file alone: nothing to check it against, said on standard error.
    let out = egress(&["lint", "tests/fixtures/lint/widens/request.json"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stderr.contains("widens-org-policy not checked"),
        "{}",
        out.stderr
    );
    // With --org: checked, and the organization file is linted too.
    let out = egress(&[
        "lint",
        "--format",
        "json",
        "--org",
        "tests/fixtures/lint/widens/org.toml",
        "tests/fixtures/lint/widens/request.json",
    ]);
    assert_eq!(rules_of(&out).len(), 4);
    assert_eq!(out.json()["files"].as_array().unwrap().len(), 2);
    assert_eq!(out.code, 1);
    // The clean request file against the same organization: covered.
    let out = egress(&[
        "lint",
        "--org",
        "tests/fixtures/lint/clean/org.toml",
        "tests/fixtures/lint/clean/request.json",
    ]);
    assert_eq!(out.code, 0, "{}", out.stdout);
}

#[test]
fn exit_codes() {
    let warn = format!("{BAD}/redundant-entry.toml");
    assert_eq!(egress(&["lint", &warn]).code, 0, "warnings only");
    assert_eq!(egress(&["lint", "--deny-warnings", &warn]).code, 1);
    assert_eq!(
        egress(&["lint", &format!("{BAD}/parse-error.toml")]).code,
        1,
        "a file that does not load is a finding"
    );
    assert_eq!(
        egress(&["lint", "tests/fixtures/lint/no-such-file.toml"]).code,
        2
    );
    assert_eq!(egress(&["lint", "--format", "xml", "policies"]).code, 2);
    assert_eq!(egress(&["lint"]).code, 2, "no PATH");
}

#[test]
fn text_output_reads_like_a_compiler() {
    let out = egress(&["lint", &format!("{BAD}/allow-deny-conflict.toml")]);
    let first = out.stdout.lines().next().unwrap();
    assert!(
        first.starts_with(
            "tests/fixtures/lint/bad/allow-deny-conflict.toml:2:20: error[allow-deny-conflict]: "
        ),
        "{first}"
    );
    assert!(
        out.stderr.contains("1 error, 0 warnings in 1 file"),
        "{}",
        out.stderr
    );
    // Multi-line parser messages stay on one line.
    let out = egress(&["lint", &format!("{BAD}/parse-error.toml")]);
    assert_eq!(out.stdout.lines().count(), 1, "{}", out.stdout);
}

#[test]
fn json_output_counts_errors_and_warnings() {
    let out = egress(&["lint", "--format", "json", BAD]);
    let doc = out.json();
    let found = findings(&out);
    let count = |s: &str| found.iter().filter(|f| f["severity"] == s).count() as u64;
    assert_eq!(doc["errors"].as_u64(), Some(count("error")));
    assert_eq!(doc["warnings"].as_u64(), Some(count("warning")));
    assert_eq!(out.code, 1);
}

/// The parts of SARIF 2.1.0 that its schema requires and code-scanning services read.
pub(crate) fn assert_sarif_structure(doc: &Value) {
    assert_eq!(doc["version"], "2.1.0");
    assert!(doc["$schema"].as_str().unwrap().contains("sarif-2.1.0"));
    let runs = doc["runs"].as_array().expect("runs is an array");
    assert_eq!(runs.len(), 1);
    let driver = &runs[0]["tool"]["driver"];
    assert!(driver["name"].is_string());
    let rules = driver["rules"].as_array().expect("rules");
    let ids: Vec<&str> = rules.iter().map(|r| r["id"].as_str().unwrap()).collect();
    for r in rules {
        assert!(r["shortDescription"]["text"].is_string(), "{r}");
        assert!(r["fullDescription"]["text"].is_string(), "{r}");
        let level = r["defaultConfiguration"]["level"].as_str().unwrap();
        assert!(["none", "note", "warning", "error"].contains(&level));
    }
    for result in runs[0]["results"].as_array().expect("results") {
        let id = result["ruleId"].as_str().expect("ruleId");
        assert!(ids.contains(&id), "{id} is described in rules");
        assert_eq!(
            rules[result["ruleIndex"].as_u64().unwrap() as usize]["id"],
            id
        );
        assert!(["note", "warning", "error"].contains(&result["level"].as_str().unwrap()));
        assert!(result["message"]["text"].is_string());
        let loc = &result["locations"][0]["physicalLocation"];
        assert!(loc["artifactLocation"]["uri"].is_string());
        assert!(loc["region"]["startLine"].as_u64().unwrap() >= 1);
        assert!(loc["region"]["startColumn"].as_u64().unwrap() >= 1);
    }
}

#[test]
fn sarif_has_the_required_structure() {
    let out = egress(&["lint", "--format", "sarif", BAD]);
    assert_eq!(out.code, 1);
    let doc = out.json();
    assert_sarif_structure(&doc);
    let rules = doc["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .unwrap();
    for id in [
        "parse-error",
        "unknown-key",
        "invalid-pattern",
        "wildcard-public-suffix",
        "shared-hosting",
        "widens-org-policy",
        "redundant-entry",
        "duplicate-entry",
        "allow-deny-conflict",
        "private-cidr",
        "not-normalized",
        "mixed-script",
        "credential-plain-http",
        "canaries-blind",
    ] {
        assert!(rules.iter().any(|r| r["id"] == id), "{id}");
    }
    let results = doc["runs"][0]["results"].as_array().unwrap();
    assert!(results.len() >= 16);
    let uri = &results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"];
    assert!(uri
        .as_str()
        .unwrap()
        .starts_with("tests/fixtures/lint/bad/"));
    // A clean run is still a valid log, with no results.
    let clean = egress(&["lint", "--format", "sarif", "policies"]);
    assert_eq!(clean.code, 0);
    assert_sarif_structure(&clean.json());
    assert_eq!(clean.json()["runs"][0]["results"], Value::Array(vec![]));
}
