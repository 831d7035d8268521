//! The control plane (docs/reference/control-plane.md): the admin API's
//! calls and their 4xx answers, sessions on the proxy path, idle expiry, DELETE closing
//! a tunnel, metrics and health.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::admin::{basic, metric};
use crate::support::client::{connect_via_proxy, get_via_proxy};
use crate::support::expect::{assert_denied_response, Denial};
use crate::support::org::Org;
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder, AUDIT_TIMEOUT};

pub const ADMIN_TOKEN: &str = "it-admin-token-0123456789abcdef";

/// An org allowing `allowed.test` and `other.test` (and the origin's port), with the
/// closed default: only sessions open the network.
pub fn org(port: u16) -> Org {
    Org::standard(port).allow("other.test")
}

pub async fn proxy_with(org: &Org, extra: &[&str]) -> Proxy {
    let mut builder = ProxyBuilder::new(org.to_toml())
        .pin("allowed.test")
        .pin("other.test")
        .pin("evil.test")
        .admin(ADMIN_TOKEN);
    for arg in extra {
        builder = builder.arg(arg);
    }
    builder.start().await
}

pub fn allowlist(names: &[&str]) -> Value {
    json!({"type": "allowlist", "allowed_domains": names})
}

#[tokio::test]
async fn healthz_needs_no_token_and_everything_else_does() {
    let proxy = proxy_with(&org(80), &[]).await;
    let admin = proxy.admin();
    let health = admin.call_as("GET", "/healthz", None, None).await;
    assert_eq!(health.status, 200, "{health:?}");
    for (method, path) in [
        ("GET", "/metrics"),
        ("GET", "/v1/sessions"),
        ("POST", "/v1/sessions"),
        ("GET", "/v1/sessions/x"),
        ("DELETE", "/v1/sessions/x"),
        ("POST", "/v1/reload"),
    ] {
        for auth in [None, Some("Bearer wrong"), Some(ADMIN_TOKEN)] {
            let resp = admin.call_as(method, path, Some("{}"), auth).await;
            assert_eq!(resp.status, 401, "{method} {path} with {auth:?}: {resp:?}");
        }
    }
    assert_eq!(proxy.admin().call("GET", "/nope", None).await.status, 404);
}

#[tokio::test]
async fn session_lifecycle_create_get_list_delete() {
    let proxy = proxy_with(&org(80), &[]).await;
    let admin = proxy.admin();
    let created = admin
        .create_session(&allowlist(&["allowed.test"]), Some(600))
        .await;
    assert!(created.token.len() >= 32, "{:?}", created.body);
    assert!(
        created.body["expires_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z') && t.contains('T')),
        "{:?}",
        created.body
    );
    let path = format!("/v1/sessions/{}", created.id);
    let got = admin.call("GET", &path, None).await;
    assert_eq!(got.status, 200, "{got:?}");
    let view = got.json();
    assert_eq!(view["id"], created.id.as_str());
    assert_eq!(view["idle_timeout_seconds"], 600);
    assert_eq!(view["network_policy"], allowlist(&["allowed.test"]));
    assert!(!got.text().contains(&created.token), "GET shows the token");
    let listed = admin.call("GET", "/v1/sessions", None).await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.json()["sessions"][0]["id"], created.id.as_str());
    assert!(
        !listed.text().contains(&created.token),
        "list shows the token"
    );

    assert_eq!(admin.call("DELETE", &path, None).await.status, 204);
    assert_eq!(admin.call("GET", &path, None).await.status, 404);
    assert_eq!(admin.call("DELETE", &path, None).await.status, 404);
}

