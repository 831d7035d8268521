//! A session's own canaries (docs/reference/dlp.md, "A session's canaries"): minted by
//! `POST /v1/sessions`, shown once in its `201`, looked for in that session's requests
//! only, and never shown again.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::admin::Created;
use crate::support::client::get_via_proxy;
use crate::support::origin::Origin;
use crate::support::proxy::Proxy;
use crate::support::sessions;

/// A session allowing `allowed.test` with `canaries` (and `extra` fields); the answer.
pub(super) async fn session_with(proxy: &Proxy, canaries: Value, extra: Value) -> (u16, Value) {
    let mut body = json!({
        "network_policy": sessions::allowlist(&["allowed.test"]),
        "canaries": canaries,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let resp = proxy
        .admin()
        .call("POST", "/v1/sessions", Some(&body.to_string()))
        .await;
    (resp.status, resp.json())
}

pub(super) fn created(body: &Value) -> Created {
    Created {
        id: body["id"].as_str().unwrap().to_string(),
        token: body["token"].as_str().unwrap().to_string(),
        body: body.clone(),
    }
}

#[tokio::test]
async fn a_sessions_canary_ends_that_session_and_no_other_and_is_shown_once() {
    let origin = Origin::start().await;
    let proxy = sessions::proxy_with(&sessions::org(origin.port()), &[]).await;
    let (status, body) = session_with(
        &proxy,
        json!([{"kind": "github_token"}, {"value": "my-own-chosen-canary-01"}]),
        json!({}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let canaries = body["canaries"].as_array().unwrap();
    assert_eq!(canaries.len(), 2, "{body}");
    assert_eq!(canaries[0]["id"], "c1");
    assert_eq!(canaries[0]["kind"], "github_token");
    let value = canaries[0]["value"].as_str().unwrap().to_string();
    assert!(value.starts_with("ghp_") && value.len() == 40, "{value}");
    assert_eq!(canaries[1]["kind"], "custom");
    assert_eq!(canaries[1]["value"], "my-own-chosen-canary-01");
    let tripping = created(&body);
    let other = proxy
        .admin()
        .create_session(&sessions::allowlist(&["allowed.test"]), None)
        .await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let auth = tripping.proxy_auth();
    let other_auth = other.proxy_auth();
    // The negative control: another session's request carrying the value goes through,
    // in the URL and in a header: the canary is this session's only.
    let through = get_via_proxy(
        proxy.addr,
        &format!("{url}?t={value}"),
        &[("proxy-authorization", &other_auth), ("x-token", &value)],
    )
    .await;
    assert_eq!(through.status, 200, "{}", through.text());
    assert_eq!(origin.hits(), 1);
    // GET shows ids and kinds, never values.
    let admin = proxy.admin();
    let listed = admin.call("GET", "/v1/sessions", None).await.text();
    let one = admin
        .call("GET", &format!("/v1/sessions/{}", tripping.id), None)
        .await;
    assert_eq!(one.json()["canaries"][0]["id"], "c1", "{}", one.text());
    assert_eq!(one.json()["canaries"][0]["kind"], "github_token");
    for shown in [&listed, &one.text()] {
        assert!(!shown.contains(&value), "{shown}");
        assert!(!shown.contains("my-own-chosen-canary-01"), "{shown}");
    }
    // The probe: the session works; then its canary in a header is refused.
    let ok = get_via_proxy(proxy.addr, &url, &[("proxy-authorization", &auth)]).await;
    assert_eq!(ok.status, 200);
    let tripped = get_via_proxy(
        proxy.addr,
        &url,
        &[("proxy-authorization", &auth), ("x-token", &value)],
    )
    .await;
    assert_eq!(tripped.status, 403, "{}", tripped.text());
    assert_eq!(tripped.json()["error"]["reason"], "exfiltration_detected");
    assert_eq!(origin.hits(), 2, "the canary reached the origin");
    let after = get_via_proxy(proxy.addr, &url, &[("proxy-authorization", &auth)]).await;
    assert_eq!(after.status, 407, "the session ended: {}", after.text());
    let gone = admin
        .call("GET", &format!("/v1/sessions/{}", tripping.id), None)
        .await;
    assert_eq!(gone.status, 404);
    let ended = proxy
        .wait_audit(|r| r["event"] == "session.ended", Duration::from_secs(5))
        .await;
    assert_eq!(ended["cause"], "canary");
    assert_eq!(ended["dlp"]["id"], "c1");
    let denied = proxy
        .wait_audit(
            |r| r["reason"] == "exfiltration_detected",
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(denied["dlp"]["kind"], "github_token", "{denied}");
    assert_eq!(denied["dlp"]["found_in"], "header", "{denied}");
    assert_eq!(denied["policy_level"], "dlp");
    // The other session lives on.
    let still = get_via_proxy(proxy.addr, &url, &[("proxy-authorization", &other_auth)]).await;
    assert_eq!(still.status, 200);
    let values = [value.as_str(), "my-own-chosen-canary-01"];
    super::shown::assert_never_shown(&proxy, &values, &[tripped.text()]).await;
}

#[tokio::test]
async fn a_sessions_canary_in_the_url_encoded_is_refused() {
    let origin = Origin::start().await;
    let proxy = sessions::proxy_with(&sessions::org(origin.port()), &[]).await;
    let (status, body) = session_with(
        &proxy,
        json!([{"kind": "aws_access_key_id"}]),
        json!({"on_canary": "end-session"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let value = body["canaries"][0]["value"].as_str().unwrap().to_string();
    let auth = created(&body).proxy_auth();
    let hex = data_encoding::HEXUPPER.encode(value.as_bytes());
    let url = format!("http://allowed.test:{}/x/{hex}", origin.port());
    let answer = get_via_proxy(proxy.addr, &url, &[("proxy-authorization", &auth)]).await;
    assert_eq!(answer.status, 403, "{}", answer.text());
    assert_eq!(origin.hits(), 0);
    let record = proxy
        .wait_audit(
            |r| r["reason"] == "exfiltration_detected",
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(record["dlp"]["found_in"], "url");
    assert_eq!(record["dlp"]["encoding"], "hex");
    assert!(!proxy.audit_text().contains(&hex));
}

#[tokio::test]
async fn bad_canaries_and_a_relaxing_on_canary_are_refused() {
    let origin = Origin::start().await;
    let proxy = sessions::proxy_with(&sessions::org(origin.port()), &[]).await;
    let seventeen: Vec<Value> = (0..17).map(|_| json!({"kind": "generic"})).collect();
    let cases = [
        (json!([{"kind": "ssh_key"}]), json!({}), 400),
        (json!([{"value": "short"}]), json!({}), 400),
        (json!([{"kind": "generic", "value": "x"}]), json!({}), 400),
        (Value::from(seventeen), json!({}), 400),
        (json!([]), json!({"on_canary": "sometimes"}), 400),
        // The organization's on_trip is end-session (the default).
        (json!([]), json!({"on_canary": "refuse"}), 422),
    ];
    for (canaries, extra, want) in cases {
        let (status, body) = session_with(&proxy, canaries.clone(), extra).await;
        assert_eq!(status, want, "{canaries}: {body}");
        assert!(
            !body.to_string().contains("short"),
            "a value echoed: {body}"
        );
    }
}
