//! The `message` of every 403 body on the wire (docs/reference/answers.md, "The
//! message"): it names the destination as `host:port`, the level that refused it and who
//! can change that, through a real proxy with a real origin that is never reached.

use serde_json::json;

use crate::support::client::{get_via_proxy, request_bytes, send_raw, Response};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};

/// The organization allows `allowed.test` and `other.test` on the origin's port, with a
/// budget of 100 bytes; `--policy` allows both, and the admin API makes sessions.
async fn proxy(origin: &Origin) -> Proxy {
    let org = Org::standard(origin.port()).allow("other.test").to_toml()
        + "\n[limits]\nupload_bytes = 100\n";
    ProxyBuilder::new(org)
        .policy(allowlist_json(&["allowed.test", "other.test"]))
        .pin("allowed.test")
        .pin("other.test")
        .admin("message-token")
        .start()
        .await
}

/// The body's `error.message` of a 403 with `reason`, its other fields kept.
fn message(resp: &Response, reason: &str, host: &str, port: u16) -> String {
    assert_eq!(resp.status, 403, "{resp:?}");
    let error = &resp.json()["error"];
    assert_eq!(error["type"], "egress_denied", "{resp:?}");
    assert_eq!(error["reason"], reason, "{resp:?}");
    assert_eq!(error["host"], host, "{resp:?}");
    assert_eq!(error["port"], port, "{resp:?}");
    assert!(error["request_id"].is_string(), "{resp:?}");
    let text = error["message"].as_str().expect("a message").to_string();
    assert!(text.contains(&format!("`{host}:{port}`")), "{text}");
    assert!(text.contains("closed too"), "{text}");
    assert!(text.contains("logged"), "{text}");
    text
}

#[tokio::test]
async fn an_org_refusal_says_the_organization_refused_it() {
    let origin = Origin::start().await;
    let proxy = proxy(&origin).await;
    let url = format!("http://evil.test:{}/", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    let text = message(&resp, "not_in_org_allowlist", "evil.test", origin.port());
    assert!(
        text.contains("organization policy does not allow"),
        "{text}"
    );
    assert!(text.contains("organization's administrator"), "{text}");
    assert_eq!(origin.hits(), 0);
}

#[tokio::test]
async fn a_session_refusal_names_the_session_and_the_entry_to_add() {
    let origin = Origin::start().await;
    let proxy = proxy(&origin).await;
    let policy = json!({"type": "allowlist", "allowed_domains": ["allowed.test"]});
    let session = proxy.admin().create_session(&policy, None).await;
    let url = format!("http://other.test:{}/", origin.port());
    let auth = session.proxy_auth();
    let resp = get_via_proxy(proxy.addr, &url, &[("Proxy-Authorization", &auth)]).await;
    let text = message(&resp, "not_in_request_policy", "other.test", origin.port());
    let add = format!(
        "add `other.test:{}` to this session's policy (session `{}`)",
        origin.port(),
        session.id
    );
    assert!(text.contains(&add), "{text}");
    assert!(!text.contains("administrator"), "{text}");
    assert_eq!(origin.hits(), 0);
}

#[tokio::test]
async fn a_budget_refusal_says_the_budget_is_spent_and_why() {
    let origin = Origin::start().await;
    let proxy = proxy(&origin).await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let bytes = request_bytes("POST", &url, &[], &[b'x'; 500]);
    let resp = send_raw(proxy.addr, &bytes).await;
    let text = message(
        &resp,
        "upload_budget_exceeded",
        "allowed.test",
        origin.port(),
    );
    assert!(text.contains("upload budget"), "{text}");
    assert!(text.contains("500 bytes"), "the detail is kept: {text}");
    assert!(text.contains("organization"), "{text}");
    assert_eq!(origin.hits(), 0);
}
