//! A decision meets the policy in force (docs/reference/approvals.md, "Deciding"):
//! `allow-once` and `allow-session` are judged when they are made, against the
//! organization policy then in force; after a reload that no longer allows the held
//! destination, the held request gets the organization's refusal, never the approval.

use serde_json::json;

use super::{answer, asking_session, decide, get_in_background, pending, setup, wait_pending};
use crate::support::org::Org;
use crate::support::proxy::{Proxy, AUDIT_TIMEOUT};
use crate::support::sessions::org;

/// How the new organization file is put in force.
#[derive(Clone, Copy)]
enum Reload {
    Sighup,
    Post,
}

async fn reload(proxy: &Proxy, how: Reload, file: &Org) {
    std::fs::write(proxy.org_path(), file.to_toml()).unwrap();
    match how {
        Reload::Post => {
            let resp = proxy.admin().call("POST", "/v1/reload", None).await;
            assert_eq!(resp.status, 200, "{resp:?}");
        }
        Reload::Sighup => {
            proxy.hup();
            assert!(
                proxy.stderr_shows("policy reloaded", AUDIT_TIMEOUT).await,
                "{}",
                proxy.stderr()
            );
        }
    }
}

/// Hold a request for `other.test`, put `file` in force, then `decision`: the answer is
/// 409 with the organization's `reason`, the client gets 403 with it, the origin is not
/// reached, and the records say so. First the probe: the same decision before a reload
/// lets a held request through.
async fn decided_after_reload(how: Reload, file: fn(u16) -> Org, decision: &str, reason: &str) {
    let (origin, proxy) = setup(&[]).await;
    let s = asking_session(&proxy, 30).await;
    let url = format!("http://other.test:{}/", origin.port());
    let probe = get_in_background(&proxy, &format!("{url}probe"), Some(&s));
    let listed = wait_pending(&proxy, 1, 1).await;
    let resp = decide(&proxy, listed[0]["id"].as_str().unwrap(), "allow-once").await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(answer(probe).await.status, 200, "the probe went through");
    assert_eq!(origin.hits(), 1);

    let held = get_in_background(&proxy, &url, Some(&s));
    let listed = wait_pending(&proxy, 1, 1).await;
    let id = listed[0]["id"].as_str().unwrap().to_string();
    reload(&proxy, how, &file(origin.port())).await;
    let resp = decide(&proxy, &id, decision).await;
    assert_eq!(resp.status, 409, "{resp:?}");
    let body = resp.json();
    assert_eq!(body["error"]["type"], "refused_by_policy", "{body}");
    assert_eq!(body["error"]["reason"], reason, "{body}");
    assert_eq!(body["error"]["policy_level"], "org", "{body}");
    assert_eq!(body["decision"], decision, "{body}");
    assert_eq!(body["waiting"], 1, "{body}");

    let refused = answer(held).await;
    assert_eq!(refused.status, 403, "{refused:?}");
    assert_eq!(refused.json()["error"]["reason"], reason, "{refused:?}");
    assert_eq!(origin.hits(), 1, "the origin is not reached");
    assert!(pending(&proxy).await.is_empty(), "decided: nothing left");
    let record = proxy
        .wait_audit(
            |r| r["event"] == "approval.denied" && r["approval_id"] == id.as_str(),
            AUDIT_TIMEOUT,
        )
        .await;
    assert_eq!(record["decision"], decision, "{record}");
    assert_eq!(record["reason"], reason, "{record}");
    assert_eq!(record["policy_level"], "org", "{record}");
    let denied = proxy
        .wait_audit(
            |r| r["event"] == "egress.denied" && r["request_id"] == record["request_id"],
            AUDIT_TIMEOUT,
        )
        .await;
    assert_eq!(denied["reason"], reason, "{denied}");
    assert!(
        !proxy
            .audit_lines()
            .iter()
            .any(|r| r["event"] == "approval.allowed" && r["approval_id"] == id.as_str()),
        "no approval.allowed for it"
    );
    // `allow-session` added nothing to the session's policy.
    let view = proxy
        .admin()
        .call("GET", &format!("/v1/sessions/{}", s.id), None)
        .await
        .json();
    assert_eq!(
        view["network_policy"]["allowed_domains"],
        json!(["allowed.test"]),
        "{view}"
    );
}

/// The organization of [`setup`] without `other.test`.
fn without_host(port: u16) -> Org {
    Org::standard(port)
}

/// The organization of [`setup`] with `other.test` in `denied_domains` too.
fn denying_host(port: u16) -> Org {
    org(port).deny("other.test")
}

#[tokio::test]
async fn allow_once_after_a_reload_that_drops_the_host_gets_the_orgs_refusal() {
    decided_after_reload(
        Reload::Post,
        without_host,
        "allow-once",
        "not_in_org_allowlist",
    )
    .await;
}

#[tokio::test]
async fn allow_once_after_a_reload_that_denies_the_host_gets_denied_domain() {
    decided_after_reload(Reload::Sighup, denying_host, "allow-once", "denied_domain").await;
}

#[tokio::test]
async fn allow_session_after_a_reload_that_drops_the_host_gets_the_orgs_refusal() {
    decided_after_reload(
        Reload::Sighup,
        without_host,
        "allow-session",
        "not_in_org_allowlist",
    )
    .await;
}

#[tokio::test]
async fn allow_session_after_a_reload_that_denies_the_host_gets_denied_domain() {
    decided_after_reload(Reload::Post, denying_host, "allow-session", "denied_domain").await;
}

/// What is judged after the decision is judged by the policies in force when it was
/// made: a reload that keeps the host but drops the CIDR its address needs (loopback,
/// where the origin listens) leaves the approval standing and the address refused.
#[tokio::test]
async fn an_approved_requests_address_is_checked_by_the_policy_in_force_when_decided() {
    let (origin, proxy) = setup(&[]).await;
    let s = asking_session(&proxy, 30).await;
    let url = format!("http://other.test:{}/", origin.port());
    let held = get_in_background(&proxy, &url, Some(&s));
    let listed = wait_pending(&proxy, 1, 1).await;
    let no_loopback = Org::new()
        .allow("allowed.test")
        .allow("other.test")
        .ports(&[80, 443, origin.port()]);
    reload(&proxy, Reload::Post, &no_loopback).await;
    let resp = decide(&proxy, listed[0]["id"].as_str().unwrap(), "allow-once").await;
    assert_eq!(resp.status, 200, "the host is still allowed: {resp:?}");
    let refused = answer(held).await;
    assert_eq!(refused.status, 403, "{refused:?}");
    assert_eq!(refused.json()["error"]["reason"], "private_address");
    assert_eq!(origin.hits(), 0, "the origin is not reached");
}
