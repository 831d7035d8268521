//! What is never held (the organization's refusals, `--policy`'s, a request's own
//! narrowing, a session that does not ask), the bound on pending approvals, requests
//! without a session under `serve --approval ask`, and the API's refusals.

use std::time::Duration;

use serde_json::json;

use super::{answer, asking_session, decide, get_in_background, pending, setup, wait_pending};
use crate::support::client::get_via_proxy;
use crate::support::org::Org;
use crate::support::origin::Origin;
use crate::support::proxy::ProxyBuilder;
use crate::support::sessions::{allowlist, ADMIN_TOKEN};

/// A refusal that is not held comes at once: well within this, while the session would
/// hold for 30 s.
const AT_ONCE: Duration = Duration::from_secs(10);

/// The proxy of [`setup`] with `--policy` allowing `allowed.test` only, and `extra`.
async fn with_policy(extra: &[&str]) -> (Origin, crate::support::proxy::Proxy) {
    let origin = Origin::start().await;
    let org = super::org(origin.port());
    let policy = json!({"type": "allowlist", "allowed_domains": ["allowed.test"]}).to_string();
    let mut builder = ProxyBuilder::new(org.to_toml())
        .pin("allowed.test")
        .pin("other.test")
        .admin(ADMIN_TOKEN)
        .policy(policy);
    for arg in extra {
        builder = builder.arg(arg);
    }
    (origin, builder.start().await)
}

/// `GET url` through the proxy: a 403 that came at once, not after a hold.
async fn refused_at_once(
    proxy: &crate::support::proxy::Proxy,
    url: &str,
    headers: &[(&str, &str)],
) -> crate::support::client::Response {
    let resp = tokio::time::timeout(AT_ONCE, get_via_proxy(proxy.addr, url, headers))
        .await
        .expect("refused at once, not held");
    assert_eq!(resp.status, 403, "{resp:?}");
    resp
}

#[tokio::test]
async fn what_the_organization_refuses_is_never_held() {
    let (origin, proxy) = setup(&[]).await;
    let s = asking_session(&proxy, 30).await;
    let auth = s.proxy_auth();
    let headers = [("Proxy-Authorization", auth.as_str())];
    let url = format!("http://evil.test:{}/", origin.port());
    let resp = refused_at_once(&proxy, &url, &headers).await;
    assert_eq!(resp.json()["error"]["reason"], "not_in_org_allowlist");
    assert!(pending(&proxy).await.is_empty());
    assert_eq!(origin.hits(), 0);
    // A port the organization does not allow, of a host it does.
    refused_at_once(&proxy, "http://other.test:1/", &headers).await;
    assert!(pending(&proxy).await.is_empty());

    // The probe works: the same session's request for a host the org allows is held.
    let held = get_in_background(
        &proxy,
        &format!("http://other.test:{}/", origin.port()),
        Some(&s),
    );
    let listed = wait_pending(&proxy, 1, 1).await;
    decide(&proxy, listed[0]["id"].as_str().unwrap(), "deny").await;
    assert_eq!(answer(held).await.status, 403);
}

#[tokio::test]
async fn a_request_that_narrowed_itself_and_a_session_that_does_not_ask_are_refused_at_once() {
    let (origin, proxy) = setup(&[]).await;
    let url = format!("http://other.test:{}/", origin.port());
    let asking = asking_session(&proxy, 30).await;
    let auth = asking.proxy_auth();
    let narrowed = json!({"type": "allowlist", "allowed_domains": ["allowed.test"]}).to_string();
    let headers = [
        ("Proxy-Authorization", auth.as_str()),
        ("X-Network-Policy", narrowed.as_str()),
    ];
    let resp = refused_at_once(&proxy, &url, &headers).await;
    assert_eq!(resp.json()["error"]["reason"], "not_in_request_policy");

    let plain = proxy
        .admin()
        .create_session(&allowlist(&["allowed.test"]), None)
        .await;
    let view = proxy
        .admin()
        .call("GET", &format!("/v1/sessions/{}", plain.id), None)
        .await;
    assert_eq!(view.json()["on_deny"], "refuse", "{view:?}");
    let auth = plain.proxy_auth();
    refused_at_once(&proxy, &url, &[("Proxy-Authorization", &auth)]).await;
    assert!(pending(&proxy).await.is_empty());
    assert_eq!(origin.hits(), 0);
}

