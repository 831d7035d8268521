//! The attacker's view, part 2 (issue 5): where an allowed request may land. Another
//! port of an allowed name, and an allowed name resolving to a blocked address (pinned,
//! by DNS rebinding, or mixed into one answer). Loops and chained proxies are in
//! `bypass::looping`.
//!
//! "Allowed address first, blocked later" is modelled on loopback only: the org opens
//! `127.0.0.2/32` (an origin listens there) and `127.0.0.1` is the blocked address,
//! where another origin listens on the same port and must never be reached.

use std::net::{Ipv4Addr, SocketAddr};

use crate::bypass::assert_no_connection;
use crate::support::client::{connect_via_proxy, get_via_proxy, Conn};
use crate::support::dns::DnsServer;
use crate::support::expect::{assert_denials_logged, assert_refused_as_one_of};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::{HttpsOrigin, Origin};
use crate::support::proxy::{Proxy, ProxyBuilder};

const BLOCKED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const GOOD: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// An origin on 127.0.0.2 (the address the org allows) and one on 127.0.0.1 (blocked)
/// on the same port, so one URL could reach either.
async fn good_and_blocked_origins() -> (Origin, Origin) {
    for _ in 0..20 {
        let good = Origin::start_at("good", SocketAddr::new(GOOD.into(), 0))
            .await
            .expect("bind 127.0.0.2");
        let blocked_addr = SocketAddr::new(BLOCKED.into(), good.port());
        if let Ok(blocked) = Origin::start_at("blocked", blocked_addr).await {
            return (good, blocked);
        }
    }
    panic!("no port free on both 127.0.0.1 and 127.0.0.2");
}

/// An origin on 127.0.0.1 whose port is free on 127.0.0.2.
async fn blocked_origin_alone() -> Origin {
    for _ in 0..20 {
        let probe = std::net::TcpListener::bind((GOOD, 0)).expect("bind 127.0.0.2");
        let addr = SocketAddr::new(BLOCKED.into(), probe.local_addr().expect("addr").port());
        if let Ok(blocked) = Origin::start_at("blocked", addr).await {
            return blocked;
        }
    }
    panic!("no port free on both 127.0.0.1 and 127.0.0.2");
}

/// The org for the two-address tests: `allowed.test` on `port`, only 127.0.0.2 open.
fn good_only_org(port: u16) -> Org {
    Org::new()
        .allow("allowed.test")
        .ports(&[80, 443, port])
        .cidr("127.0.0.2/32")
}

async fn dns_proxy(org: Org, dns: &DnsServer) -> Proxy {
    ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .dns_server(dns.addr())
        .start()
        .await
}

