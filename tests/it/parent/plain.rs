//! Plain HTTP through the parent: the request in absolute form with the parent's
//! credentials, one kept-open connection to the parent for several requests, denied
//! requests never sent, `--upstream-no-proxy` and `--upstream-proxy-by-address`.

use super::{Setup, BASIC, USER};
use crate::support::client::{get_via_proxy, Conn};
use crate::support::squid::require_squid;

#[tokio::test]
async fn an_allowed_request_reaches_the_origin_through_the_parent_with_its_credentials() {
    require_squid!();
    let s = Setup::start(&[]).await;
    let url = format!("http://{}/plain?q=1", s.authority("allowed.test"));
    let resp = get_via_proxy(s.proxy.addr, &url, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", s.squid.diagnostics());
    assert_eq!(s.origin.hits(), 1);
    let seen = &s.origin.requests()[0];
    assert_eq!(seen.target, "/plain?q=1");
    assert_eq!(
        seen.header("host"),
        Some(s.authority("allowed.test").as_str())
    );
    assert_eq!(
        seen.header("proxy-authorization"),
        None,
        "the parent's credentials went on to the origin"
    );
    let line = s.squid.wait_logged(|l| l.method == "GET").await;
    assert_eq!(
        line.target, url,
        "the parent is asked by name, in absolute form"
    );
    assert_eq!(line.status, 200);
    assert_eq!(line.user, USER);
    assert_eq!(line.authorization, format!("Basic {BASIC}"));
    let record = s.proxy.allowed_record().await;
    assert_eq!(
        record["resolved_ip"], "127.0.0.1",
        "the address the proxy checked"
    );
    s.assert_credentials_never_written();
}

#[tokio::test]
async fn requests_to_the_parent_share_one_kept_open_connection() {
    require_squid!();
    // One worker, so every client connection uses the same pool.
    let s = Setup::start(&["--workers", "1"]).await;
    for _ in 0..3 {
        // A new client connection each time: only the proxy's pool can keep one.
        let url = format!("http://{}/again", s.authority("allowed.test"));
        assert_eq!(get_via_proxy(s.proxy.addr, &url, &[]).await.status, 200);
    }
    let mut conn = Conn::open(s.proxy.addr).await;
    assert_eq!(conn.get(&s.authority("other.test"), "/").await.status, 200);
    let started = std::time::Instant::now();
    while s.squid.logged().len() < 4 {
        assert!(
            started.elapsed() < crate::support::squid::LOG_TIMEOUT,
            "{:#?}",
            s.squid.logged()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let ports: std::collections::HashSet<u16> =
        s.squid.logged().iter().map(|l| l.client_port).collect();
    assert_eq!(
        ports.len(),
        1,
        "one connection to the parent: {:#?}",
        s.squid.logged()
    );
}

#[tokio::test]
async fn a_denied_request_never_reaches_the_parent_and_its_name_is_never_looked_up() {
    require_squid!();
    let s = Setup::start(&[]).await;
    let denied = format!("http://{}/leak", s.authority("denied.test"));
    let resp = get_via_proxy(s.proxy.addr, &denied, &[]).await;
    assert_eq!(resp.status, 403, "{resp:?}");
    assert_eq!(resp.header("x-egress-denied"), Some("not_in_org_allowlist"));
    // A request after it, which does reach the parent, so its log is known current.
    let allowed = format!("http://{}/after", s.authority("allowed.test"));
    assert_eq!(get_via_proxy(s.proxy.addr, &allowed, &[]).await.status, 200);
    s.squid.wait_logged(|l| l.target.contains("/after")).await;
    let logged = s.squid.logged();
    assert!(
        logged.iter().all(|l| !l.target.contains("denied.test")),
        "{logged:#?}"
    );
    assert_eq!(
        s.dns.queries_for("denied.test"),
        0,
        "a denied name was looked up"
    );
    assert!(
        s.dns.queries_for("allowed.test") > 0,
        "the allowed name is resolved and checked first"
    );
}

#[tokio::test]
async fn a_no_proxy_destination_is_dialed_directly() {
    require_squid!();
    let s = Setup::start(&["--upstream-no-proxy", "allowed.test"]).await;
    let direct = format!("http://{}/direct", s.authority("allowed.test"));
    assert_eq!(get_via_proxy(s.proxy.addr, &direct, &[]).await.status, 200);
    assert_eq!(s.origin.hits(), 1, "the request reached the origin");
    let via = format!("http://{}/via", s.authority("other.test"));
    assert_eq!(get_via_proxy(s.proxy.addr, &via, &[]).await.status, 200);
    s.squid.wait_logged(|l| l.target.contains("/via")).await;
    let logged = s.squid.logged();
    assert!(
        logged.iter().all(|l| !l.target.contains("/direct")),
        "{logged:#?}"
    );
}

#[tokio::test]
async fn by_address_the_parent_is_asked_for_the_checked_address() {
    require_squid!();
    let s = Setup::start(&["--upstream-proxy-by-address"]).await;
    let url = format!("http://{}/by-address", s.authority("allowed.test"));
    assert_eq!(get_via_proxy(s.proxy.addr, &url, &[]).await.status, 200);
    let line = s.squid.wait_logged(|l| l.method == "GET").await;
    let checked = format!("http://127.0.0.1:{}/by-address", s.origin.port());
    assert_eq!(line.target, checked);
    // (squid rewrites `Host` from the URL it is given: what the origin sees is squid's.)
    assert_eq!(s.origin.hits(), 1);
}