#[tokio::test]
async fn what_the_proxys_policy_refuses_a_session_is_never_held() {
    let (origin, proxy) = with_policy(&[]).await;
    let s = asking_session(&proxy, 30).await;
    let auth = s.proxy_auth();
    let url = format!("http://other.test:{}/", origin.port());
    // --policy is the session's ceiling.
    refused_at_once(&proxy, &url, &[("Proxy-Authorization", &auth)]).await;
    assert!(pending(&proxy).await.is_empty());
    assert_eq!(origin.hits(), 0);
}

#[tokio::test]
async fn pending_approvals_are_bounded_per_session() {
    let origin = Origin::start().await;
    let names: Vec<String> = (0..17).map(|i| format!("h{i}.other.test")).collect();
    let org = Org::standard(origin.port()).allow("*.other.test");
    let mut builder = ProxyBuilder::new(org.to_toml())
        .pin("allowed.test")
        .admin(ADMIN_TOKEN);
    for n in &names {
        builder = builder.pin(n);
    }
    let proxy = builder.start().await;
    let s = asking_session(&proxy, 30).await;
    let held: Vec<_> = names[..16]
        .iter()
        .map(|n| get_in_background(&proxy, &format!("http://{n}:{}/", origin.port()), Some(&s)))
        .collect();
    let listed = wait_pending(&proxy, 16, 16).await;
    // The seventeenth destination: refused at once, not held.
    let auth = s.proxy_auth();
    let url = format!("http://{}:{}/", names[16], origin.port());
    let resp = refused_at_once(&proxy, &url, &[("Proxy-Authorization", &auth)]).await;
    let message = resp.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("too many requests are waiting"),
        "{message}"
    );
    assert_eq!(pending(&proxy).await.len(), 16);
    for a in &listed {
        decide(&proxy, a["id"].as_str().unwrap(), "deny").await;
    }
    for h in held {
        assert_eq!(answer(h).await.status, 403);
    }
    assert_eq!(origin.hits(), 0);
}

#[tokio::test]
async fn without_a_session_approval_ask_holds_and_allow_session_has_nothing_to_widen() {
    let (origin, proxy) = with_policy(&["--approval", "ask"]).await;
    let url = format!("http://other.test:{}/", origin.port());
    let held = get_in_background(&proxy, &url, None);
    let listed = wait_pending(&proxy, 1, 1).await;
    assert!(listed[0]["session"].is_null());
    let id = listed[0]["id"].as_str().unwrap();
    let resp = decide(&proxy, id, "allow-session").await;
    assert_eq!(resp.status, 409, "{resp:?}");
    assert_eq!(resp.json()["error"]["type"], "no_session");
    assert_eq!(decide(&proxy, id, "allow-once").await.status, 200);
    assert_eq!(answer(held).await.status, 200);
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn the_api_refuses_what_it_cannot_read() {
    let (_origin, proxy) = setup(&[]).await;
    let admin = proxy.admin();
    let bad = |body: serde_json::Value| body.to_string();
    for body in [
        bad(json!({"network_policy": allowlist(&["allowed.test"]), "on_deny": "maybe"})),
        bad(
            json!({"network_policy": allowlist(&["allowed.test"]), "on_deny": "ask", "ask_timeout_seconds": 301}),
        ),
        bad(json!({"network_policy": allowlist(&["allowed.test"]), "ask_timeout_seconds": 5})),
    ] {
        let resp = admin.call("POST", "/v1/sessions", Some(&body)).await;
        assert_eq!(resp.status, 400, "{body}: {resp:?}");
    }
    let unknown = decide(&proxy, &"0".repeat(32), "allow-once").await;
    assert_eq!(unknown.status, 404);
    let resp = admin
        .call(
            "POST",
            &format!("/v1/approvals/{}", "0".repeat(32)),
            Some(r#"{"decision":"yes"}"#),
        )
        .await;
    assert_eq!(resp.status, 400, "{resp:?}");
    let resp = admin.call("DELETE", "/v1/approvals", None).await;
    assert_eq!(resp.status, 405);
    let resp = admin.call_as("GET", "/v1/approvals", None, None).await;
    assert_eq!(resp.status, 401);
    assert_eq!(
        crate::support::proxy::run_expect_exit(&["serve", "--approval", "ask"]).0,
        Some(2),
        "--approval ask needs --admin-listen"
    );
}
