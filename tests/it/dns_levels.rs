//! A DNS refusal names the level that refused the name (docs/reference/confinement.md,
//! "DNS listener"): the nearest level that allows it on no port, never the first port
//! tried. The names are known to a test DNS server upstream, so only the policy keeps
//! the queries there.

use std::net::Ipv4Addr;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use serde_json::Value;

use crate::support::dns::DnsServer;
use crate::support::dns_client::{a_records, dns_listener, UdpClient};
use crate::support::org::{allowlist_json, Org};
use crate::support::proxy::{Proxy, ProxyBuilder};

/// The README's example: the organization allows `app.test:8080` and `other.test:8080`;
/// the proxy's `--policy` allows `app.test:8080`.
async fn proxy(upstream: &DnsServer) -> Proxy {
    let org = Org::new().allow("app.test:8080").allow("other.test:8080");
    ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["app.test:8080"]))
        .dns_server(upstream.addr())
        .arg("--dns-listen")
        .arg("127.0.0.1:0")
        .start()
        .await
}

async fn refusal_of(proxy: &Proxy, udp: &mut UdpClient, name: &str) -> Value {
    let m = udp.query(&format!("{name}."), RecordType::A).await;
    assert_eq!(m.response_code(), ResponseCode::NXDomain, "{name}: {m:?}");
    proxy
        .wait_audit(|r| r["host"] == name, std::time::Duration::from_secs(5))
        .await
}

#[tokio::test]
async fn a_dns_refusal_names_the_level_that_allows_the_name_on_no_port() {
    let mut upstream = DnsServer::builder();
    for name in ["app.test", "other.test", "evil.test"] {
        upstream = upstream.record(name, Ipv4Addr::LOCALHOST);
    }
    let upstream = upstream.start().await;
    let proxy = proxy(&upstream).await;
    let mut udp = UdpClient::new(dns_listener(&proxy)).await;

    // Allowed on :8080 by both levels: answered, so the probe reaches the listener.
    let app = udp.query("app.test.", RecordType::A).await;
    assert_eq!(a_records(&app).len(), 1, "{app:?}\n{}", proxy.diagnostics());

    let cases = [
        // Allowed by the organization on :8080 only, absent from the request policy.
        (
            "other.test",
            "not_in_request_policy",
            "request",
            Value::Null,
        ),
        ("evil.test", "not_in_org_allowlist", "org", Value::Null),
    ];
    for (name, reason, level, rule) in cases {
        let record = refusal_of(&proxy, &mut udp, name).await;
        let ctx = || format!("{name}: {record}\n{}", proxy.diagnostics());
        assert_eq!(record["event"], "egress.denied", "{}", ctx());
        assert_eq!(record["via"], "dns", "{}", ctx());
        assert_eq!(record["reason"], reason, "{}", ctx());
        assert_eq!(record["policy_level"], level, "{}", ctx());
        assert_eq!(record["rule"], rule, "{}", ctx());
    }
    assert!(
        upstream.queried_names().is_empty(),
        "a refused name was asked upstream: {:?}",
        upstream.queried_names()
    );
}
