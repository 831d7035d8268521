//! Reloading the organization policy (docs/reference/control-plane.md): SIGHUP and `POST /v1/reload`, a
//! narrower file, a broken file, sessions revoked, and a `--policy` left widening.

use std::time::Duration;

use crate::support::admin::metric;
use crate::support::client::{connect_via_proxy, get_via_proxy};
use crate::support::expect::{assert_denied_response, Denial};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{ProxyBuilder, AUDIT_TIMEOUT};
use crate::support::sessions::{
    allowlist, assert_no_secrets, org, proxy_with, wait_for_status, ADMIN_TOKEN,
};

/// The org of [`org`] with both names in its default policy too.
fn open_org(port: u16) -> Org {
    org(port).default_policy(
        r#"{ type = "allowlist", allowed_domains = ["allowed.test", "other.test"] }"#,
    )
}

/// The same, without `other.test`.
fn narrower_org(port: u16) -> Org {
    Org::standard(port)
        .default_policy(r#"{ type = "allowlist", allowed_domains = ["allowed.test"] }"#)
}

#[tokio::test]
async fn sighup_reloads_a_narrower_file_and_open_tunnels_keep_running() {
    let origin = Origin::start().await;
    let proxy = proxy_with(&open_org(origin.port()), &[]).await;
    let other = format!("http://other.test:{}/", origin.port());
    let allowed = format!("http://allowed.test:{}/", origin.port());
    assert_eq!(get_via_proxy(proxy.addr, &other, &[]).await.status, 200);
    let target = format!("other.test:{}", origin.port());
    let (resp, mut tunnel) = connect_via_proxy(proxy.addr, &target, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}");

    std::fs::write(proxy.org_path(), narrower_org(origin.port()).to_toml()).unwrap();
    proxy.hup();
    wait_for_status(&proxy, &other, &[], 403).await;
    let resp = get_via_proxy(proxy.addr, &other, &[]).await;
    assert_denied_response(&resp, &Denial::new(403, "not_in_org_allowlist"), &proxy);
    assert_eq!(get_via_proxy(proxy.addr, &allowed, &[]).await.status, 200);
    // The tunnel opened before the reload still carries bytes.
    tunnel
        .send(b"GET / HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n")
        .await;
    let answer = tunnel.read_response().await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let text = proxy.admin().metrics().await;
    assert_eq!(
        metric(&text, "egress_reloads_ok_total"),
        Some(1.0),
        "{text}"
    );
}

#[tokio::test]
async fn post_reload_applies_a_narrower_file_and_refuses_a_broken_one() {
    let origin = Origin::start().await;
    let proxy = proxy_with(&open_org(origin.port()), &[]).await;
    let admin = proxy.admin();
    let other = format!("http://other.test:{}/", origin.port());
    let allowed = format!("http://allowed.test:{}/", origin.port());

    std::fs::write(
        proxy.org_path(),
        "version = 1\nallowed_domains = [\"*.com\"]\n",
    )
    .unwrap();
    let resp = admin.call("POST", "/v1/reload", None).await;
    assert_eq!(resp.status, 422, "{resp:?}");
    let message = resp.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("*.com"), "{message}");
    // The running policy stays; the failure is in the proxy's log.
    assert_eq!(get_via_proxy(proxy.addr, &other, &[]).await.status, 200);
    // Read from the proxy's standard error by a thread: wait for it (bounded).
    assert!(
        proxy.stderr_shows("reload failed", AUDIT_TIMEOUT).await,
        "{}",
        proxy.stderr()
    );

    // SIGHUP with a broken file changes nothing either.
    std::fs::write(proxy.org_path(), "version = 1\nnot toml [").unwrap();
    proxy.hup();
    let started = std::time::Instant::now();
    while metric(&admin.metrics().await, "egress_reloads_failed_total") != Some(2.0) {
        assert!(started.elapsed() < AUDIT_TIMEOUT, "{}", proxy.diagnostics());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(get_via_proxy(proxy.addr, &other, &[]).await.status, 200);

    std::fs::write(proxy.org_path(), narrower_org(origin.port()).to_toml()).unwrap();
    let resp = admin.call("POST", "/v1/reload", None).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    let resp = get_via_proxy(proxy.addr, &other, &[]).await;
    assert_denied_response(&resp, &Denial::new(403, "not_in_org_allowlist"), &proxy);
    assert_eq!(get_via_proxy(proxy.addr, &allowed, &[]).await.status, 200);
}

#[tokio::test]
async fn reload_revokes_sessions_it_no_longer_covers() {
    let origin = Origin::start().await;
    let proxy = proxy_with(&org(origin.port()), &[]).await;
    let admin = proxy.admin();
    let wide = admin
        .create_session(&allowlist(&["other.test"]), None)
        .await;
    let narrow = admin
        .create_session(&allowlist(&["allowed.test"]), None)
        .await;
    let target = format!("other.test:{}", origin.port());
    let (resp, mut tunnel) = connect_via_proxy(
        proxy.addr,
        &target,
        &[("Proxy-Authorization", &wide.proxy_auth())],
    )
    .await;
    assert_eq!(resp.status, 200, "{resp:?}");

    std::fs::write(proxy.org_path(), Org::standard(origin.port()).to_toml()).unwrap();
    let resp = admin.call("POST", "/v1/reload", None).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(
        resp.json()["revoked_sessions"],
        serde_json::json!([wide.id.as_str()])
    );
    let record = proxy
        .wait_audit(|r| r["event"] == "session.revoked", AUDIT_TIMEOUT)
        .await;
    assert_eq!(record["session"], wide.id.as_str(), "{record}");
    assert!(
        record["rule"]
            .as_str()
            .is_some_and(|r| r.contains("other.test")),
        "{record}"
    );
    // Ended: its tunnel closes and its credentials stop working.
    assert!(
        tunnel.closed_by_peer().await,
        "the revoked session's tunnel stayed open"
    );
    let url = format!("http://allowed.test:{}/", origin.port());
    let resp = get_via_proxy(
        proxy.addr,
        &url,
        &[("Proxy-Authorization", &wide.proxy_auth())],
    )
    .await;
    assert_denied_response(&resp, &Denial::new(407, "auth_required"), &proxy);
    let resp = get_via_proxy(
        proxy.addr,
        &url,
        &[("Proxy-Authorization", &narrow.proxy_auth())],
    )
    .await;
    assert_eq!(resp.status, 200, "{resp:?}");
    let text = admin.metrics().await;
    assert_eq!(
        metric(&text, "egress_sessions_revoked_total"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(metric(&text, "egress_sessions_active"), Some(1.0), "{text}");
    assert_no_secrets(&proxy, &[&wide.token, &narrow.token, ADMIN_TOKEN]);
}

#[tokio::test]
async fn proxy_policy_left_widening_by_a_reload_refuses_every_request() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::new(org(origin.port()).to_toml())
        .policy(allowlist_json(&["allowed.test", "other.test"]))
        .pin("allowed.test")
        .pin("other.test")
        .admin(ADMIN_TOKEN)
        .start()
        .await;
    let allowed = format!("http://allowed.test:{}/", origin.port());
    assert_eq!(get_via_proxy(proxy.addr, &allowed, &[]).await.status, 200);

    std::fs::write(proxy.org_path(), Org::standard(origin.port()).to_toml()).unwrap();
    let resp = proxy.admin().call("POST", "/v1/reload", None).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert!(resp.json()["policy_widening"].is_array(), "{resp:?}");
    let resp = get_via_proxy(proxy.addr, &allowed, &[]).await;
    assert_denied_response(&resp, &Denial::new(403, "policy_widening"), &proxy);

    // Fixed by a reload that covers it again.
    std::fs::write(proxy.org_path(), org(origin.port()).to_toml()).unwrap();
    proxy.hup();
    wait_for_status(&proxy, &allowed, &[], 200).await;
}

/// A `CONNECT` is decided under one policy snapshot, and its first bytes must be judged
/// under the same one: a reload that lands between the decision and the first bytes
/// (here: while the name resolves, held back by a slow DNS server) does not apply to it.
#[tokio::test]
async fn a_tunnel_decided_before_a_reload_is_judged_by_the_policy_it_was_decided_with() {
    use crate::support::client::Conn;
    use crate::support::dns::DnsServer;

    let origin = Origin::start().await;
    let dns = DnsServer::builder()
        .record("slow.test", std::net::Ipv4Addr::LOCALHOST)
        .delay(Duration::from_millis(800))
        .start()
        .await;
    let tunnels = |require_tls| {
        Org::new()
            .allow("slow.test")
            .ports(&[origin.port()])
            .loopback()
            .tunnels(Some(require_tls), None)
    };
    let proxy = ProxyBuilder::new(tunnels(true).to_toml())
        .policy(allowlist_json(&["slow.test"]))
        .dns_server(dns.addr())
        .start()
        .await;
    let target = format!("slow.test:{}", origin.port());
    let addr = proxy.addr;
    let connect = {
        let target = target.clone();
        tokio::spawn(async move { connect_via_proxy(addr, &target, &[]).await })
    };
    // The name was allowed (a denied name is never resolved): reload now, while the
    // DNS answer is held back, to a policy that no longer requires TLS.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while dns.queries_for("slow.test") == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no DNS query was sent"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    std::fs::write(proxy.org_path(), tunnels(false).to_toml()).unwrap();
    proxy.hup();
    assert!(
        proxy.stderr_shows("policy reloaded", AUDIT_TIMEOUT).await,
        "{}",
        proxy.diagnostics()
    );
    let (resp, conn) = connect.await.unwrap();
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    let mut tunnel = conn;
    let plain = b"GET / HTTP/1.1\r\nHost: slow.test\r\nConnection: close\r\n\r\n";
    tunnel.send(plain).await;
    assert!(tunnel.closed_by_peer().await, "{}", proxy.diagnostics());
    let record = proxy
        .wait_audit(|r| r["reason"] == "sni_mismatch", AUDIT_TIMEOUT)
        .await;
    assert_eq!(record["method"], "CONNECT", "{record}");
    assert_eq!(origin.hits(), 0, "plain bytes reached the origin");

    // The probe works: a tunnel decided after the reload carries the same bytes.
    let (resp, conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    let mut tunnel: Conn = conn;
    tunnel.send(plain).await;
    assert_eq!(tunnel.read_response().await.status, 200);
    assert_eq!(origin.hits(), 1);
}
