//! `egress-proxy audit summarize` at the command level: plain and gzip logs, malformed
//! lines skipped and counted, `--since`, and the text, JSON and HTML formats.

use std::io::Write;

use crate::lint::egress;
use crate::support::unique_temp_dir;

const LOG: &str = "tests/fixtures/audit/audit.jsonl";
const OLDER: &str = "tests/fixtures/audit/older.jsonl";

#[test]
fn summary_counts_reasons_hosts_and_malformed_lines() {
    let out = egress(&["audit", "summarize", "--format", "json", LOG]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let s = out.json();
    assert_eq!(s["records"], 14);
    assert_eq!(s["malformed"], 3, "not JSON, a bad ts, no ts");
    assert_eq!(s["denials"], 12, "denied and would_deny");
    assert_eq!(s["denials_by_reason"][0]["name"], "not_in_org_allowlist");
    assert_eq!(s["denials_by_reason"][0]["count"], 9);
    let top = &s["top_denied_hosts"][0];
    assert_eq!(top["host"], "evil.test");
    assert_eq!(top["denials"], 6);
    assert_eq!(top["sessions_total"], 2);
    assert_eq!(top["sessions"][0]["name"], "s-alpha");
    assert_eq!(
        top["clients"][0]["name"], "10.0.0.5",
        "client ports are dropped"
    );
    assert_eq!(top["clients_total"], 2);
    let shared: Vec<&str> = s["shared_hosting"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["host"].as_str().unwrap())
        .collect();
    assert_eq!(shared.len(), 2);
    assert!(shared.contains(&"me.github.io") && shared.contains(&"abc.github.io"));
    assert_eq!(s["timeline"]["unit"], "minute", "twenty minutes of records");
    assert_eq!(s["timeline"]["buckets"].as_array().unwrap().len(), 21);
}

#[test]
fn suspected_exfiltration_is_reported() {
    let s = egress(&["audit", "summarize", "--format", "json", LOG]).json();
    let found: Vec<(String, String)> = s["suspected_exfiltration"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["host"].as_str().unwrap().into(),
                x["kind"].as_str().unwrap().into(),
            )
        })
        .collect();
    let kinds: Vec<&str> = found.iter().map(|(_, k)| k.as_str()).collect();
    assert!(kinds.contains(&"long_label"), "{found:?}");
    assert!(kinds.contains(&"high_entropy_label"), "{found:?}");
    assert!(
        found.contains(&("collect.example.net".into(), "long_query".into())),
        "{found:?}"
    );
    assert!(
        !found
            .iter()
            .any(|(h, _)| h == "evil.test" || h == "169.254.169.254"),
        "{found:?}"
    );
}

#[test]
fn gzip_logs_read_like_plain_ones() {
    let dir = unique_temp_dir("summary-gz");
    let gz = dir.join("audit.jsonl.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::default(),
    );
    enc.write_all(
        &std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(LOG)).unwrap(),
    )
    .unwrap();
    enc.finish().unwrap();
    let plain = egress(&["audit", "summarize", "--format", "json", LOG]).json();
    let out = egress(&[
        "audit",
        "summarize",
        "--format",
        "json",
        gz.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let zipped = out.json();
    for key in [
        "records",
        "malformed",
        "denials",
        "denials_by_reason",
        "top_denied_hosts",
        "timeline",
    ] {
        assert_eq!(zipped[key], plain[key], "{key}");
    }
    // Both together: counted once each.
    let both = egress(&[
        "audit",
        "summarize",
        "--format",
        "json",
        LOG,
        gz.to_str().unwrap(),
    ])
    .json();
    assert_eq!(both["records"], 28);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn since_leaves_out_older_records_and_buckets_follow_the_span() {
    let all = egress(&["audit", "summarize", "--format", "json", LOG, OLDER]).json();
    assert_eq!(all["records"], 15);
    assert_eq!(all["timeline"]["unit"], "hour", "a day of records");
    let since = egress(&[
        "audit",
        "summarize",
        "--format",
        "json",
        "--since",
        "2026-11-29T00:00:00Z",
        LOG,
        OLDER,
    ])
    .json();
    assert_eq!(since["records"], 14);
    assert_eq!(since["skipped_before_since"], 1);
    assert_eq!(since["timeline"]["unit"], "minute");
}

#[test]
fn text_output_has_every_section() {
    let out = egress(&["audit", "summarize", LOG]);
    assert_eq!(out.code, 0);
    for section in [
        "14 records, 3 malformed lines skipped",
        "Denials by reason (12 in all)",
        "Top denied hosts",
        "sessions (2): s-alpha (5), s-beta (1)",
        "Shared-hosting traffic",
        "Suspected exfiltration",
        "Timeline (per minute",
    ] {
        assert!(out.stdout.contains(section), "{section}\n{}", out.stdout);
    }
}

#[test]
fn html_is_one_self_contained_page_with_two_charts() {
    let out = egress(&["audit", "summarize", "--format", "html", LOG]);
    assert_eq!(out.code, 0);
    let html = &out.stdout;
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    assert_eq!(html.matches("<svg").count(), 2, "timeline and top hosts");
    assert!(
        html.contains("aria-label=\"timeline\"")
            && html.contains("aria-label=\"top denied hosts\"")
    );
    for external in ["<script", "src=", "href=", "url(", "@import"] {
        assert!(
            !html.contains(external),
            "no external assets or scripts: {external}"
        );
    }
    assert!(html.contains("evil.test"));
}

#[test]
fn errors_exit_2() {
    assert_eq!(
        egress(&["audit", "summarize", "tests/fixtures/audit/missing.jsonl"]).code,
        2
    );
    assert_eq!(
        egress(&["audit", "summarize", "--since", "yesterday", LOG]).code,
        2
    );
    assert_eq!(
        egress(&["audit", "summarize", "--format", "pdf", LOG]).code,
        2
    );
    assert_eq!(egress(&["audit", "summarize"]).code, 2);
    // A file of nothing but garbage is not an error: every line is counted as malformed.
    let out = egress(&[
        "audit",
        "summarize",
        "--format",
        "json",
        "tests/fixtures/lint/bad/parse-error.toml",
    ]);
    assert_eq!(out.code, 0);
    assert_eq!(out.json()["malformed"], 2);
}
