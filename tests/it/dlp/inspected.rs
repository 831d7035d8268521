//! Canaries in the bodies of requests inside intercepted tunnels (docs/reference/dlp.md,
//! "Bodies"), HTTP/1.1 and h2, sent by curl through a real CONNECT to a real TLS origin:
//! refused 403 on their stream, the origin never holding a request with the value; a
//! body without it goes through.

use std::time::Duration;

use super::{values_file, with_canaries, VALUE};
use crate::support::org::{allowlist_json, Org};
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::tls::Testbed;

/// Run curl through `proxy` to `url`, trusting the test CA, with `args`: its status.
async fn curl(proxy: &Proxy, bed: &Testbed, url: &str, args: Vec<String>) -> String {
    let mut command = std::process::Command::new("curl");
    command
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .args(["-x", &format!("http://{}", proxy.addr)])
        .arg("--cacert")
        .arg(bed.ca.join("ca.pem"))
        .args(args)
        .arg(url)
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY");
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[tokio::test]
async fn a_canary_in_an_inspected_body_h1_or_h2_is_refused_and_never_reaches_the_origin() {
    let bed = Testbed::start("dlp-inspected").await;
    let file = values_file("inspected");
    let org = Org::new()
        .allow_entry(r#"{ host = "secure.test", inspect = true }"#)
        .ports(&[443, bed.origin.port()])
        .loopback();
    let org = with_canaries(org, &file, "refuse");
    let builder = ProxyBuilder::new(org.to_toml()).policy(allowlist_json(&["secure.test"]));
    let proxy = bed.proxy(builder).start().await;
    let url = format!("https://secure.test:{}/upload", bed.origin.port());
    let dir = bed.dir.clone();
    // The value straddles 16 KiB, where an h2 client cuts its DATA frames.
    let body = |inner: &str| format!("{}{inner}{}", "a".repeat(16_384 - 9), "b".repeat(5000));
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        format!("@{}", path.display())
    };
    let clean = write("clean.txt", body("nothing-secret-here!"));
    let carrying = write("carrying.txt", body(VALUE));
    for version in ["--http1.1", "--http2"] {
        let args = |file: &str| vec![version.to_string(), "--data-binary".into(), file.into()];
        let ok = curl(&proxy, &bed, &url, args(&clean)).await;
        assert_eq!(ok, "200", "{version}: {}", proxy.diagnostics());
        let refused = curl(&proxy, &bed, &url, args(&carrying)).await;
        assert_eq!(refused, "403", "{version}: {}", proxy.diagnostics());
    }
    assert_eq!(bed.origin.hits(), 2, "only the clean bodies arrived");
    for request in bed.origin.requests() {
        let text = String::from_utf8_lossy(&request.body);
        assert!(!text.contains(VALUE) && text.contains("nothing-secret"));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let records = loop {
        let found: Vec<_> = proxy
            .audit_lines()
            .into_iter()
            .filter(|r| r["reason"] == "exfiltration_detected")
            .collect();
        if found.len() >= 2 || std::time::Instant::now() > deadline {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(records.len(), 2, "{}", proxy.diagnostics());
    for record in &records {
        assert_eq!(record["dlp"]["found_in"], "body", "{record}");
        assert_eq!(record["host"], "secure.test", "{record}");
    }
    assert!(!proxy.audit_text().contains(VALUE) && !proxy.stderr().contains(VALUE));
}
