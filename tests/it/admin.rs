//! The control plane (docs/reference/control-plane.md): the admin API's
//! calls and their 4xx answers, sessions on the proxy path, idle expiry, DELETE closing
//! a tunnel, metrics and health. The calls are here; [`proxy_path`] holds the sessions
//! on the proxy path.

mod proxy_path;
mod web;

use serde_json::json;

use crate::support::admin::metric;
use crate::support::client::get_via_proxy;
use crate::support::origin::Origin;
use crate::support::sessions::{allowlist, org, proxy_with, ADMIN_TOKEN};

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
