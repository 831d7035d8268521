//! Approvals on the wire (docs/reference/approvals.md): a request the session's policy
//! refuses and the organization allows is held under `"on_deny": "ask"`, listed by
//! `GET /v1/approvals`, and goes on, or is refused, by `POST /v1/approvals/{id}` or the
//! timeout; the real origin shows whether it went through. Nothing the organization (or
//! `--policy`) refuses is ever held, requests for one destination share one approval, and
//! the pending approvals are bounded.
//!
//! - `limits`: what is never held, and the bound.
//! - `cli`: `egress-proxy approve`, as a reviewer without a browser runs it.
//! - `fleet`: `allow-session` in force on another replica.
//! - `holds`: another port held again, every held request listed, what a decision releases.
//! - `reload`: a decision judged against the policy in force when it is made.

mod cli;
mod fleet;
mod holds;
mod limits;
mod reload;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::support::admin::Created;
use crate::support::client::{get_via_proxy, Response};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, AUDIT_TIMEOUT};
use crate::support::sessions::{allowlist, org, proxy_with};

/// How long a held request may take to show in the list.
const LISTED_WITHIN: Duration = Duration::from_secs(10);

/// A session that asks, allowed `allowed.test` only, waiting `timeout` seconds.
pub(crate) async fn asking_session(proxy: &Proxy, timeout: u64) -> Created {
    let body = json!({"network_policy": allowlist(&["allowed.test"]),
        "on_deny": "ask", "ask_timeout_seconds": timeout});
    let resp = proxy
        .admin()
        .call("POST", "/v1/sessions", Some(&body.to_string()))
        .await;
    assert_eq!(resp.status, 201, "{resp:?}");
    let v = resp.json();
    Created {
        id: v["id"].as_str().unwrap().to_string(),
        token: v["token"].as_str().unwrap().to_string(),
        body: v,
    }
}

/// `GET url` through the proxy under `session`, in the background.
pub(crate) fn get_in_background(
    proxy: &Proxy,
    url: &str,
    session: Option<&Created>,
) -> JoinHandle<Response> {
    let (addr, url) = (proxy.addr, url.to_string());
    let auth = session.map(Created::proxy_auth);
    tokio::spawn(async move {
        let headers: Vec<(&str, &str)> = auth
            .iter()
            .map(|a| ("Proxy-Authorization", a.as_str()))
            .collect();
        get_via_proxy(addr, &url, &headers).await
    })
}

/// The pending approvals.
pub(crate) async fn pending(proxy: &Proxy) -> Vec<Value> {
    let resp = proxy.admin().call("GET", "/v1/approvals", None).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    resp.json()["approvals"].as_array().unwrap().clone()
}

