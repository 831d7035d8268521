//! `allow-session` across replicas (docs/reference/approvals.md, "Across replicas"): the
//! entry a reviewer added on replica A is in force on replica B, which held a copy of the
//! session from before, once B next asks whether the session lives (within a second).
//! Run for both stores, as the fleet suite is.

use std::time::Duration;

use serde_json::json;

use super::{answer, decide, get_in_background, wait_pending};
use crate::fleet::{get_as, Fleet, Kind};
use crate::support::admin::Created;

/// Longer than the time a replica trusts its copy of a session.
const STALE: Duration = Duration::from_millis(1500);

async fn allow_session_reaches_the_other_replica(kind: Kind, test: &str) {
    let Some(fleet) = Fleet::start(kind, test, &[]).await else {
        return;
    };
    let body = json!({"network_policy": {"type": "allowlist", "allowed_domains": ["allowed.test"]},
        "on_deny": "ask", "ask_timeout_seconds": 2, "label": "it"});
    let resp = fleet
        .a
        .admin()
        .call("POST", "/v1/sessions", Some(&body.to_string()))
        .await;
    assert_eq!(resp.status, 201, "{resp:?}");
    let v = resp.json();
    let s = Created {
        id: v["id"].as_str().unwrap().into(),
        token: v["token"].as_str().unwrap().into(),
        body: v,
    };
    // B holds its copy of the session, with the policy as created.
    assert_eq!(get_as(fleet.b(), &fleet.url(), &s).await.status, 200);

    let other = format!("http://other.test:{}/", fleet.origin.port());
    let held = get_in_background(&fleet.a, &other, Some(&s));
    let listed = wait_pending(&fleet.a, 1, 1).await;
    let id = listed[0]["id"].as_str().unwrap();
    assert_eq!(decide(&fleet.a, id, "allow-session").await.status, 200);
    assert_eq!(answer(held).await.status, 200);

    tokio::time::sleep(STALE).await;
    let resp = get_as(fleet.b(), &other, &s).await;
    assert_eq!(
        resp.status,
        200,
        "B judges by the widened policy: {resp:?}\n{}",
        fleet.b().diagnostics()
    );
    assert_eq!(fleet.origin.hits(), 3);
    let view = fleet
        .b()
        .admin()
        .call("GET", &format!("/v1/sessions/{}", s.id), None)
        .await
        .json();
    let entry = format!("other.test:{}", fleet.origin.port());
    assert_eq!(
        view["network_policy"]["allowed_domains"],
        json!(["allowed.test", entry])
    );
}

mod allow_session_reaches_the_other_replica {
    #[tokio::test]
    async fn memory() {
        super::allow_session_reaches_the_other_replica(
            super::Kind::Memory,
            "approvals_fleet::memory",
        )
        .await
    }
    #[tokio::test]
    async fn redis() {
        super::allow_session_reaches_the_other_replica(super::Kind::Redis, "approvals_fleet::redis")
            .await
    }
}
