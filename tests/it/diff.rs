//! `egress-proxy diff` at the command level: exit codes (0 nothing widened, 1 widened,
//! 2 error), every format, and the SARIF checked against the 2.1.0 structure as lint's.

use serde_json::Value;

use crate::lint::{assert_sarif_structure, egress};

const DIR: &str = "tests/fixtures/review";

fn diff(format: &str, old: &str, new: &str) -> crate::lint::Out {
    egress(&[
        "diff",
        "--format",
        format,
        &format!("{DIR}/{old}"),
        &format!("{DIR}/{new}"),
    ])
}

#[test]
fn a_widening_change_exits_1_and_names_each_widening() {
    let out = diff("json", "org-old.toml", "org-widened.toml");
    assert_eq!(out.code, 1, "{}", out.stderr);
    let doc = out.json();
    assert_eq!(doc["widens"], true);
    let kinds: Vec<(&str, &str, Option<&str>)> = doc["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["effect"].as_str().unwrap(),
                c["kind"].as_str().unwrap(),
                c["entry"].as_str(),
            )
        })
        .collect();
    // `*.example.com` replacing a. and b.example.com is one widening, not three changes.
    assert_eq!(
        kinds,
        [
            ("widening", "mode", None),
            ("widening", "allow-added", Some("*.example.com")),
            ("widening", "allow-added", Some("me.github.io")),
            ("widening", "deny-removed", Some("secret.example.com")),
        ]
    );
    assert_eq!(doc["widening"], 4);
    let shared = &doc["changes"][2];
    assert_eq!(shared["shared_hosting"], true);
    assert_eq!(
        (shared["line"].as_u64(), shared["column"].as_u64()),
        (Some(7), Some(5))
    );
}

#[test]
fn a_change_that_only_narrows_exits_0() {
    let out = diff("text", "org-old.toml", "org-narrowed.toml");
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("0 widening, 3 narrowing"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("narrowing[deny-added]"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("narrowing[policy-type]"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("widening["), "{}", out.stdout);
}

#[test]
fn reordering_reformatting_and_a_redundant_entry_are_no_change() {
    let out = diff("json", "org-old.toml", "org-reformatted.toml");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.json()["changes"], Value::Array(vec![]));
    let out = diff("text", "org-reformatted.toml", "org-old.toml");
    assert_eq!(out.code, 0);
    assert!(
        out.stdout.contains("0 widening, 0 narrowing, 0 other"),
        "{}",
        out.stdout
    );
}

#[test]
fn request_policies_are_diffed_too() {
    let out = diff("text", "request-old.json", "request-new.json");
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("widening[allow-added]: allowed_domains: added `*.example.com`"),
        "{}",
        out.stdout
    );
    assert_eq!(diff("text", "request-new.json", "request-old.json").code, 0);
}

#[test]
fn markdown_is_a_summary_line_then_a_table() {
    let out = diff("markdown", "org-old.toml", "org-widened.toml");
    assert_eq!(out.code, 1);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].starts_with("### egress-proxy diff:"),
        "{}",
        out.stdout
    );
    assert!(lines[0].contains("**widens the policy**"), "{}", lines[0]);
    assert!(lines[0].contains("4 widening"), "{}", lines[0]);
    assert_eq!(lines[2], "| | change | setting | where |");
    let rows: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("| **widening**"))
        .collect();
    assert_eq!(rows.len(), 4, "{}", out.stdout);
    assert!(out
        .stdout
        .contains("me.github.io` (ports 80, 443) (on shared hosting)"));
    let quiet = diff("markdown", "org-old.toml", "org-reformatted.toml");
    assert!(quiet.stdout.contains("no change"), "{}", quiet.stdout);
}

#[test]
fn sarif_has_one_error_result_per_widening_change_located_in_new() {
    let out = diff("sarif", "org-old.toml", "org-widened.toml");
    assert_eq!(out.code, 1);
    let doc = out.json();
    assert_sarif_structure(&doc);
    let results = doc["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    for r in results {
        assert_eq!(r["level"], "error");
        let loc = &r["locations"][0]["physicalLocation"];
        assert_eq!(
            loc["artifactLocation"]["uri"],
            format!("{DIR}/org-widened.toml")
        );
    }
    let added = results
        .iter()
        .find(|r| r["ruleId"] == "allow-added")
        .unwrap();
    assert_eq!(
        added["locations"][0]["physicalLocation"]["region"]["startLine"],
        6
    );
    // A diff that only narrows is a valid log with no result at all.
    let narrow = diff("sarif", "org-old.toml", "org-narrowed.toml");
    assert_eq!(narrow.code, 0);
    assert_sarif_structure(&narrow.json());
    assert_eq!(narrow.json()["runs"][0]["results"], Value::Array(vec![]));
}

#[test]
fn errors_exit_2() {
    let mixed = diff("text", "org-old.toml", "request-new.json");
    assert_eq!(mixed.code, 2);
    assert!(mixed.stderr.contains("same kind"), "{}", mixed.stderr);
    let missing = diff("text", "org-old.toml", "nothing-here.toml");
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("cannot read"), "{}", missing.stderr);
    let bad = egress(&[
        "diff",
        &format!("{DIR}/org-old.toml"),
        "tests/fixtures/lint/bad/unknown-key.toml",
    ]);
    assert_eq!(bad.code, 2, "a file that does not load: {}", bad.stderr);
    assert!(bad.stderr.contains("unknown-key.toml:2"), "{}", bad.stderr);
    assert_eq!(egress(&["diff", "--format", "yaml", "a", "b"]).code, 2);
}
