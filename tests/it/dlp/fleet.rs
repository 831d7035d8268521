//! A session's canaries across replicas (docs/scale-out.md, "What Redis holds"): made on
//! A, looked for on B, and a trip on B ends the session on A. With the memory store A and
//! B are one proxy, and the test must pass for it too.

use std::time::Duration;

use serde_json::json;

use crate::fleet::{get_as, Fleet, Kind};
use crate::support::admin::Created;
use crate::support::client::get_via_proxy;
use crate::support::sessions::allowlist;

async fn a_canary_made_on_a_trips_on_b_and_ends_the_session_on_a(kind: Kind, test: &str) {
    let Some(fleet) = Fleet::start(kind, test, &[]).await else {
        return;
    };
    let body = json!({
        "network_policy": allowlist(&["allowed.test"]),
        "canaries": [{"kind": "aws_secret_access_key"}],
    });
    let made = fleet
        .a
        .admin()
        .call("POST", "/v1/sessions", Some(&body.to_string()))
        .await;
    assert_eq!(made.status, 201, "{made:?}");
    let made = made.json();
    let value = made["canaries"][0]["value"].as_str().unwrap().to_string();
    let session = Created {
        id: made["id"].as_str().unwrap().to_string(),
        token: made["token"].as_str().unwrap().to_string(),
        body: made.clone(),
    };
    // The probe: the session works on B.
    assert_eq!(get_as(fleet.b(), &fleet.url(), &session).await.status, 200);
    let auth = session.proxy_auth();
    let headers = [("proxy-authorization", auth.as_str()), ("x-key", &value)];
    let tripped = get_via_proxy(fleet.b().addr, &fleet.url(), &headers).await;
    assert_eq!(tripped.status, 403, "{}", fleet.b().diagnostics());
    assert_eq!(tripped.json()["error"]["reason"], "exfiltration_detected");
    // Ended everywhere: A refuses its credentials within the fleet's revocation time.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut status = 0;
    while std::time::Instant::now() < deadline {
        status = get_as(&fleet.a, &fleet.url(), &session).await.status;
        if status == 407 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 407, "the session lives on A");
    // A may serve the session until it hears of the end (docs/scale-out.md), so count
    // what carried the canary, not every request.
    let carried = fleet
        .origin
        .requests()
        .iter()
        .filter(|r| r.header("x-key").is_some())
        .count();
    assert_eq!(carried, 0, "the canary reached the origin");
    let view = fleet.a.admin().call("GET", "/v1/sessions", None).await;
    assert!(!view.text().contains(&value));
    for proxy in [&fleet.a, fleet.b()] {
        assert!(!proxy.audit_text().contains(&value) && !proxy.stderr().contains(&value));
    }
}

#[tokio::test]
async fn memory() {
    a_canary_made_on_a_trips_on_b_and_ends_the_session_on_a(Kind::Memory, "dlp::fleet::memory")
        .await
}

#[tokio::test]
async fn redis() {
    a_canary_made_on_a_trips_on_b_and_ends_the_session_on_a(Kind::Redis, "dlp::fleet::redis").await
}
