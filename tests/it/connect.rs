//! `CONNECT` tunnels: judged before any tunnel opens (docs/reference/answers.md), TLS end to end.

use crate::support::client::{connect_via_proxy, https_get};
use crate::support::expect::{assert_single_denial, Denial};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::HttpsOrigin;
use crate::support::proxy::{Proxy, ProxyBuilder};

/// A proxy whose org allows `secure.test` on `org_ports`.
async fn proxy_for(org_ports: &[u16]) -> Proxy {
    let org = Org::new().allow("secure.test").ports(org_ports).loopback();
    ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["secure.test"]))
        .pin("secure.test")
        .pin("evil.test")
        .start()
        .await
}

#[tokio::test]
async fn connect_to_allowed_name_tunnels_tls_to_the_origin() {
    let origin = HttpsOrigin::start().await;
    let proxy = proxy_for(&[443, origin.port()]).await;
    let target = format!("secure.test:{}", origin.port());
    let (resp, conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    let answer = https_get(conn.into_stream(), origin.cert_der(), "/through").await;
    assert_eq!(answer.status, 200, "{answer:?}\n{}", proxy.diagnostics());
    assert_eq!(answer.text(), origin.body());
    assert_eq!(origin.requests()[0].target, "/through");
}

#[tokio::test]
async fn connect_to_denied_name_is_403_without_a_tunnel() {
    let origin = HttpsOrigin::start().await;
    let proxy = proxy_for(&[443, origin.port()]).await;
    let target = format!("evil.test:{}", origin.port());
    let (resp, mut conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    let want = Denial::new(403, "not_in_org_allowlist")
        .at("evil.test", origin.port())
        .level("org");
    let record = assert_single_denial(&resp, &want, &proxy).await;
    assert_eq!(record["method"], "CONNECT", "{record}");
    // Bytes after the refusal must not open a tunnel either.
    conn.send(b"\x16\x03\x01\x00\x05hello").await;
    let _ = conn.closed_by_peer().await;
    assert_eq!(
        origin.connections(),
        0,
        "the origin saw a TCP connection\n{}",
        proxy.diagnostics()
    );
}

#[tokio::test]
async fn connect_to_allowed_name_on_unlisted_port_is_port_not_allowed() {
    let origin = HttpsOrigin::start().await;
    // The org lists 443 only; the origin's port is not listed.
    let proxy = proxy_for(&[443]).await;
    let target = format!("secure.test:{}", origin.port());
    let (resp, _conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    let want = Denial::new(403, "port_not_allowed")
        .at("secure.test", origin.port())
        .level("org");
    assert_single_denial(&resp, &want, &proxy).await;
    assert_eq!(origin.connections(), 0, "{}", proxy.diagnostics());
}

/// An allowed `CONNECT` whose client leaves without reading the 200 was still dialed
/// upstream: it is recorded, once, like every allowed tunnel.
#[tokio::test]
async fn a_tunnel_whose_client_leaves_at_once_is_still_recorded() {
    use tokio::io::AsyncWriteExt;

    let origin = crate::support::origin::Origin::start().await;
    let proxy = crate::support::proxy::ProxyBuilder::standard(origin.port())
        .audit_allowed()
        .start()
        .await;
    for _ in 0..5 {
        let mut client = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
        let head = format!(
            "CONNECT allowed.test:{0} HTTP/1.1\r\nHost: allowed.test:{0}\r\n\r\n",
            origin.port()
        );
        client.write_all(head.as_bytes()).await.unwrap();
        drop(client);
    }
    // One record each: the allowed tunnel's, or, when hyper dropped the request's work
    // before it was judged, `invalid_request` ("the client closed before ...").
    let records = proxy.expect_audit_count(5).await;
    for record in &records {
        assert_eq!(record["method"], "CONNECT", "{record}");
        assert_eq!(record["host"], "allowed.test", "{record}");
        let allowed = record["event"] == "egress.allowed";
        let unanswered =
            record["event"] == "egress.denied" && record["reason"] == "invalid_request";
        assert!(allowed || unanswered, "{record}");
    }
}
