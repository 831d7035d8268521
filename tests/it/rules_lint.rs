//! `lint` over entries with rules (docs/reference/policy-files.md, "Entries with rules"):
//! their errors are findings with file, line and column; two entries for one host with
//! different rules are neither duplicates nor redundant; a request entry wider than the
//! organization's rules is `widens-org-policy`, naming the field.

use serde_json::Value;

use crate::lint::egress;

fn findings(dir: &str) -> (Vec<(String, u64, u64, String)>, i32) {
    let out = egress(&["lint", "--format", "json", dir]);
    let json: Value = out.json();
    let list = json["findings"].as_array().expect("findings").iter();
    let found = list
        .map(|f| {
            (
                f["rule"].as_str().unwrap().to_string(),
                f["line"].as_u64().unwrap(),
                f["column"].as_u64().unwrap(),
                f["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (found, out.code)
}

#[test]
fn errors_in_entries_with_rules_are_findings_at_their_value() {
    let (found, code) = findings("tests/fixtures/lint/rules-bad");
    assert_eq!(code, 1);
    let brief: Vec<(&str, u64, u64)> = found.iter().map(|f| (&*f.0, f.1, f.2)).collect();
    assert_eq!(
        brief,
        [
            ("invalid-pattern", 3, 33),
            ("invalid-pattern", 4, 31),
            ("unknown-key", 4, 43),
            ("invalid-pattern", 5, 54),
        ],
        "{found:#?}"
    );
    assert!(
        found[0].3.contains("`a.test`: method `get`"),
        "{}",
        found[0].3
    );
    assert!(found[1].3.contains("normal form: `/y`"), "{}", found[1].3);
    assert!(found[3].3.contains("not both"), "{}", found[3].3);
}

#[test]
fn entries_with_different_rules_for_one_host_are_clean() {
    let (found, code) = findings("tests/fixtures/lint/rules-clean");
    assert_eq!((found.len(), code), (0, 0), "{found:#?}");
}

#[test]
fn a_request_entry_wider_than_the_org_rules_widens_naming_the_field() {
    let (found, code) = findings("tests/fixtures/lint/rules-widens");
    assert_eq!(code, 1);
    let widens: Vec<&(String, u64, u64, String)> = found
        .iter()
        .filter(|f| f.0 == "widens-org-policy")
        .collect();
    assert_eq!(widens.len(), 2, "{found:#?}");
    assert_eq!((widens[0].1, widens[0].2), (2, 3));
    assert!(
        widens[0].3.contains("`git.test` widens")
            && widens[0]
                .3
                .contains("allows methods that `{ host = \"git.test\", access = \"read-only\" }`"),
        "{}",
        widens[0].3
    );
    assert!(
        widens[1]
            .3
            .contains("allows paths that `{ host = \"git.test\", methods = [\"POST\"]"),
        "{}",
        widens[1].3
    );
}