/// Wait (bounded) until `n` approvals are pending with `waiting` requests in all.
pub(crate) async fn wait_pending(proxy: &Proxy, n: usize, waiting: u64) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let all = pending(proxy).await;
        let total: u64 = all.iter().map(|a| a["waiting"].as_u64().unwrap()).sum();
        if all.len() == n && total == waiting {
            return all;
        }
        assert!(
            started.elapsed() < LISTED_WITHIN,
            "wanted {n} approvals with {waiting} waiting, have {all:?}\n{}",
            proxy.diagnostics()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// `POST /v1/approvals/{id}` with `decision`: the answer.
pub(crate) async fn decide(proxy: &Proxy, id: &str, decision: &str) -> Response {
    let body = json!({ "decision": decision }).to_string();
    let path = format!("/v1/approvals/{id}");
    proxy.admin().call("POST", &path, Some(&body)).await
}

/// The held request's answer, bounded.
pub(crate) async fn answer(held: JoinHandle<Response>) -> Response {
    tokio::time::timeout(LISTED_WITHIN, held)
        .await
        .expect("the held request is answered once decided")
        .unwrap()
}

/// The proxy and origin of most tests: the org allows `allowed.test` and `other.test`.
pub(crate) async fn setup(extra: &[&str]) -> (Origin, Proxy) {
    let origin = Origin::start().await;
    let proxy = proxy_with(&org(origin.port()), extra).await;
    (origin, proxy)
}

#[tokio::test]
async fn a_held_request_is_listed_and_allow_once_lets_only_it_through() {
    let (origin, proxy) = setup(&[]).await;
    let s = asking_session(&proxy, 30).await;
    let view = proxy
        .admin()
        .call("GET", &format!("/v1/sessions/{}", s.id), None)
        .await;
    assert_eq!(view.json()["on_deny"], "ask", "{view:?}");
    assert_eq!(view.json()["ask_timeout_seconds"], 30, "{view:?}");
    let url = format!("http://other.test:{}/x?y=1", origin.port());
    let held = get_in_background(&proxy, &url, Some(&s));
    let listed = wait_pending(&proxy, 1, 1).await;
    let a = &listed[0];
    assert_eq!(a["session"], s.id.as_str());
    assert_eq!(a["host"], "other.test");
    assert_eq!(a["port"], origin.port());
    assert_eq!(a["method"], "GET");
    assert_eq!(a["path"], "/x?y=1");
    assert_eq!(a["entry"], format!("other.test:{}", origin.port()));
    assert!(a["since"].is_string() && a["expires_at"].is_string(), "{a}");
    assert_eq!(
        origin.hits(),
        0,
        "a held request has not reached the origin"
    );

    let id = a["id"].as_str().unwrap().to_string();
    let resp = decide(&proxy, &id, "allow-once").await;
    assert_eq!(resp.status, 200, "{resp:?}");
    let done = answer(held).await;
    assert_eq!(done.status, 200, "{done:?}");
    assert_eq!(origin.hits(), 1);
    let record = proxy
        .wait_audit(|r| r["event"] == "approval.allowed", AUDIT_TIMEOUT)
        .await;
    assert_eq!(record["approval_id"], id.as_str());
    assert_eq!(record["decision"], "allow-once");
    assert_eq!(record["session"], s.id.as_str());
    assert!(record["request_id"].as_str().is_some_and(|r| r.len() == 32));
    assert!(
        pending(&proxy).await.is_empty(),
        "a decided approval is gone"
    );
    assert_eq!(
        decide(&proxy, &id, "deny").await.status,
        404,
        "decided once"
    );

    // Once: the next request is held again, and this time refused.
    let again = get_in_background(&proxy, &url, Some(&s));
    let listed = wait_pending(&proxy, 1, 1).await;
    let id2 = listed[0]["id"].as_str().unwrap().to_string();
    assert_ne!(id2, id);
    assert_eq!(decide(&proxy, &id2, "deny").await.status, 200);
    let refused = answer(again).await;
    assert_eq!(refused.status, 403, "{refused:?}");
    assert_eq!(refused.json()["error"]["reason"], "not_in_request_policy");
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("a reviewer refused it"), "{message}");
    assert_eq!(
        origin.hits(),
        1,
        "a denied request never reached the origin"
    );
    let record = proxy
        .wait_audit(|r| r["event"] == "approval.denied", AUDIT_TIMEOUT)
        .await;
    assert_eq!(record["approval_id"], id2.as_str());
    assert_eq!(record["reason"], "not_in_request_policy");
    proxy
        .wait_audit(
            |r| r["event"] == "egress.denied" && r["host"] == "other.test",
            AUDIT_TIMEOUT,
        )
        .await;
}

#[tokio::test]
async fn allow_session_adds_the_exact_destination_to_the_sessions_policy() {
    let (origin, proxy) = setup(&[]).await;
    let s = asking_session(&proxy, 30).await;
    let url = format!("http://other.test:{}/", origin.port());
    let held = get_in_background(&proxy, &url, Some(&s));
    let listed = wait_pending(&proxy, 1, 1).await;
    let id = listed[0]["id"].as_str().unwrap();
    assert_eq!(decide(&proxy, id, "allow-session").await.status, 200);
    assert_eq!(answer(held).await.status, 200);

    let view = proxy
        .admin()
        .call("GET", &format!("/v1/sessions/{}", s.id), None)
        .await
        .json();
    let entry = format!("other.test:{}", origin.port());
    assert_eq!(
        view["network_policy"]["allowed_domains"],
        json!(["allowed.test", entry]),
        "{view}"
    );
    // From now on it is the session's policy: no approval, straight through.
    let auth = s.proxy_auth();
    let next = get_via_proxy(proxy.addr, &url, &[("Proxy-Authorization", &auth)]).await;
    assert_eq!(next.status, 200, "{next:?}");
    assert_eq!(origin.hits(), 2);
    // Only that host and port: another port of the same host is held again (holds.rs).
    assert!(pending(&proxy).await.is_empty());
    let record = proxy
        .wait_audit(|r| r["decision"] == "allow-session", AUDIT_TIMEOUT)
        .await;
    assert_eq!(record["event"], "approval.allowed");
}