#[tokio::test]
async fn session_calls_refuse_bad_bodies() {
    let proxy = proxy_with(&org(80), &[]).await;
    let admin = proxy.admin();
    let good = allowlist(&["allowed.test"]);
    let cases: Vec<(String, u16)> = vec![
        ("not json".into(), 400),
        ("{}".into(), 400),
        (
            json!({"network_policy": good, "idle_timeout_seconds": 0}).to_string(),
            400,
        ),
        (
            json!({"network_policy": good, "idle_timeout_seconds": 86_401}).to_string(),
            400,
        ),
        (
            json!({"network_policy": good, "idle_timeout_seconds": "5"}).to_string(),
            400,
        ),
        (
            json!({"network_policy": good, "surprise": 1}).to_string(),
            400,
        ),
        (
            json!({"network_policy": {"type": "allowlist", "allowed_domains": []}}).to_string(),
            400,
        ),
        (
            json!({"network_policy": {"type": "allowlist", "allowed_domains": ["*.com"]}})
                .to_string(),
            400,
        ),
        (
            json!({"network_policy": good, "idle_timeout_seconds": 86_400}).to_string(),
            201,
        ),
    ];
    for (body, want) in cases {
        let resp = admin.call("POST", "/v1/sessions", Some(&body)).await;
        assert_eq!(resp.status, want, "{body}: {resp:?}");
        if want == 400 {
            assert!(resp.json()["error"]["type"].is_string(), "{resp:?}");
        }
    }
}

#[tokio::test]
async fn widening_session_policy_is_422_naming_every_offending_entry() {
    let proxy = proxy_with(&org(80), &[]).await;
    let body = json!({"network_policy": allowlist(&["allowed.test", "evil.test", "*.other.test"])});
    let resp = proxy
        .admin()
        .call("POST", "/v1/sessions", Some(&body.to_string()))
        .await;
    assert_eq!(resp.status, 422, "{resp:?}");
    let error = &resp.json()["error"];
    assert_eq!(error["type"], "policy_widening", "{error}");
    let offending: Vec<String> = error["offending"]
        .as_array()
        .expect("offending list")
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(offending.len(), 2, "{offending:?}");
    assert!(offending[0].starts_with("evil.test"), "{offending:?}");
    assert!(offending[1].starts_with("*.other.test"), "{offending:?}");
    let listed = proxy.admin().call("GET", "/v1/sessions", None).await.json();
    assert_eq!(listed["sessions"], json!([]));
}

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
    let text = admin.metrics().await;
    assert_eq!(metric(&text, "egress_tunnels_active"), Some(0.0), "{text}");
    assert_eq!(
        metric(&text, "egress_sessions_deleted_total"),
        Some(1.0),
        "{text}"
    );
}

#[tokio::test]
async fn metrics_count_denials_and_audit_lines() {
    let origin = Origin::start().await;
    let proxy = proxy_with(&org(origin.port()), &[]).await;
    let url = format!("http://evil.test:{}/", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(resp.status, 403);
    proxy.single_audit().await;
    let text = proxy.admin().metrics().await;
    let denied = r#"egress_requests_total{decision="denied",reason="not_in_org_allowlist"}"#;
    assert_eq!(metric(&text, denied), Some(1.0), "{text}");
    assert_eq!(
        metric(&text, "egress_audit_lines_total"),
        Some(1.0),
        "{text}"
    );
    for name in [
        "egress_connections_total",
        "egress_bytes_up_total",
        "egress_bytes_down_total",
        "egress_dns_lookups_total",
        "egress_dns_failures_total",
        "egress_sessions_created_total",
        "egress_sessions_revoked_total",
        "egress_reloads_ok_total",
        "egress_reloads_failed_total",
        "egress_upstream_first_byte_seconds_bucket",
    ] {
        assert!(text.contains(name), "missing {name}:\n{text}");
    }
}

/// Neither the audit log nor the proxy's own log holds a token.
pub fn assert_no_secrets(proxy: &Proxy, tokens: &[&str]) {
    let audit = proxy.audit_text();
    let stderr = proxy.stderr();
    for secret in tokens.iter().copied().chain([ADMIN_TOKEN]) {
        assert!(
            !audit.contains(secret),
            "audit log leaks {secret}:\n{audit}"
        );
        assert!(
            !stderr.contains(secret),
            "proxy log leaks {secret}:\n{stderr}"
        );
    }
}

/// Wait (bounded) until the proxy answers `url` with `status`.
pub async fn wait_for_status(proxy: &Proxy, url: &str, headers: &[(&str, &str)], status: u16) {
    let started = std::time::Instant::now();
    loop {
        let resp = get_via_proxy(proxy.addr, url, headers).await;
        if resp.status == status {
            return;
        }
        if started.elapsed() > AUDIT_TIMEOUT {
            panic!(
                "{url} never answered {status}; last {resp:?}\n{}",
                proxy.diagnostics()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