#[tokio::test]
async fn connect_to_a_name_allowed_only_on_another_port_is_port_not_allowed() {
    let listed = HttpsOrigin::start().await;
    let other = HttpsOrigin::start().await;
    // `secure.test` is allowed on the listed origin's port only (an entry with a port).
    let org = Org::new()
        .allow(&format!("secure.test:{}", listed.port()))
        .allow(&format!("allowed.test:{}", listed.port()))
        .loopback();
    let policy = allowlist_json(&[
        &format!("secure.test:{}", listed.port()),
        &format!("allowed.test:{}", listed.port()),
    ]);
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(policy)
        .pin("secure.test")
        .pin("allowed.test")
        .start()
        .await;
    let mut refusals = Vec::new();
    for target in [
        format!("secure.test:{}", other.port()),
        "secure.test:443".to_string(),
        format!("SECURE.test.:{}", other.port()),
    ] {
        let (resp, _conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
        refusals.push(assert_refused_as_one_of(
            &resp,
            403,
            &["port_not_allowed"],
            &proxy,
        ));
    }
    let url = format!("http://allowed.test:{}/", other.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    refusals.push(assert_refused_as_one_of(
        &resp,
        403,
        &["port_not_allowed"],
        &proxy,
    ));
    assert_denials_logged(&proxy, &refusals).await;
    assert_eq!(other.connections(), 0, "{}", proxy.diagnostics());
    assert_eq!(listed.connections(), 0, "{}", proxy.diagnostics());
}

#[tokio::test]
async fn allowed_name_pinned_to_a_blocked_address_is_private_address() {
    let origin = Origin::start().await;
    // No CIDR: loopback is closed. Each name is pinned to a spelling of it (or to the
    // unspecified address, which a connect() on Linux turns into loopback).
    let org = Org::new()
        .allow("a.test")
        .allow("b.test")
        .allow("c.test")
        .ports(&[80, 443, origin.port()]);
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["a.test", "b.test", "c.test"]))
        .pin_to("a.test", "127.0.0.1")
        .pin_to("b.test", "::ffff:127.0.0.1")
        .pin_to("c.test", "0.0.0.0")
        .start()
        .await;
    let mut refusals = Vec::new();
    for name in ["a.test", "b.test", "c.test"] {
        let url = format!("http://{name}:{}/", origin.port());
        let resp = get_via_proxy(proxy.addr, &url, &[]).await;
        refusals.push(assert_refused_as_one_of(
            &resp,
            403,
            &["private_address"],
            &proxy,
        ));
        let target = format!("{name}:{}", origin.port());
        let (resp, _conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
        refusals.push(assert_refused_as_one_of(
            &resp,
            403,
            &["private_address"],
            &proxy,
        ));
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&origin, &proxy);
}

#[tokio::test]
async fn dns_rebinding_to_a_blocked_address_is_private_address() {
    let (good, blocked) = good_and_blocked_origins().await;
    // First answer: the allowed address. Every later answer: the blocked one.
    let dns = DnsServer::builder()
        .answers("allowed.test", &[&[GOOD], &[BLOCKED]])
        .start()
        .await;
    let proxy = dns_proxy(good_only_org(good.port()), &dns).await;
    let url = format!("http://allowed.test:{}/", good.port());

    let first = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(first.status, 200, "{first:?}\n{}", proxy.diagnostics());
    assert_eq!(first.text(), good.body());

    let second = get_via_proxy(proxy.addr, &url, &[]).await;
    let refusals = vec![assert_refused_as_one_of(
        &second,
        403,
        &["private_address"],
        &proxy,
    )];
    let target = format!("allowed.test:{}", good.port());
    let (third, _conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    let mut refusals = refusals;
    refusals.push(assert_refused_as_one_of(
        &third,
        403,
        &["private_address"],
        &proxy,
    ));
    assert_denials_logged(&proxy, &refusals).await;
    let record = &proxy.audit_lines()[0];
    assert_eq!(record["resolved_ip"], "127.0.0.1", "{record}");
    assert_eq!(good.hits(), 1);
    assert_no_connection(&blocked, &proxy);
    assert!(
        dns.queries_for("allowed.test") >= 3,
        "{:?}",
        dns.queried_names()
    );
}

#[tokio::test]
async fn answer_mixing_allowed_and_blocked_addresses_dials_only_the_allowed_one() {
    let (good, blocked) = good_and_blocked_origins().await;
    // The blocked address comes first, where a naive dialer would start.
    let dns = DnsServer::builder()
        .answers("allowed.test", &[&[BLOCKED, GOOD]])
        .start()
        .await;
    let proxy = dns_proxy(good_only_org(good.port()), &dns).await;

    let url = format!("http://allowed.test:{}/", good.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(resp.text(), good.body());

    // Through a tunnel too (plain bytes pass on a port other than 443 by default).
    let target = format!("allowed.test:{}", good.port());
    let (resp, conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    let mut tunnel = Conn::from_stream(conn.into_stream());
    tunnel
        .send(b"GET /t HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
        .await;
    assert_eq!(tunnel.read_response().await.text(), good.body());

    assert_eq!(good.hits(), 2);
    assert_no_connection(&blocked, &proxy);
    proxy.expect_audit_count(0).await;
}

#[tokio::test]
async fn answer_mixing_allowed_and_blocked_addresses_never_falls_back_to_the_blocked_one() {
    // Only the blocked origin listens: nothing answers on 127.0.0.2 at its port.
    let blocked = blocked_origin_alone().await;
    let port = blocked.port();
    let dns = DnsServer::builder()
        .answers("allowed.test", &[&[BLOCKED, GOOD]])
        .start()
        .await;
    let proxy = dns_proxy(good_only_org(port), &dns).await;
    let resp = get_via_proxy(proxy.addr, &format!("http://allowed.test:{port}/"), &[]).await;
    assert_eq!(resp.status, 502, "{resp:?}\n{}", proxy.diagnostics());
    let (resp, _conn) = connect_via_proxy(proxy.addr, &format!("allowed.test:{port}"), &[]).await;
    assert_eq!(resp.status, 502, "{resp:?}\n{}", proxy.diagnostics());
    assert_no_connection(&blocked, &proxy);
}
