//! SOCKS5 in the jail (docs/reference/socks5.md, "In `run`"): `run` serves it on
//! `127.0.0.1:1080` inside the jail, as it serves the explicit proxy on `:3128`, and
//! `ALL_PROXY` names it, so a tool that knows only SOCKS5 meets the same policy. The
//! origin is on the host's loopback, its name pinned with `--resolve`; the denied name
//! is shown reachable from outside the jail first.

use super::tools::{assert_ok, jail_allowing, outside, records, tool_missing};
use super::{require_jail, Outcome};
use crate::support::origin::Origin;

/// The records `run` wrote for `host` through SOCKS5.
fn socks_records<'a>(out: &'a Outcome, host: &str) -> Vec<&'a serde_json::Value> {
    records(out, host, "socks5")
}

#[tokio::test]
async fn run_serves_socks5_on_1080_in_the_jail_for_an_allowed_name_not_a_denied_one() {
    require_jail!();
    if tool_missing("curl") {
        return;
    }
    let origin = Origin::start().await;
    let port = origin.port();
    // From outside, denied.test reaches the origin: only the jail's proxy stops it.
    let seen = assert_ok(
        "curl denied.test",
        &outside(format!(
            "curl -sS --resolve denied.test:{port}:127.0.0.1 http://denied.test:{port}/outside"
        ))
        .await,
    );
    assert!(seen.contains(&origin.body()), "{seen}");
    let script = format!(
        "curl -sS --socks5-hostname 127.0.0.1:1080 http://allowed.test:{port}/socks; \
         echo \" allowed=$?\"
         curl -sS --socks5-hostname 127.0.0.1:1080 http://denied.test:{port}/socks; \
         echo \" denied=$?\""
    );
    let out = jail_allowing(&["allowed.test"], &[port]).sh(&script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(
        out.stdout.contains(&format!("{} allowed=0", origin.body())),
        "{out}"
    );
    assert!(!out.stdout.contains(" denied=0"), "refused: {out}");
    let requests = origin.requests();
    assert_eq!(
        requests.len(),
        2,
        "one from outside, one from the jail: {out}"
    );
    assert_eq!(requests[1].target, "/socks", "{out}");
    let allowed = socks_records(&out, "allowed.test");
    assert!(
        allowed
            .iter()
            .any(|r| r["event"] == "egress.allowed" && r["method"] == "CONNECT"),
        "{out}"
    );
    let denied = socks_records(&out, "denied.test");
    assert_eq!(denied.len(), 1, "{out}");
    assert_eq!(denied[0]["event"], "egress.denied", "{out}");
    assert_eq!(denied[0]["reason"], "not_in_org_allowlist", "{out}");
    assert_eq!(denied[0]["port"], port, "{out}");
}

#[tokio::test]
async fn run_sets_all_proxy_so_curl_with_only_it_goes_through_socks5() {
    require_jail!();
    if tool_missing("curl") {
        return;
    }
    let origin = Origin::start().await;
    let port = origin.port();
    let only_all_proxy = "env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY";
    let script = format!(
        "echo \"ALL_PROXY=$ALL_PROXY all_proxy=$all_proxy\"
         {only_all_proxy} curl -sS http://allowed.test:{port}/all; echo \" allowed=$?\"
         {only_all_proxy} curl -sS http://denied.test:{port}/all; echo \" denied=$?\""
    );
    let out = jail_allowing(&["allowed.test"], &[port]).sh(&script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(
        out.stdout
            .contains("ALL_PROXY=socks5h://127.0.0.1:1080 all_proxy=socks5h://127.0.0.1:1080"),
        "{out}"
    );
    assert!(
        out.stdout.contains(&format!("{} allowed=0", origin.body())),
        "{out}"
    );
    assert!(!out.stdout.contains(" denied=0"), "refused: {out}");
    assert_eq!(origin.hits(), 1, "only the allowed request: {out}");
    let allowed = socks_records(&out, "allowed.test");
    assert!(
        allowed.iter().any(|r| r["event"] == "egress.allowed"),
        "through SOCKS5, not the explicit proxy: {out}"
    );
    for via in ["proxy", "transparent"] {
        assert!(
            records(&out, "allowed.test", via).is_empty(),
            "{via}: {out}"
        );
    }
    let denied = socks_records(&out, "denied.test");
    assert!(
        denied
            .iter()
            .all(|r| r["event"] == "egress.denied" && r["reason"] == "not_in_org_allowlist"),
        "{out}"
    );
    assert_eq!(denied.len(), 1, "{out}");
}
