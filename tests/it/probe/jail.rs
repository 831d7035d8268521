//! The probe inside `egress-proxy run` (docs/guides/probe.md): every check `closed`
//! (`icmp` may be `unknown`: no ICMP socket is permitted there), an allowed URL reached,
//! exit 0; and the same run with one channel opened by the test (a URL the policy
//! allows, given as `--denied`) is exit 1 naming `proxy-enforces`.

use serde_json::Value;

use super::IDS;
use crate::run::{require_jail, shared_dir, Jailed};
use crate::support::origin::Origin;
use crate::support::proxy::binary;

fn results(doc: &Value) -> Vec<(String, String, String)> {
    doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("id"), s("result"), s("evidence"))
        })
        .collect()
}

#[tokio::test]
async fn inside_run_every_check_is_closed_and_an_allowed_url_is_reached() {
    require_jail!();
    let origin = Origin::start().await;
    let home = shared_dir("probe-home");
    let allowed = format!("http://allowed.test:{}/", origin.port());
    let bin = binary();
    let out = Jailed::standard(origin.port())
        .env("HOME", home.to_str().unwrap())
        .run(&[
            bin.as_str(),
            "probe",
            "--format",
            "json",
            "--timeout-ms",
            "1000",
            "--allowed",
            &allowed,
        ])
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    let doc: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out}"));
    let results = results(&doc);
    assert_eq!(results.len(), IDS.len());
    for (id, result, evidence) in &results {
        let want: &[&str] = match id.as_str() {
            "proxy-allows" => &["open"],
            "icmp" => &["closed", "unknown"],
            _ => &["closed"],
        };
        assert!(
            want.contains(&result.as_str()),
            "{id} {result}: {evidence}\n{out}"
        );
    }
    assert!(origin.hits() >= 1, "the allowed URL reached the origin");
    // The proxy's own refusals were what closed the channels it takes.
    let evidence = |id: &str| results.iter().find(|r| r.0 == id).unwrap().2.clone();
    assert!(evidence("tcp4-direct").contains("handshake taken"), "{out}");
    assert!(
        evidence("udp-dns-system").contains("this proxy's DNS listener"),
        "{out}"
    );
    assert!(evidence("proxy-enforces").contains("refused"), "{out}");
}

#[tokio::test]
async fn inside_run_a_channel_the_test_opens_is_exit_1_naming_it() {
    require_jail!();
    let origin = Origin::start().await;
    let home = shared_dir("probe-home");
    // The policy allows this URL: given as `--denied`, the proxy is seen to let it by.
    let leaky = format!("http://allowed.test:{}/", origin.port());
    let bin = binary();
    let out = Jailed::standard(origin.port())
        .env("HOME", home.to_str().unwrap())
        .run(&[
            bin.as_str(),
            "probe",
            "--format",
            "json",
            "--timeout-ms",
            "1000",
            "--denied",
            &leaky,
        ])
        .await;
    assert_eq!(out.code(), Some(1), "{out}");
    let doc: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        doc["summary"]["failing"],
        serde_json::json!(["proxy-enforces"]),
        "{out}"
    );
    assert_eq!(doc["open"], serde_json::json!(["proxy-enforces"]), "{out}");
}
