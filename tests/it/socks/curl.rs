//! A real client: `curl --socks5-hostname` (the name is sent to the proxy, never
//! resolved by curl), allowed and denied. Skipped, with a reason printed, when curl is
//! not installed.

use std::process::Command;
use std::time::Duration;

use super::{assert_socks_record, Setup};
use crate::support::proxy::AUDIT_TIMEOUT;
use crate::support::sessions::{allowlist, ADMIN_TOKEN};

/// `curl --socks5-hostname SOCKS URL`: its exit code and standard output.
async fn curl(socks: std::net::SocketAddr, url: &str) -> Option<(i32, String)> {
    curl_with(&["--socks5-hostname", &socks.to_string(), url]).await
}

/// curl with `args` (and a time limit): its exit code and standard output; `None`,
/// with the reason printed, when curl cannot be run.
async fn curl_with(args: &[&str]) -> Option<(i32, String)> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let run = move || {
        Command::new("curl")
            .args(["-sS", "--max-time", "10", "--noproxy", ""])
            .args(&args)
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
            .output()
    };
    let output = tokio::time::timeout(Duration::from_secs(15), tokio::task::spawn_blocking(run))
        .await
        .expect("curl ends in time")
        .expect("curl's thread");
    match output {
        Err(e) => {
            eprintln!("skipped: curl cannot be run here: {e}");
            None
        }
        Ok(out) => Some((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )),
    }
}

#[tokio::test]
async fn curl_socks5_hostname_reaches_an_allowed_name_and_not_a_denied_one() {
    let s = Setup::start(&[]).await;
    let port = s.origin.port();
    let Some((code, body)) = curl(s.socks, &format!("http://allowed.test:{port}/")).await else {
        return;
    };
    assert_eq!(code, 0, "curl through SOCKS5 to an allowed name: {body}");
    assert!(body.contains("origin"), "{body}");
    let allowed = s.proxy.allowed_record().await;
    assert_socks_record(&allowed, "egress.allowed", None);
    assert_eq!(allowed["host"], "allowed.test");

    let (code, _) = curl(s.socks, &format!("http://evil.test:{port}/"))
        .await
        .unwrap();
    // curl: 97, "proxy handshake error" (older curls say 7) for a refused SOCKS5 CONNECT.
    assert!(code == 97 || code == 7, "curl exit {code}");
    let denied = s
        .proxy
        .wait_audit(|r| r["event"] == "egress.denied", AUDIT_TIMEOUT)
        .await;
    assert_socks_record(&denied, "egress.denied", Some("not_in_org_allowlist"));
    assert_eq!(denied["host"], "evil.test");
    assert_eq!(s.dns.queries_for("evil.test"), 0);
    assert_eq!(s.origin.hits(), 1);
}

#[tokio::test]
async fn curl_with_a_session_in_a_socks5h_url_uses_it_and_wrong_credentials_are_rejected() {
    let s = Setup::start_custom(|org| org, |builder| builder.admin(ADMIN_TOKEN)).await;
    let session = s
        .proxy
        .admin()
        .create_session(&allowlist(&["allowed.test"]), None)
        .await;
    let url = format!("http://allowed.test:{}/", s.origin.port());
    let proxy = format!("socks5h://{}:{}@{}", session.id, session.token, s.socks);
    let Some((code, body)) = curl_with(&["--proxy", &proxy, &url]).await else {
        return;
    };
    assert_eq!(code, 0, "{body}");
    let allowed = s.proxy.allowed_record().await;
    assert_socks_record(&allowed, "egress.allowed", None);
    assert_eq!(allowed["session"], session.id.as_str());

    let wrong = format!("socks5h://{}:wrong@{}", session.id, s.socks);
    let (code, _) = curl_with(&["--proxy", &wrong, &url]).await.unwrap();
    assert!(code == 97 || code == 7, "curl exit {code}");
    let denied = s
        .proxy
        .wait_audit(|r| r["event"] == "egress.denied", AUDIT_TIMEOUT)
        .await;
    assert_socks_record(&denied, "egress.denied", Some("auth_required"));
    crate::support::sessions::assert_no_secrets(&s.proxy, &[&session.token]);
}
