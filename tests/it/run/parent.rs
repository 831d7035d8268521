//! `run --upstream-proxy` (docs/reference/parent-proxy.md): what CMD is allowed goes
//! through the parent (plain HTTP in absolute form, a SOCKS5 tunnel as `CONNECT`), what
//! it is refused never reaches the parent. The parent is squid on the host's loopback.

use super::require_jail;
use super::tools::{jail_allowing, outside, tool_missing};
use crate::support::origin::Origin;
use crate::support::squid::{require_squid, Squid};

#[tokio::test]
async fn run_sends_what_cmd_is_allowed_through_the_parent_and_nothing_it_is_refused() {
    require_jail!();
    require_squid!();
    if tool_missing("curl") {
        return;
    }
    let origin = Origin::start().await;
    let port = origin.port();
    let squid = Squid::start(false, &["allowed.test", "denied.test"]);
    // The parent itself passes denied.test: only the jail's proxy stops it.
    let probe = outside(format!(
        "curl -sS -x {} http://denied.test:{port}/probe",
        squid.url(None)
    ))
    .await;
    assert_eq!(
        String::from_utf8_lossy(&probe.stdout),
        origin.body(),
        "{probe:?}"
    );
    squid.wait_logged(|l| l.target.contains("/probe")).await;
    let script = format!(
        "curl -sS http://allowed.test:{port}/plain; echo \" plain=$?\"
         curl -sS --socks5-hostname 127.0.0.1:1080 http://allowed.test:{port}/socks; \
         echo \" socks=$?\"
         curl -sS http://denied.test:{port}/denied; echo \" denied=$?\""
    );
    let out = jail_allowing(&["allowed.test"], &[port])
        .arg("--upstream-proxy")
        .arg(squid.url(None))
        .sh(&script)
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(
        out.stdout.contains(&format!("{} plain=0", origin.body())),
        "{out}"
    );
    assert!(
        out.stdout.contains(&format!("{} socks=0", origin.body())),
        "{out}"
    );
    let targets: Vec<String> = origin.requests().iter().map(|r| r.target.clone()).collect();
    assert_eq!(targets, ["/probe", "/plain", "/socks"], "{out}");
    let plain = format!("http://allowed.test:{port}/plain");
    squid
        .wait_logged(|l| l.method == "GET" && l.target == plain)
        .await;
    let tunnel = format!("allowed.test:{port}");
    squid
        .wait_logged(|l| l.method == "CONNECT" && l.target == tunnel)
        .await;
    let logged = squid.logged();
    assert_eq!(
        logged.len(),
        3,
        "the probe, /plain and the tunnel: {logged:#?}"
    );
    let denied = logged.iter().filter(|l| l.target.contains("denied.test"));
    assert_eq!(denied.count(), 1, "only the probe's: {logged:#?}");
}
