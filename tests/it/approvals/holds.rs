//! What a held request shows and what a decision releases (docs/reference/approvals.md,
//! "What is held" and "Deciding"): a request the session's own policy refuses for
//! another port of a host it allows is held too, the list shows every request held
//! on an approval, and a decision releases those and only those.

use serde_json::Value;
use tokio::task::JoinHandle;

use super::{answer, asking_session, decide, get_in_background, pending, setup, wait_pending};
use crate::support::admin::Created;
use crate::support::client::{request_bytes, send_raw, Response};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, AUDIT_TIMEOUT};
use crate::support::sessions::{org, proxy_with};

/// `method url` with `body` through the proxy under `session`, in the background.
fn send_in_background(
    proxy: &Proxy,
    method: &str,
    url: &str,
    session: &Created,
    body: &[u8],
) -> JoinHandle<Response> {
    let auth = session.proxy_auth();
    let bytes = request_bytes(method, url, &[("Proxy-Authorization", &auth)], body);
    let addr = proxy.addr;
    tokio::spawn(async move { send_raw(addr, &bytes).await })
}

/// The `(method, path)` of each request an approval lists.
fn listed_requests(approval: &Value) -> Vec<(String, String)> {
    let requests = approval["requests"].as_array().expect("requests listed");
    requests
        .iter()
        .map(|r| {
            assert!(r["since"].is_string(), "{r}");
            let text = |k: &str| r[k].as_str().unwrap_or("-").to_string();
            (text("method"), text("path"))
        })
        .collect()
}

#[tokio::test]
async fn after_allow_session_another_port_the_organization_allows_is_held_again() {
    let (first, second) = (Origin::start().await, Origin::start().await);
    let (r, q) = (first.port(), second.port());
    let proxy = proxy_with(&org(r).ports(&[80, 443, r, q]), &[]).await;
    let s = asking_session(&proxy, 30).await;
    let held = get_in_background(&proxy, &format!("http://other.test:{r}/"), Some(&s));
    let listed = wait_pending(&proxy, 1, 1).await;
    let id = listed[0]["id"].as_str().unwrap();
    assert_eq!(decide(&proxy, id, "allow-session").await.status, 200);
    assert_eq!(answer(held).await.status, 200);

    // The session's policy now names other.test, on port R only: for port Q (which the
    // organization allows) it says `port_not_allowed`. Held, not refused at once.
    let url = format!("http://other.test:{q}/q");
    let held = get_in_background(&proxy, &url, Some(&s));
    let listed = wait_pending(&proxy, 1, 1).await;
    assert_eq!(listed[0]["entry"], format!("other.test:{q}"));
    assert_eq!(second.hits(), 0, "held, not sent");
    let id = listed[0]["id"].as_str().unwrap();
    assert_eq!(decide(&proxy, id, "allow-once").await.status, 200);
    assert_eq!(answer(held).await.status, 200);
    assert_eq!(second.hits(), 1);

    // Denied, it gets the refusal that level gave.
    let held = get_in_background(&proxy, &url, Some(&s));
    let listed = wait_pending(&proxy, 1, 1).await;
    decide(&proxy, listed[0]["id"].as_str().unwrap(), "deny").await;
    let refused = answer(held).await;
    assert_eq!(refused.status, 403, "{refused:?}");
    assert_eq!(refused.json()["error"]["reason"], "port_not_allowed");
    assert_eq!(second.hits(), 1);
    let record = proxy
        .wait_audit(|r| r["event"] == "approval.denied", AUDIT_TIMEOUT)
        .await;
    assert_eq!(record["reason"], "port_not_allowed");
}

#[tokio::test]
async fn every_held_request_is_listed_and_a_decision_releases_only_those() {
    let (origin, proxy) = setup(&[]).await;
    let s = asking_session(&proxy, 30).await;
    let base = format!("http://other.test:{}", origin.port());
    let mut held = vec![get_in_background(
        &proxy,
        &format!("{base}/innocent"),
        Some(&s),
    )];
    wait_pending(&proxy, 1, 1).await;
    for i in 0..5 {
        let url = format!("{base}/upload/{i}");
        held.push(send_in_background(&proxy, "POST", &url, &s, b"data=secret"));
    }
    let listed = wait_pending(&proxy, 1, 6).await;
    let mut want = vec![("GET".to_string(), "/innocent".to_string())];
    want.extend((0..5).map(|i| ("POST".to_string(), format!("/upload/{i}"))));
    let mut shown = listed_requests(&listed[0]);
    // Listed in the order they came; the POSTs raced each other.
    shown[1..].sort();
    assert_eq!(shown, want, "{listed:?}");
    assert_eq!(origin.hits(), 0);

    let id = listed[0]["id"].as_str().unwrap().to_string();
    let resp = decide(&proxy, &id, "allow-once").await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(resp.json()["waiting"], 6, "{resp:?}");
    assert_eq!(resp.json()["requests"].as_array().unwrap().len(), 6);
    // A seventh, after the decision: held on a new approval, not released by it.
    let late = send_in_background(&proxy, "POST", &format!("{base}/late"), &s, b"x=1");
    for h in held {
        assert_eq!(answer(h).await.status, 200);
    }
    let listed = wait_pending(&proxy, 1, 1).await;
    assert_ne!(listed[0]["id"], id.as_str());
    assert_eq!(
        listed_requests(&listed[0]),
        [("POST".to_string(), "/late".to_string())]
    );
    assert_eq!(origin.hits(), 6, "the six listed, not the seventh");
    assert!(origin.requests().iter().all(|r| r.target != "/late"));
    decide(&proxy, listed[0]["id"].as_str().unwrap(), "deny").await;
    assert_eq!(answer(late).await.status, 403);
    assert_eq!(origin.hits(), 6);
    assert!(pending(&proxy).await.is_empty());
}
