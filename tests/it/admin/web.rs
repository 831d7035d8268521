//! The admin API answers its own pages only (docs/reference/control-plane.md, "Calls
//! from web pages"): a foreign `Origin` is 403, a change not sent as JSON is 415, a `Host`
//! that does not name the listener (DNS rebinding) is 421, with and without a token,
//! before anything is done. Each refusal has its control: the same call with the right
//! origin, content type or host does what it asks.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::admin::metric;
use crate::support::client::{get_via_proxy, send_raw, Response};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::sessions::{allowlist, org, proxy_with, ADMIN_TOKEN};

/// A call to `proxy`'s admin API with these exact headers (`Host` among them) and body.
async fn call(
    proxy: &Proxy,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Response {
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    for (name, value) in headers {
        req += &format!("{name}: {value}\r\n");
    }
    req += &format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    send_raw(proxy.admin().addr, req.as_bytes()).await
}

/// The attacker's page: its origin, and a body a page may send without a preflight.
const ATTACKER: &str = "http://attacker.example";

/// How many sessions the API lists (asked the right way).
async fn sessions(proxy: &Proxy) -> usize {
    let resp = proxy.admin().call("GET", "/v1/sessions", None).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    resp.json()["sessions"].as_array().map_or(0, Vec::len)
}

fn refused_as(resp: &Response, status: u16, kind: &str) {
    assert_eq!(resp.status, status, "{resp:?}");
    assert_eq!(resp.json()["error"]["type"], kind, "{resp:?}");
}

#[tokio::test]
async fn a_foreign_page_cannot_create_a_session_or_reload_without_a_token() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::new(org(origin.port()).to_toml())
        .pin("allowed.test")
        .admin_without_token()
        .start()
        .await;
    let host = proxy.admin().addr.to_string();
    let own = format!("http://{host}");
    let body = json!({"network_policy": allowlist(&["allowed.test"])}).to_string();
    // The attack as a browser sends it: text/plain, the attacker's origin.
    let attack = [
        ("Host", host.as_str()),
        ("Origin", ATTACKER),
        ("Content-Type", "text/plain"),
    ];
    refused_as(
        &call(&proxy, "POST", "/v1/sessions", &attack, &body).await,
        403,
        "foreign_origin",
    );
    let json_attack = [
        ("Host", host.as_str()),
        ("Origin", ATTACKER),
        ("Content-Type", "application/json"),
    ];
    refused_as(
        &call(&proxy, "POST", "/v1/sessions", &json_attack, &body).await,
        403,
        "foreign_origin",
    );
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut headers = vec![("Host", host.as_str()), ("Origin", own.as_str())];
        headers.extend(content_type.map(|c| ("Content-Type", c)));
        let resp = call(&proxy, "POST", "/v1/sessions", &headers, &body).await;
        refused_as(&resp, 415, "unsupported_media_type");
    }
    assert_eq!(
        sessions(&proxy).await,
        0,
        "a refused call created a session"
    );
    refused_as(
        &call(&proxy, "POST", "/v1/reload", &attack, "").await,
        403,
        "foreign_origin",
    );
    let metrics = proxy.admin().metrics().await;
    assert_eq!(
        metric(&metrics, "egress_reloads_ok_total"),
        Some(0.0),
        "{metrics}"
    );
    // The controls: the console's own call, JSON with a charset.
    let own_call = [
        ("Host", host.as_str()),
        ("Origin", own.as_str()),
        ("Content-Type", "application/json; charset=utf-8"),
    ];
    let created = call(&proxy, "POST", "/v1/sessions", &own_call, &body).await;
    assert_eq!(created.status, 201, "{created:?}");
    assert_eq!(sessions(&proxy).await, 1);
    assert_eq!(
        call(&proxy, "POST", "/v1/reload", &own_call, "")
            .await
            .status,
        200
    );
    let metrics = proxy.admin().metrics().await;
    assert_eq!(
        metric(&metrics, "egress_reloads_ok_total"),
        Some(1.0),
        "{metrics}"
    );
    // A DELETE is a change too: without a JSON content type it does nothing.
    let path = format!("/v1/sessions/{}", created.json()["id"].as_str().unwrap());
    let bare = [("Host", host.as_str())];
    refused_as(
        &call(&proxy, "DELETE", &path, &bare, "").await,
        415,
        "unsupported_media_type",
    );
    assert_eq!(sessions(&proxy).await, 1);
    let json_only = [
        ("Host", host.as_str()),
        ("Content-Type", "application/json"),
    ];
    assert_eq!(
        call(&proxy, "DELETE", &path, &json_only, "").await.status,
        204
    );
}

