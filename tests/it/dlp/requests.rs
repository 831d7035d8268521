//! A real Python client posting JSON with a canary base64-encoded in it
//! (docs/reference/dlp.md, "What matches"): `requests` (the copy pip vendors, so no
//! package is added) through the proxy to a plain-HTTP allowed origin that keeps every
//! byte it receives. The body is refused `403 exfiltration_detected` and never reaches
//! the origin; the same post without the canary gets the origin's `200`.
//!
//! Detectors look for a value as it is, not decoded (docs/reference/dlp.md, "Secret
//! detectors"), so a detector's match in base64 is not a case here.

use std::process::Command;

use base64::Engine;
use serde_json::Value;

use super::sink::Sink;
use super::{values_file, with_canaries, VALUE};
use crate::support::org::{allowlist_json, Org};
use crate::support::proxy::ProxyBuilder;

/// `post.py PROXY URL VALUE`: one `POST` of `{"data": base64(VALUE)}` through `PROXY`,
/// ignoring the environment's proxies; prints `{"status", "body"}`, `{"error"}` when
/// the client failed, or `skip: WHY` when `requests` is not there.
const POST: &str = r#"
import base64, json, sys
try:
    from pip._vendor import requests
except ImportError as e:
    print("skip: pip does not vendor requests here:", e)
    sys.exit(0)
proxy, url, value = sys.argv[1:4]
session = requests.Session()
session.trust_env = False
data = {"data": base64.b64encode(value.encode()).decode()}
try:
    r = session.post(url, json=data, proxies={"http": proxy}, timeout=10)
    print(json.dumps({"status": r.status_code, "body": r.text}))
except requests.exceptions.RequestException as e:
    print(json.dumps({"error": type(e).__name__}))
"#;

/// Run [`POST`] with `value`; `None` when the client is missing (said why).
async fn post(proxy: &str, url: &str, value: &str) -> Option<Value> {
    let args = [proxy, url, value].map(String::from);
    let out = tokio::task::spawn_blocking(move || {
        Command::new("timeout")
            .args(["30", "python3", "-c", POST])
            .args(&args)
            .env_remove("http_proxy")
            .env_remove("HTTP_PROXY")
            .env_remove("all_proxy")
            .env_remove("ALL_PROXY")
            .output()
    })
    .await
    .unwrap();
    let Ok(out) = out else {
        eprintln!("skipped: python3 is not installed");
        return None;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if let Some(why) = stdout.trim().strip_prefix("skip: ") {
        eprintln!("skipped: {why}");
        return None;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let answer = serde_json::from_str(stdout.trim());
    Some(answer.unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}")))
}

#[tokio::test]
async fn python_requests_posting_a_canary_base64_in_json_is_refused_before_the_origin() {
    let sink = Sink::start().await;
    let file = values_file("requests");
    let org = with_canaries(Org::standard(sink.port()), &file, "refuse");
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .pin("allowed.test")
        .start()
        .await;
    let via = format!("http://{}", proxy.addr);
    let url = format!("http://allowed.test:{}/issues/1/comments", sink.port());
    let b64 = |v: &str| base64::engine::general_purpose::STANDARD.encode(v);
    // The control: the same post without the canary reaches the origin whole.
    let clean = "nothing-secret-in-this-comment";
    let Some(answer) = post(&via, &url, clean).await else {
        return;
    };
    assert_eq!(answer["status"], 200, "{answer} {}", proxy.diagnostics());
    assert!(sink.holds(b64(clean).as_bytes()), "the origin got it");
    let before = sink.bytes().len();

    let answer = post(&via, &url, VALUE).await.expect("ran once already");
    assert_eq!(answer["status"], 403, "{answer} {}", proxy.diagnostics());
    let body: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["error"]["reason"], "exfiltration_detected", "{body}");
    let encoded = b64(VALUE);
    let received = sink.bytes();
    let after = String::from_utf8_lossy(&received[before..]);
    assert!(
        !after.contains(&encoded[..8]) && !after.contains(VALUE),
        "the origin got it, or its start: {after:?}"
    );
    // The whole body is shorter than what the proxy holds back: none of it went on.
    assert!(!after.contains("\"data\""), "nor the body: {after:?}");
    let records: Vec<Value> = proxy
        .audit_lines()
        .into_iter()
        .filter(|r| r.get("dlp").is_some())
        .collect();
    assert_eq!(records.len(), 1, "{}", proxy.diagnostics());
    let record = &records[0];
    assert_eq!(record["event"], "egress.denied", "{record}");
    assert_eq!(record["reason"], "exfiltration_detected", "{record}");
    assert_eq!(record["policy_level"], "dlp", "{record}");
    assert_eq!(record["method"], "POST", "{record}");
    let dlp = &record["dlp"];
    assert_eq!(
        (dlp["id"].as_str(), dlp["kind"].as_str()),
        (Some("org:2"), Some("generic")),
        "{record}"
    );
    assert_eq!(
        (dlp["encoding"].as_str(), dlp["found_in"].as_str()),
        (Some("base64"), Some("body")),
        "{record}"
    );
    assert!(record.get("url").is_none(), "{record}");
    let shown = format!("{}\n{}\n{answer}", proxy.audit_text(), proxy.stderr());
    for form in super::shown::encoded_forms(VALUE) {
        assert!(!shown.contains(&form), "{form} shown:\n{shown}");
    }
}
