//! `egress-proxy audit suggest` and `audit replay` at the command level: the suggestion
//! loads as `--policy` against the organization, lints clean, and replaying the same log
//! under it breaks nothing; replay's counts, formats and exit codes.

use std::io::Write;

use crate::lint::egress;
use crate::support::client::get_via_proxy;
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::ProxyBuilder;
use crate::support::unique_temp_dir;

const ORG: &str = "tests/fixtures/review/org.toml";
const LOG: &str = "tests/fixtures/review/audit.jsonl";

/// Suggest from `logs` and write the policy to a temp file; its path and the run.
fn suggested(logs: &[&str]) -> (std::path::PathBuf, crate::lint::Out) {
    let mut args = vec!["audit", "suggest", "--org", ORG];
    args.extend(logs);
    let out = egress(&args);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let dir = unique_temp_dir("suggest");
    let path = dir.join("suggested.json");
    std::fs::write(&path, &out.stdout).unwrap();
    (path, out)
}

#[test]
fn the_suggestion_is_the_narrowest_policy_covering_the_traffic() {
    let (_, out) = suggested(&[LOG]);
    let policy = out.json();
    assert_eq!(policy["type"], "allowlist");
    // Three names under example.com collapse (d. was would_deny: used too); api is used
    // on both organization ports; the shared-hosting name stays exact; the IP is a /32.
    assert_eq!(
        policy["allowed_domains"],
        serde_json::json!(["*.example.com:443", "api.example.net", "me.github.io:443"])
    );
    assert_eq!(policy["allowed_cidrs"], serde_json::json!(["10.20.1.2/32"]));
    // What the organization refuses is left out, and said on standard error.
    assert!(out.stderr.contains("evil.test:443"), "{}", out.stderr);
    assert!(
        out.stderr.contains("secret.example.com:443"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("denied_domain"), "{}", out.stderr);
    assert!(!out.stdout.contains("evil.test"));
}

/// The fixture log without its shared-hosting and private-address traffic, whose
/// entries lint rightly warns about.
fn ordinary_log() -> String {
    let text = std::fs::read_to_string(LOG).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| !l.contains("me.github.io") && !l.contains("10.20.1.2"))
        .map(|l| format!("{l}\n"))
        .collect();
    let path = unique_temp_dir("suggest-log").join("audit.jsonl");
    std::fs::write(&path, kept).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn the_suggestion_loads_lints_clean_and_replays_without_breaking() {
    let log = ordinary_log();
    let (path, _) = suggested(&[&log]);
    let path = path.to_str().unwrap();
    // Loads as --policy against the organization (check loads exactly as serve does).
    let check = egress(&["check", "--org", ORG, "--policy", path, "a.example.com:443"]);
    assert_eq!(check.code, 0, "{}{}", check.stdout, check.stderr);
    let lint = egress(&[
        "lint",
        "--deny-warnings",
        "--format",
        "json",
        "--org",
        ORG,
        path,
    ]);
    let doc = lint.json();
    let findings: Vec<&serde_json::Value> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["file"] == path)
        .collect();
    assert!(findings.is_empty(), "{findings:#?}");
    let replay = egress(&[
        "audit", "replay", "--format", "json", "--org", ORG, "--policy", path, &log,
    ]);
    assert_eq!(replay.code, 0, "{}", replay.stdout);
    let r = replay.json();
    assert_eq!(r["would_break"], 0, "{r:#}");
    assert_eq!(r["would_open"], 0, "{r:#}");
    assert_eq!(r["records"], 14);
}

#[test]
fn shared_hosting_and_private_addresses_used_are_kept_and_only_warned_about() {
    let (path, out) = suggested(&[LOG]);
    assert!(
        out.stderr.contains("`me.github.io` is on shared hosting"),
        "{}",
        out.stderr
    );
    let path = path.to_str().unwrap();
    let lint = egress(&["lint", "--format", "json", "--org", ORG, path]);
    assert_eq!(lint.code, 0, "{}", lint.stdout);
    let doc = lint.json();
    let mut rules: Vec<&str> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["file"] == path)
        .map(|f| {
            assert_eq!(f["severity"], "warning", "{f}");
            f["rule"].as_str().unwrap()
        })
        .collect();
    rules.sort();
    assert_eq!(rules, ["private-cidr", "shared-hosting"]);
    let replay = egress(&["audit", "replay", "--org", ORG, "--policy", path, LOG]);
    assert_eq!(replay.code, 0, "{}", replay.stdout);
    assert!(
        replay
            .stdout
            .contains("0 would break, 0 would open, 16 unchanged"),
        "{}",
        replay.stdout
    );
}