/// Poll (bounded) until one approval is pending: its id.
async fn one_pending(proxy: &Proxy) -> String {
    let started = Instant::now();
    loop {
        let resp = proxy.admin().call("GET", "/v1/approvals", None).await;
        let listed: Value = resp.json();
        if let Some(id) = listed["approvals"][0]["id"].as_str() {
            return id.to_string();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "nothing held: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn a_foreign_page_cannot_approve_a_held_request() {
    let origin = Origin::start().await;
    let policy = json!({"type": "allowlist", "allowed_domains": ["allowed.test"]}).to_string();
    let proxy = ProxyBuilder::new(org(origin.port()).to_toml())
        .pin("other.test")
        .admin_without_token()
        .policy(policy)
        .arg("--approval")
        .arg("ask")
        .start()
        .await;
    let (addr, url) = (
        proxy.addr,
        format!("http://other.test:{}/held", origin.port()),
    );
    let held = tokio::spawn(async move { get_via_proxy(addr, &url, &[]).await });
    let id = one_pending(&proxy).await;
    let host = proxy.admin().addr.to_string();
    let decision = json!({"decision": "allow-once"}).to_string();
    let path = format!("/v1/approvals/{id}");
    let attack = [
        ("Host", host.as_str()),
        ("Origin", ATTACKER),
        ("Content-Type", "text/plain"),
    ];
    refused_as(
        &call(&proxy, "POST", &path, &attack, &decision).await,
        403,
        "foreign_origin",
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !held.is_finished(),
        "the refused approval released the request"
    );
    assert_eq!(origin.hits(), 0, "the origin was reached");
    assert_eq!(one_pending(&proxy).await, id, "still pending");
    // The control: the console's call decides it.
    let own = format!("http://{host}");
    let own_call = [
        ("Host", host.as_str()),
        ("Origin", own.as_str()),
        ("Content-Type", "application/json"),
    ];
    assert_eq!(
        call(&proxy, "POST", &path, &own_call, &decision)
            .await
            .status,
        200
    );
    let answer = tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
}

#[tokio::test]
async fn a_rebinding_host_is_421_and_an_admin_host_name_is_served() {
    let proxy = proxy_with(&org(80), &["--admin-host", "admin.test"]).await;
    let port = proxy.admin().addr.port();
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let auth = ("Authorization", bearer.as_str());
    for host in [
        format!("attacker.example:{port}"),
        "attacker.example".into(),
        format!("admin.test:{}", port + 1),
    ] {
        let resp = call(&proxy, "GET", "/v1/sessions", &[("Host", &host), auth], "").await;
        refused_as(&resp, 421, "wrong_host");
        let health = call(&proxy, "GET", "/healthz", &[("Host", &host)], "").await;
        refused_as(&health, 421, "wrong_host");
    }
    let no_host = call(&proxy, "GET", "/v1/sessions", &[auth], "").await;
    refused_as(&no_host, 421, "wrong_host");
    // The controls: the listener's address, and the --admin-host name with and without
    // the port.
    for host in [
        proxy.admin().addr.to_string(),
        format!("admin.test:{port}"),
        "ADMIN.test".into(),
    ] {
        let resp = call(&proxy, "GET", "/v1/sessions", &[("Host", &host), auth], "").await;
        assert_eq!(resp.status, 200, "{host}: {resp:?}");
    }
    // With a token the origin and content type are checked too, before the token is.
    let host = format!("admin.test:{port}");
    let own = format!("http://admin.test:{port}");
    let body = json!({"network_policy": allowlist(&["allowed.test"])}).to_string();
    let foreign = [
        ("Host", host.as_str()),
        ("Origin", ATTACKER),
        ("Content-Type", "application/json"),
        auth,
    ];
    refused_as(
        &call(&proxy, "POST", "/v1/sessions", &foreign, &body).await,
        403,
        "foreign_origin",
    );
    let plain = [
        ("Host", host.as_str()),
        ("Content-Type", "text/plain"),
        auth,
    ];
    refused_as(
        &call(&proxy, "POST", "/v1/sessions", &plain, &body).await,
        415,
        "unsupported_media_type",
    );
    let wrong = [
        ("Host", host.as_str()),
        ("Origin", own.as_str()),
        ("Content-Type", "text/plain"),
    ];
    refused_as(
        &call(&proxy, "POST", "/v1/sessions", &wrong, &body).await,
        415,
        "unsupported_media_type",
    );
    assert_eq!(sessions(&proxy).await, 0);
    let right = [
        ("Host", host.as_str()),
        ("Origin", own.as_str()),
        ("Content-Type", "application/json"),
        auth,
    ];
    assert_eq!(
        call(&proxy, "POST", "/v1/sessions", &right, &body)
            .await
            .status,
        201
    );
    assert_eq!(sessions(&proxy).await, 1);
}