#[tokio::test]
async fn an_undecided_approval_expires_with_the_usual_refusal() {
    let (origin, proxy) = setup(&[]).await;
    let s = asking_session(&proxy, 1).await;
    let url = format!("http://other.test:{}/", origin.port());
    let held = get_in_background(&proxy, &url, Some(&s));
    let listed = wait_pending(&proxy, 1, 1).await;
    let resp = answer(held).await;
    assert_eq!(resp.status, 403, "{resp:?}");
    assert_eq!(resp.json()["error"]["reason"], "not_in_request_policy");
    let message = resp.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("no reviewer decided in time"), "{message}");
    assert_eq!(origin.hits(), 0);
    let record = proxy
        .wait_audit(|r| r["event"] == "approval.expired", AUDIT_TIMEOUT)
        .await;
    assert_eq!(record["approval_id"], listed[0]["id"]);
    assert!(pending(&proxy).await.is_empty());
    let id = listed[0]["id"].as_str().unwrap();
    assert_eq!(decide(&proxy, id, "allow-once").await.status, 404);
}

#[tokio::test]
async fn concurrent_requests_for_one_destination_wait_on_one_approval() {
    let (origin, proxy) = setup(&[]).await;
    let s = asking_session(&proxy, 30).await;
    let held: Vec<_> = (0..3)
        .map(|i| {
            let url = format!("http://other.test:{}/{i}", origin.port());
            get_in_background(&proxy, &url, Some(&s))
        })
        .collect();
    let listed = wait_pending(&proxy, 1, 3).await;
    assert_eq!(origin.hits(), 0);
    let resp = decide(&proxy, listed[0]["id"].as_str().unwrap(), "allow-once").await;
    assert_eq!(resp.json()["waiting"], 3, "{resp:?}");
    for h in held {
        assert_eq!(answer(h).await.status, 200);
    }
    assert_eq!(origin.hits(), 3);
    // One record per held request (written as each goes on: wait for the writer).
    let started = Instant::now();
    let allowed = loop {
        let lines = proxy.audit_lines();
        let allowed = lines
            .iter()
            .filter(|r| r["event"] == "approval.allowed")
            .count();
        if allowed >= 3 || started.elapsed() > AUDIT_TIMEOUT {
            break allowed;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(allowed, 3, "one record per held request");
}

#[tokio::test]
async fn a_held_tunnel_opens_once_allowed() {
    let (origin, proxy) = setup(&[]).await;
    let s = asking_session(&proxy, 30).await;
    let target = format!("other.test:{}", origin.port());
    let auth = s.proxy_auth();
    let addr = proxy.addr;
    let held = tokio::spawn(async move {
        let headers = [("Proxy-Authorization", auth.as_str())];
        let (resp, mut conn) =
            crate::support::client::connect_via_proxy(addr, &target, &headers).await;
        if resp.status != 200 {
            return resp.status;
        }
        let req = format!("GET / HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
        conn.send(req.as_bytes()).await;
        let inner = conn.read_response().await;
        inner.status
    });
    let listed = wait_pending(&proxy, 1, 1).await;
    assert_eq!(listed[0]["method"], "CONNECT");
    assert!(listed[0]["path"].is_null());
    decide(&proxy, listed[0]["id"].as_str().unwrap(), "allow-once").await;
    let status = tokio::time::timeout(LISTED_WITHIN, held)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        origin.hits(),
        1,
        "the request inside the approved tunnel arrived"
    );
}

#[tokio::test]
async fn a_client_that_gives_up_withdraws_its_approval() {
    let (origin, proxy) = setup(&[]).await;
    let s = asking_session(&proxy, 30).await;
    let url = format!("http://other.test:{}/", origin.port());
    let held = get_in_background(&proxy, &url, Some(&s));
    wait_pending(&proxy, 1, 1).await;
    held.abort();
    let _ = held.await;
    // The client's connection is gone: nobody waits, so nothing is left to approve.
    wait_pending(&proxy, 0, 0).await;
}