#[test]
fn gzip_logs_and_text_output() {
    let dir = unique_temp_dir("suggest-gz");
    let gz = dir.join("audit.jsonl.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::default(),
    );
    enc.write_all(&std::fs::read(LOG).unwrap()).unwrap();
    enc.finish().unwrap();
    let plain = egress(&["audit", "suggest", "--org", ORG, LOG]);
    let zipped = egress(&["audit", "suggest", "--org", ORG, gz.to_str().unwrap()]);
    assert_eq!(plain.stdout, zipped.stdout);
    let text = egress(&["audit", "suggest", "--format", "text", "--org", ORG, LOG]);
    assert_eq!(text.code, 0);
    assert!(text.stdout.contains("*.example.com:443"), "{}", text.stdout);
    assert!(
        text.stdout.contains("4 names, 10 records"),
        "{}",
        text.stdout
    );
    assert_eq!(
        egress(&["audit", "suggest", "--org", ORG, "missing.jsonl"]).code,
        2
    );
}

#[test]
fn replay_under_a_narrower_policy_reports_what_would_break() {
    // The organization's default policy allows only api.example.net.
    let out = egress(&["audit", "replay", "--format", "json", "--org", ORG, LOG]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let r = out.json();
    assert_eq!(r["would_break"], 12, "{r:#}");
    assert_eq!(r["would_open"], 0);
    assert_eq!(r["unchanged"], 4);
    assert_eq!(r["not_redecided"], 1, "the auth_required denial");
    let first = &r["breaks"][0];
    assert_eq!(first["records"], 3);
    assert_eq!(
        first["examples"],
        serde_json::json!(["r0", "r1", "r2"]),
        "{first}"
    );
    assert_eq!(first["now"]["reason"], "not_in_request_policy");
    let text = egress(&["audit", "replay", "--org", ORG, LOG]);
    assert_eq!(text.code, 1);
    assert!(
        text.stdout.contains("12 would break, 0 would open"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("would break (6 destinations):"),
        "{}",
        text.stdout
    );
}

#[test]
fn replay_under_a_wider_organization_reports_what_would_open() {
    let dir = unique_temp_dir("replay-open");
    let org = dir.join("org.toml");
    std::fs::write(
        &org,
        "version = 1\nallowed_domains = [\"*.example.com\", \"api.example.net\", \"*.github.io\", \"evil.test\"]\nallowed_cidrs = [\"10.20.0.0/16\"]\ndefault_network_policy = { type = \"allowlist\", allowed_domains = [\"*.example.com\", \"api.example.net\", \"*.github.io\", \"evil.test\"], allowed_cidrs = [\"10.20.0.0/16\"] }\n",
    )
    .unwrap();
    let out = egress(&[
        "audit",
        "replay",
        "--format",
        "json",
        "--org",
        org.to_str().unwrap(),
        LOG,
    ]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let r = out.json();
    assert_eq!(
        r["would_open"], 2,
        "evil.test and secret.example.com: {r:#}"
    );
    assert_eq!(r["would_break"], 0, "{r:#}");
    let hosts: Vec<&str> = r["opens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["host"].as_str().unwrap())
        .collect();
    assert!(
        hosts.contains(&"evil.test") && hosts.contains(&"secret.example.com"),
        "{hosts:?}"
    );
}

#[test]
fn replay_errors_exit_2() {
    let widening = "tests/fixtures/review/request-new.json";
    let out = egress(&[
        "audit",
        "replay",
        "--org",
        "tests/fixtures/review/org-old.toml",
        "--policy",
        widening,
        LOG,
    ]);
    assert_eq!(out.code, 2, "a widening --policy: {}", out.stderr);
    assert_eq!(
        egress(&["audit", "replay", "--org", ORG, "missing.jsonl"]).code,
        2
    );
}

/// The whole loop on the wire: a proxy writes the log of real traffic, the suggestion
/// made from it starts a second proxy as its `--policy`, which lets the same traffic
/// through and refuses the rest, and replaying the log under it breaks nothing.
#[tokio::test]
async fn a_suggestion_from_a_real_log_serves_the_same_traffic() {
    let origin = Origin::start().await;
    let port = origin.port();
    let org = Org::new()
        .allow("*.app.test")
        .allow("other.test")
        .ports(&[80, 443, port])
        .loopback()
        .to_toml();
    let names = [
        "a.app.test",
        "b.app.test",
        "c.app.test",
        "other.test",
        "evil.test",
    ];
    let pinned = |mut b: ProxyBuilder| {
        for n in names {
            b = b.pin(n);
        }
        b
    };
    let wide = pinned(ProxyBuilder::new(org.clone()))
        .policy(allowlist_json(&["*.app.test"]))
        .audit_allowed()
        .start()
        .await;
    for name in names {
        let resp = get_via_proxy(wide.addr, &format!("http://{name}:{port}/"), &[]).await;
        let want = if name.ends_with(".app.test") {
            200
        } else {
            403
        };
        assert_eq!(resp.status, want, "{name}: {}", wide.diagnostics());
    }
    let records = wide.expect_audit_count(names.len()).await;
    let evil = records.iter().find(|r| r["host"] == "evil.test").unwrap();
    assert_eq!(evil["reason"], "not_in_org_allowlist");
    let dir = unique_temp_dir("suggest-wire");
    let (log, org_path) = (dir.join("audit.jsonl"), dir.join("org.toml"));
    std::fs::write(&log, wide.audit_text()).unwrap();
    std::fs::write(&org_path, &org).unwrap();
    let (log, org_path) = (log.to_str().unwrap(), org_path.to_str().unwrap());

    let out = egress(&["audit", "suggest", "--org", org_path, log]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.json()["allowed_domains"],
        serde_json::json!([format!("*.app.test:{port}")]),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains(&format!("evil.test:{port}")),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!("other.test:{port}")),
        "{}",
        out.stderr
    );

    let narrow = pinned(ProxyBuilder::new(org.clone()))
        .policy(out.stdout.clone())
        .start()
        .await;
    for name in names {
        let resp = get_via_proxy(narrow.addr, &format!("http://{name}:{port}/"), &[]).await;
        let want = if name.ends_with(".app.test") {
            200
        } else {
            403
        };
        assert_eq!(resp.status, want, "{name}: {}", narrow.diagnostics());
    }
    let policy = dir.join("suggested.json");
    std::fs::write(&policy, &out.stdout).unwrap();
    let replay = egress(&[
        "audit",
        "replay",
        "--format",
        "json",
        "--org",
        org_path,
        "--policy",
        policy.to_str().unwrap(),
        log,
    ]);
    assert_eq!(replay.code, 0, "{}", replay.stdout);
    assert_eq!(replay.json()["would_break"], 0);
    assert_eq!(replay.json()["records"], 5, "{}", replay.stdout);
}

/// Records that carry a method and a URL (plain HTTP, or inside an intercepted tunnel)
/// are judged with the entries' methods and paths.
#[test]
fn replay_judges_a_logged_request_by_its_method_and_path() {
    let dir = unique_temp_dir("replay-rules");
    let (org, log) = (dir.join("org.toml"), dir.join("audit.jsonl"));
    std::fs::write(
        &org,
        "version = 1\nallowed_domains = [{ host = \"api.example.com\", methods = [\"GET\", \"DELETE\"], paths = [\"/v1/*\"] }]\ndefault_network_policy = { type = \"allowlist\", allowed_domains = [{ host = \"api.example.com\", methods = [\"GET\", \"DELETE\"], paths = [\"/v1/*\"] }] }\n",
    )
    .unwrap();
    let rec = |event: &str, method: &str, path: &str, reason: &str| {
        format!("{{\"ts\":\"2026-11-29T10:00:00Z\",\"event\":\"{event}\",\"method\":\"{method}\",\"host\":\"api.example.com\",\"port\":443,\"url\":\"https://api.example.com{path}\",\"reason\":{reason}}}\n")
    };
    let text = rec("egress.allowed", "GET", "/v1/a?q=1", "null")
        + &rec("egress.allowed", "POST", "/v1/a", "null")
        + &rec("egress.allowed", "GET", "/v2/a", "null")
        + &rec("egress.denied", "DELETE", "/v1/a", "\"method_not_allowed\"");
    std::fs::write(&log, text).unwrap();
    let out = egress(&[
        "audit",
        "replay",
        "--format",
        "json",
        "--org",
        org.to_str().unwrap(),
        log.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let r = out.json();
    assert_eq!(
        (
            r["would_break"].as_u64(),
            r["would_open"].as_u64(),
            r["unchanged"].as_u64()
        ),
        (Some(2), Some(1), Some(1)),
        "{r:#}"
    );
    let reasons: Vec<&str> = r["breaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["now"]["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons.contains(&"method_not_allowed") && reasons.contains(&"path_not_allowed"),
        "{r:#}"
    );
    assert_eq!(r["opens"][0]["method"], "DELETE");
}
