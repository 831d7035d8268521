//! Secret detectors on the wire (docs/reference/dlp.md, "Secret detectors"): a value
//! of a detector's shape, a `[[dlp.patterns]]` match or a `[[credentials]]` value, in a
//! header or in a body split across chunks, is refused `secret_detected` and never
//! reaches the origin; a near miss goes through; `action = "report"` lets it through
//! and records `egress.flagged`; a request policy adds detectors but may not turn
//! `refuse` into `report`. No record, answer, metric or log line holds a value.

use std::time::Duration;

use serde_json::Value;

use super::body::post;
use super::sink::Sink;
use crate::events::Events;
use crate::support::client::get_via_proxy;
use crate::support::org::{allowlist_json, Org};
use crate::support::proxy::{Proxy, ProxyBuilder};

pub(super) const GITHUB: &str = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789";
const EMPLOYEE: &str = "EMP-482913";
const CREDENTIAL: &str = "cred-Zq81xPw0LmT6uY3a";
const JWT: &str = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2ln";

/// `[dlp]` with two built-ins, the `employee-id` pattern and `action`; a credential
/// for `secure.test` (allowed on 8080 only: no interception needed) read from a file.
pub(super) fn org(port: u16, action: &str, tag: &str) -> String {
    let dir = std::env::temp_dir().join(format!("egress-detect-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, format!("Bearer {CREDENTIAL}\n")).unwrap();
    Org::standard(port)
        .allow("secure.test:8080")
        .raw_line(&format!(
            "[[credentials]]\nhost = \"secure.test\"\nheader = \"Authorization\"\nvalue_file = {:?}\n\
             [dlp]\ndetectors = [\"github_token\", \"aws_access_key_id\"]\naction = {action:?}\n\
             [[dlp.patterns]]\nname = \"employee-id\"\nregex = \"EMP-[0-9]{{6}}\"",
            token.to_str().unwrap()
        ))
        .to_toml()
}

pub(super) async fn start(action: &str, tag: &str, policy: &str) -> (Sink, Proxy) {
    let sink = Sink::start().await;
    let proxy = ProxyBuilder::new(org(sink.port(), action, tag))
        .policy(policy)
        .pin("allowed.test")
        .admin("events-token")
        .start()
        .await;
    (sink, proxy)
}

/// The records of `event` with a `dlp` object, waiting (bounded) for `n`.
pub(super) async fn dlp_records(proxy: &Proxy, event: &str, n: usize) -> Vec<Value> {
    let of = || -> Vec<Value> {
        let lines = proxy.audit_lines().into_iter();
        lines
            .filter(|r| r["event"] == event && r.get("dlp").is_some())
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while of().len() < n && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    of()
}

/// Nothing the proxy shows (records, its log, `/metrics`, the console's data, and
/// `answers`: answers and events) holds any of the values.
async fn assert_never_shown(proxy: &Proxy, answers: &[String]) {
    let values = [
        GITHUB,
        EMPLOYEE,
        CREDENTIAL,
        JWT,
        "aBcDeFgHiJkLmNoPqRsTuVwXyZ",
        "482913",
    ];
    super::shown::assert_never_shown(proxy, &values, answers).await;
}

#[tokio::test]
async fn a_secret_in_a_header_or_a_split_body_is_refused_and_never_reaches_the_origin() {
    let policy = allowlist_json(&["allowed.test"]);
    let (sink, proxy) = start("refuse", "refuse", &policy).await;
    let mut events = Events::open(&proxy, "?event=egress.denied").await;
    let url = format!("http://allowed.test:{}/upload", sink.port());
    // The probe, and near misses: one character short of each shape goes through.
    let near = [
        ("x-token", &GITHUB[..GITHUB.len() - 1]),
        ("x-id", "EMP-48291"),
    ];
    let ok = get_via_proxy(proxy.addr, &url, &near).await;
    assert_eq!(ok.status, 200, "{}", proxy.diagnostics());
    let mut answers = Vec::new();
    let cases = [
        ("x-token", GITHUB, "github_token", "detector"),
        ("x-id", EMPLOYEE, "employee-id", "pattern"),
        ("x-key", CREDENTIAL, "credential:secure.test", "credential"),
    ];
    for (i, (name, value, id, kind)) in cases.iter().enumerate() {
        let answer = get_via_proxy(proxy.addr, &url, &[(name, value)]).await;
        assert_eq!(answer.status, 403, "{id}: {}", answer.text());
        assert_eq!(answer.json()["error"]["reason"], "secret_detected");
        answers.push(answer.text());
        let records = dlp_records(&proxy, "egress.denied", i + 1).await;
        let r = &records[i];
        assert_eq!(r["reason"], "secret_detected");
        assert_eq!(r["policy_level"], "dlp");
        let dlp = &r["dlp"];
        assert_eq!(
            (dlp["id"].as_str(), dlp["kind"].as_str()),
            (Some(*id), Some(*kind))
        );
        assert_eq!(
            (dlp["encoding"].as_str(), dlp["found_in"].as_str()),
            (Some("plain"), Some("header"))
        );
    }
    // A body with the pattern's match split across two chunks (and writes).
    let body = format!(
        "{{\"note\": \"x\", \"employee\": \"{EMPLOYEE}\", \"pad\": \"{}\"}}",
        "y".repeat(50)
    );
    let at = body.find(EMPLOYEE).unwrap() + 5;
    let (a, b) = body.as_bytes().split_at(at);
    let answer = post(&proxy, sink.port(), "", &[a, b], true)
        .await
        .expect("answered");
    assert_eq!(answer.status, 403, "{}", answer.text());
    answers.push(answer.text());
    let records = dlp_records(&proxy, "egress.denied", 4).await;
    assert_eq!(records.len(), 4, "one record each: {}", proxy.diagnostics());
    assert_eq!(records[3]["dlp"]["found_in"], "body");
    assert!(
        !sink.holds(EMPLOYEE.as_bytes()),
        "the origin received the secret"
    );
    assert!(!sink.holds(GITHUB.as_bytes()) && !sink.holds(CREDENTIAL.as_bytes()));
    let metrics = proxy.admin().metrics().await;
    let line = "egress_dlp_matches_total{detector=\"employee-id\",action=\"refuse\"} 2";
    assert!(metrics.contains(line), "{metrics}");
    // The events stream gives each refusal with its `dlp`, never the value.
    for _ in 0..4 {
        let event = events.next().await;
        assert_eq!(event.data["reason"], "secret_detected");
        answers.push(event.data.to_string());
    }
    assert_never_shown(&proxy, &answers).await;
}

#[tokio::test]
async fn report_lets_a_secret_through_and_records_it_flagged_but_never_a_credential() {
    let policy = allowlist_json(&["allowed.test"]);
    let (sink, proxy) = start("report", "report", &policy).await;
    let url = format!("http://allowed.test:{}/upload", sink.port());
    let answer = get_via_proxy(proxy.addr, &url, &[("x-token", GITHUB)]).await;
    assert_eq!(answer.status, 200, "{}", proxy.diagnostics());
    let flagged = dlp_records(&proxy, "egress.flagged", 1).await;
    assert_eq!(flagged.len(), 1, "{}", proxy.diagnostics());
    assert_eq!(flagged[0]["reason"], "secret_detected");
    assert_eq!(flagged[0]["dlp"]["id"], "github_token");
    assert!(flagged[0].get("url").is_none());
    // A body too: through whole, flagged once.
    let body = format!("id={EMPLOYEE}&x=1");
    let answer = post(&proxy, sink.port(), "", &[body.as_bytes()], false)
        .await
        .unwrap();
    assert_eq!(answer.status, 200);
    assert!(sink.holds(body.as_bytes()));
    let flagged = dlp_records(&proxy, "egress.flagged", 2).await;
    assert_eq!(flagged.len(), 2);
    assert_eq!(flagged[1]["dlp"]["found_in"], "body");
    // The credential's value is never only reported.
    let answer = get_via_proxy(proxy.addr, &url, &[("x-key", CREDENTIAL)]).await;
    assert_eq!(answer.status, 403);
    let metrics = proxy.admin().metrics().await;
    assert!(
        metrics.contains("egress_dlp_matches_total{detector=\"github_token\",action=\"report\"} 1"),
        "{metrics}"
    );
    let audit = proxy.audit_text();
    for value in [GITHUB, CREDENTIAL] {
        assert!(!audit.contains(value) && !proxy.stderr().contains(value));
    }
}

#[tokio::test]
async fn a_request_policy_adds_a_detector_and_may_not_turn_refuse_into_report() {
    // `--policy` adds `jwt`, which the organization does not set.
    let policy = r#"{"type": "allowlist", "allowed_domains": ["allowed.test"], "dlp": {"detectors": ["jwt"]}}"#;
    let (sink, proxy) = start("refuse", "levels", policy).await;
    let url = format!("http://allowed.test:{}/upload", sink.port());
    let answer = get_via_proxy(
        proxy.addr,
        &url,
        &[("authorization", &format!("Bearer {JWT}"))],
    )
    .await;
    assert_eq!(answer.status, 403, "{}", proxy.diagnostics());
    let records = dlp_records(&proxy, "egress.denied", 1).await;
    assert_eq!(records[0]["dlp"]["id"], "jwt");
    // A narrowing that would report instead: refused as a whole, naming the entry.
    let relax = r#"{"type": "allowlist", "allowed_domains": ["allowed.test"], "dlp": {"action": "report"}}"#;
    let answer = get_via_proxy(proxy.addr, &url, &[("x-network-policy", relax)]).await;
    assert_eq!(answer.status, 403);
    assert_eq!(answer.json()["error"]["reason"], "policy_widening");
    let widened = proxy
        .wait_audit(|r| r["reason"] == "policy_widening", Duration::from_secs(5))
        .await;
    let rule = widened["rule"].as_str().unwrap().to_string();
    assert!(rule.contains("dlp.action = \"report\""), "{rule}");
    // A narrowing that adds a pattern works on the same request.
    let adds = r#"{"type": "allowlist", "allowed_domains": ["allowed.test"], "dlp": {"patterns": [{"name": "ticket", "regex": "TKT-[0-9]{5}"}]}}"#;
    let answer = get_via_proxy(
        proxy.addr,
        &url,
        &[("x-network-policy", adds), ("x-t", "TKT-12345")],
    )
    .await;
    assert_eq!(answer.status, 403);
    assert_eq!(answer.json()["error"]["reason"], "secret_detected");
    let ok = get_via_proxy(
        proxy.addr,
        &url,
        &[("x-network-policy", adds), ("x-t", "TKT-1234")],
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert!(!sink.holds(JWT.as_bytes()) && !sink.holds(b"TKT-12345"));
}

#[tokio::test]
async fn a_secret_in_the_target_name_is_the_reason_and_the_name_is_not_recorded() {
    let policy = allowlist_json(&["allowed.test"]);
    let (sink, proxy) = start("refuse", "name", &policy).await;
    // Not allowed either: the detector is what is recorded, in either case.
    let host = format!("{}.allowed.test", GITHUB.to_ascii_lowercase());
    let url = format!("http://{host}:{}/", sink.port());
    let answer = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(answer.status, 403);
    assert_eq!(answer.json()["error"]["reason"], "secret_detected");
    let records = dlp_records(&proxy, "egress.denied", 1).await;
    assert_eq!(records[0]["dlp"]["found_in"], "target");
    assert_eq!(records[0]["host"], "[redacted]");
    let lower = GITHUB.to_ascii_lowercase();
    assert!(!proxy.audit_text().contains(&lower) && !answer.text().contains(&lower));
}
