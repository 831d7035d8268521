//! Sessions on the proxy path: their credentials run under their policy and are named
//! in the audit, bad credentials are 407, `--require-session`, idle expiry, and DELETE
//! closing an open tunnel.

use std::time::Duration;

use serde_json::Value;

use crate::support::admin::{basic, metric};
use crate::support::client::{connect_via_proxy, get_via_proxy};
use crate::support::expect::{assert_denied_response, Denial};
use crate::support::origin::Origin;
use crate::support::sessions::{allowlist, assert_no_secrets, org, proxy_with};

#[tokio::test]
async fn session_credentials_run_under_its_policy_and_name_it_in_the_audit() {
    let origin = Origin::start().await;
    let proxy = proxy_with(&org(origin.port()), &["--audit-allowed"]).await;
    let session = proxy
        .admin()
        .create_session(&allowlist(&["allowed.test"]), None)
        .await;
    let auth = session.proxy_auth();
    let allowed = format!("http://allowed.test:{}/in", origin.port());
    let resp = get_via_proxy(proxy.addr, &allowed, &[("Proxy-Authorization", &auth)]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(
        origin.requests()[0].header("proxy-authorization"),
        None,
        "credentials forwarded upstream"
    );
    // Covered by the org, not by the session: the session's level refuses it.
    let other = format!("http://other.test:{}/out", origin.port());
    let resp = get_via_proxy(proxy.addr, &other, &[("Proxy-Authorization", &auth)]).await;
    let want = Denial::new(403, "not_in_request_policy").level("request");
    assert_denied_response(&resp, &want, &proxy);
    // Without the session the closed default applies.
    let resp = get_via_proxy(proxy.addr, &allowed, &[]).await;
    assert_denied_response(&resp, &Denial::new(403, "network_disabled"), &proxy);
    // A header may narrow the session, never widen it.
    let header = allowlist(&["other.test"]).to_string();
    let resp = get_via_proxy(
        proxy.addr,
        &other,
        &[
            ("Proxy-Authorization", &auth),
            ("X-Network-Policy", &header),
        ],
    )
    .await;
    assert_denied_response(&resp, &Denial::new(403, "policy_widening"), &proxy);

    let lines = proxy.expect_audit_count(4).await;
    let sessions: Vec<&Value> = lines.iter().map(|r| &r["session"]).collect();
    let id = Value::from(session.id.as_str());
    assert_eq!(sessions, [&id, &id, &Value::Null, &id], "{lines:?}");
    assert_eq!(lines[0]["event"], "egress.allowed");
}

#[tokio::test]
async fn bad_credentials_are_407_audited_without_the_token() {
    let origin = Origin::start().await;
    let proxy = proxy_with(&org(origin.port()), &[]).await;
    let session = proxy
        .admin()
        .create_session(&allowlist(&["allowed.test"]), None)
        .await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let wrong_token = basic(&session.id, "0000");
    let unknown_id = basic("no-such-session", &session.token);
    for auth in [wrong_token.as_str(), unknown_id.as_str(), "Bearer x"] {
        let resp = get_via_proxy(proxy.addr, &url, &[("Proxy-Authorization", auth)]).await;
        assert_denied_response(&resp, &Denial::new(407, "auth_required"), &proxy);
        assert_eq!(
            resp.header("proxy-authenticate"),
            Some("Basic realm=\"egress-proxy\""),
            "{resp:?}"
        );
    }
    // A CONNECT is refused the same way, before any tunnel opens.
    let target = format!("allowed.test:{}", origin.port());
    let (resp, _conn) = connect_via_proxy(
        proxy.addr,
        &target,
        &[("Proxy-Authorization", &wrong_token)],
    )
    .await;
    assert_eq!(resp.status, 407, "{resp:?}");
    let lines = proxy.expect_audit_count(4).await;
    for line in &lines {
        assert_eq!(line["reason"], "auth_required", "{line}");
        assert_eq!(line["session"], Value::Null, "{line}");
    }
    assert_eq!(origin.connections(), 0);
    assert_no_secrets(&proxy, &[&session.token]);
}

#[tokio::test]
async fn require_session_refuses_requests_without_one() {
    let origin = Origin::start().await;
    let org = org(origin.port())
        .default_policy(r#"{ type = "allowlist", allowed_domains = ["allowed.test"] }"#);
    let proxy = proxy_with(&org, &["--require-session"]).await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_denied_response(&resp, &Denial::new(407, "auth_required"), &proxy);
    let record = proxy.single_audit().await;
    assert_eq!(record["reason"], "auth_required", "{record}");
    let session = proxy
        .admin()
        .create_session(&allowlist(&["allowed.test"]), None)
        .await;
    let resp = get_via_proxy(
        proxy.addr,
        &url,
        &[("Proxy-Authorization", &session.proxy_auth())],
    )
    .await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
}

#[tokio::test]
async fn idle_session_expires_and_its_credentials_stop_working() {
    let origin = Origin::start().await;
    let proxy = proxy_with(&org(origin.port()), &[]).await;
    let admin = proxy.admin();
    let session = admin
        .create_session(&allowlist(&["allowed.test"]), Some(1))
        .await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let auth = session.proxy_auth();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let resp = get_via_proxy(proxy.addr, &url, &[("Proxy-Authorization", &auth)]).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    // expires_at moves with traffic (RFC 3339 UTC strings of one width sort as times).
    let path = format!("/v1/sessions/{}", session.id);
    let view = admin.call("GET", &path, None).await.json();
    let (before, after) = (&session.body["expires_at"], &view["expires_at"]);
    assert!(
        after.as_str().unwrap() > before.as_str().unwrap(),
        "{before} -> {after}"
    );
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    assert_eq!(admin.call("GET", &path, None).await.status, 404);
    let resp = get_via_proxy(proxy.addr, &url, &[("Proxy-Authorization", &auth)]).await;
    assert_denied_response(&resp, &Denial::new(407, "auth_required"), &proxy);
    let text = admin.metrics().await;
    assert_eq!(
        metric(&text, "egress_sessions_expired_total"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(metric(&text, "egress_sessions_active"), Some(0.0), "{text}");
}

#[tokio::test]
async fn open_tunnel_is_shown_and_delete_closes_it() {
    let origin = Origin::start().await;
    let proxy = proxy_with(&org(origin.port()), &[]).await;
    let admin = proxy.admin();
    // A silent tunnel does not keep a session alive (idle.rs): the timeout is long here.
    let session = admin
        .create_session(&allowlist(&["allowed.test"]), Some(600))
        .await;
    let target = format!("allowed.test:{}", origin.port());
    let auth = session.proxy_auth();
    let (resp, mut conn) =
        connect_via_proxy(proxy.addr, &target, &[("Proxy-Authorization", &auth)]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    let path = format!("/v1/sessions/{}", session.id);
    let view = admin.call("GET", &path, None).await;
    assert_eq!(view.status, 200, "{view:?}");
    assert_eq!(view.json()["open_tunnels"], 1, "{view:?}");
    let text = admin.metrics().await;
    assert_eq!(metric(&text, "egress_tunnels_active"), Some(1.0), "{text}");

    assert_eq!(admin.call("DELETE", &path, None).await.status, 204);
    assert!(
        conn.closed_by_peer().await,
        "the tunnel stayed open after DELETE"
    );
    // The gauge falls when the tunnel's task has ended, a moment after the client saw
    // the close: wait for it, a bounded while.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let mut text = admin.metrics().await;
    while metric(&text, "egress_tunnels_active") != Some(0.0)
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        text = admin.metrics().await;
    }
    assert_eq!(metric(&text, "egress_tunnels_active"), Some(0.0), "{text}");
    assert_eq!(
        metric(&text, "egress_sessions_deleted_total"),
        Some(1.0),
        "{text}"
    );
}
