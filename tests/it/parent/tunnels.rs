//! Tunnels through the parent: a `CONNECT` and a SOCKS5 `CONNECT` become `CONNECT
//! NAME:PORT` to the parent (or the checked address), and an inspected request's
//! connection is TLS to the origin inside a `CONNECT` to the parent.

use super::{Setup, BASIC, USER};
use crate::socks::{socks_addr, Socks, To};
use crate::support::client::{connect_via_proxy, Conn};
use crate::support::org::Org;
use crate::support::proxy::ProxyBuilder;
use crate::support::squid::{require_squid, Squid};
use crate::support::tls::Testbed;

/// `GET /` over an open tunnel: the origin answered.
async fn get_inside(conn: Conn, host: &str) -> u16 {
    let mut inside = Conn::from_stream(conn.into_stream());
    inside
        .send(
            format!("GET /inside HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await;
    inside.read_response().await.status
}

#[tokio::test]
async fn a_connect_is_a_connect_to_the_parent_by_name() {
    require_squid!();
    let s = Setup::start(&[]).await;
    let authority = s.authority("allowed.test");
    let (resp, conn) = connect_via_proxy(s.proxy.addr, &authority, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", s.squid.diagnostics());
    assert_eq!(get_inside(conn, &authority).await, 200);
    assert_eq!(s.origin.hits(), 1);
    let line = s.squid.wait_logged(|l| l.method == "CONNECT").await;
    assert_eq!(line.target, authority);
    assert_eq!((line.status, line.user.as_str()), (200, USER));
    assert_eq!(line.authorization, format!("Basic {BASIC}"));
    let record = s.proxy.allowed_record().await;
    assert_eq!(record["method"], "CONNECT");
    assert_eq!(record["resolved_ip"], "127.0.0.1");
    s.assert_credentials_never_written();
}

#[tokio::test]
async fn a_denied_connect_never_reaches_the_parent() {
    require_squid!();
    let s = Setup::start(&[]).await;
    let (resp, _) = connect_via_proxy(s.proxy.addr, &s.authority("denied.test"), &[]).await;
    assert_eq!(resp.status, 403);
    let (resp, conn) = connect_via_proxy(s.proxy.addr, &s.authority("allowed.test"), &[]).await;
    assert_eq!(resp.status, 200);
    drop(conn);
    s.squid.wait_logged(|l| l.method == "CONNECT").await;
    let logged = s.squid.logged();
    assert!(
        logged.iter().all(|l| !l.target.contains("denied.test")),
        "{logged:#?}"
    );
    assert_eq!(s.dns.queries_for("denied.test"), 0);
}

#[tokio::test]
async fn by_address_a_connect_names_the_checked_address() {
    require_squid!();
    let s = Setup::start(&["--upstream-proxy-by-address"]).await;
    let (resp, conn) = connect_via_proxy(s.proxy.addr, &s.authority("allowed.test"), &[]).await;
    assert_eq!(resp.status, 200);
    drop(conn);
    let line = s.squid.wait_logged(|l| l.method == "CONNECT").await;
    assert_eq!(line.target, format!("127.0.0.1:{}", s.origin.port()));
}

#[tokio::test]
async fn a_socks5_connect_goes_through_the_parent() {
    require_squid!();
    let s = Setup::start(&["--socks-listen", "127.0.0.1:0"]).await;
    let (code, socks) = Socks::connect(
        socks_addr(&s.proxy),
        &To::name("allowed.test"),
        s.origin.port(),
    )
    .await;
    assert_eq!(code, 0x00);
    let answer = socks.http_get("allowed.test").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let line = s.squid.wait_logged(|l| l.method == "CONNECT").await;
    assert_eq!(line.target, s.authority("allowed.test"));
}

#[tokio::test]
async fn an_inspected_request_goes_over_tls_inside_a_connect_to_the_parent() {
    require_squid!();
    let bed = Testbed::start("parent-inspect").await;
    let squid = Squid::start(false, &["secure.test"]);
    let entry = r#"{ host = "secure.test", access = "read-only" }"#;
    let org = Org::new()
        .allow_entry(entry)
        .ports(&[443, bed.origin.port()])
        .loopback()
        .to_toml();
    let proxy = bed
        .proxy(
            ProxyBuilder::new(org)
                .policy(r#"{"type":"allowlist","allowed_domains":[{"host":"secure.test","access":"read-only"}]}"#)
                .arg("--upstream-proxy")
                .arg(&squid.url(None)),
        )
        .start()
        .await;
    let mut inner = bed.inner(&proxy, &[]).await;
    for path in ["/one", "/two"] {
        let answer = inner.request("GET", path, &[], b"").await;
        assert_eq!(answer.status, 200, "{answer:?}\n{}", squid.diagnostics());
    }
    let refused = inner.request("POST", "/write", &[], b"data").await;
    assert_eq!(refused.status, 403);
    assert_eq!(bed.origin.hits(), 2, "the refused POST reached the origin");
    // Squid logs a tunnel when it closes, and the proxy keeps its TLS connection
    // through the parent open for the next request: stopping the proxy closes it.
    drop(inner);
    drop(proxy);
    let line = squid.wait_logged(|l| l.method == "CONNECT").await;
    assert_eq!(line.target, format!("secure.test:{}", bed.origin.port()));
    assert!(
        squid.logged().iter().all(|l| l.method == "CONNECT"),
        "{:#?}",
        squid.logged()
    );
}
