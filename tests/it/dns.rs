//! Names are resolved through `--dns-server`, and only after they are allowed (docs/reference/policy-files.md).

use std::net::Ipv4Addr;
use std::time::Duration;

use crate::support::client::get_via_proxy;
use crate::support::dns::DnsServer;
use crate::support::expect::{assert_single_denial, Denial};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};

const LOOPBACK: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

async fn dns_with(names: &[&str]) -> DnsServer {
    let mut builder = DnsServer::builder();
    for name in names {
        builder = builder.record(name, LOOPBACK);
    }
    builder.start().await
}

async fn proxy(org: Org, policy: &[&str], dns: &DnsServer) -> Proxy {
    ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(policy))
        .dns_server(dns.addr())
        .start()
        .await
}

#[tokio::test]
async fn allowed_name_is_resolved_through_the_dns_server() {
    let origin = Origin::start().await;
    let dns = dns_with(&["allowed.test"]).await;
    let proxy = proxy(Org::standard(origin.port()), &["allowed.test"], &dns).await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(resp.text(), origin.body());
    assert!(
        dns.queries_for("allowed.test") >= 1,
        "no query reached the test DNS server: {:?}",
        dns.queried_names()
    );
}

#[tokio::test]
async fn denied_name_causes_no_dns_query() {
    let origin = Origin::start().await;
    // The DNS server would answer evil.test: only the policy can stop the query.
    let dns = dns_with(&["allowed.test", "evil.test"]).await;
    let proxy = proxy(Org::standard(origin.port()), &["allowed.test"], &dns).await;
    let url = format!("http://evil.test:{}/", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    let want = Denial::new(403, "not_in_org_allowlist")
        .at("evil.test", origin.port())
        .level("org");
    assert_single_denial(&resp, &want, &proxy).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        dns.queries_for("evil.test"),
        0,
        "a denied name was looked up: {:?}",
        dns.queried_names()
    );
    assert_eq!(origin.connections(), 0);
}

#[tokio::test]
async fn allowed_name_resolving_to_loopback_without_cidr_is_private_address() {
    let origin = Origin::start().await;
    let dns = dns_with(&["allowed.test"]).await;
    let org = Org::new()
        .allow("allowed.test")
        .ports(&[80, 443, origin.port()]);
    let proxy = proxy(org, &["allowed.test"], &dns).await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    let want = Denial::new(403, "private_address")
        .at("allowed.test", origin.port())
        .level("address");
    let record = assert_single_denial(&resp, &want, &proxy).await;
    assert_eq!(record["resolved_ip"], "127.0.0.1", "{record}");
    assert_eq!(origin.connections(), 0, "{}", proxy.diagnostics());
}

#[tokio::test]
async fn allowed_name_unknown_to_dns_is_502() {
    let origin = Origin::start().await;
    let dns = dns_with(&["allowed.test"]).await;
    let org = Org::standard(origin.port()).allow("ghost.test");
    let proxy = proxy(org, &["allowed.test", "ghost.test"], &dns).await;
    let url = format!("http://ghost.test:{}/", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(resp.status, 502, "{resp:?}\n{}", proxy.diagnostics());
    assert!(
        dns.queries_for("ghost.test") >= 1,
        "{:?}",
        dns.queried_names()
    );
    assert_eq!(origin.connections(), 0);
}
