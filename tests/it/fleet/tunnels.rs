//! Tunnel counts for the fleet (docs/scale-out.md, "Tunnel counts"):
//! `--max-tunnels-per-session` counts a session's tunnels on every replica, and
//! `GET /v1/sessions/{id}` reports them from any replica.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fleet::budget::{refused, write, Fleet};
use crate::support::expect::{assert_denied_response, Denial};

/// `open_tunnels` as replica `i` reports it, once it is `want` (within 8 s: a closed
/// tunnel is counted off at once, a replica's count is refreshed every 5 s).
async fn until_open_tunnels(fleet: &Fleet, i: usize, id: &str, want: u64) {
    let path = format!("/v1/sessions/{id}");
    let started = Instant::now();
    loop {
        let view: Value = fleet.replicas[i]
            .admin()
            .call("GET", &path, None)
            .await
            .json();
        if view["open_tunnels"] == want {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "replica {i} reports open_tunnels {} where {want} are open",
            view["open_tunnels"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn tunnel_limits_and_counts_cover_every_replica() {
    let test = "tunnel_limits_and_counts_cover_every_replica";
    let extra = ["--max-tunnels-per-session", "2"];
    let Some(fleet) = Fleet::start_with(test, 2, &extra).await else {
        return;
    };
    let session = fleet.session(10_000_000).await;
    let on_a = fleet.tunnel(0, &session).await.expect("first tunnel, on A");
    let _on_b = fleet
        .tunnel(1, &session)
        .await
        .expect("second tunnel, on B");
    for i in 0..2 {
        until_open_tunnels(&fleet, i, &session.id, 2).await;
    }
    // The fleet holds two: a third is refused on either replica.
    for i in 0..2 {
        let third = fleet.tunnel(i, &session).await.expect_err("a third tunnel");
        assert_denied_response(
            &third,
            &Denial::new(429, "limit_exceeded"),
            &fleet.replicas[i],
        );
    }
    // One closes on A: one more opens, on B.
    drop(on_a);
    let started = Instant::now();
    let _again = loop {
        match fleet.tunnel(1, &session).await {
            Ok(t) => break t,
            Err(resp) => assert_eq!(resp.status, 429, "{resp:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the closed tunnel is still counted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    until_open_tunnels(&fleet, 0, &session.id, 2).await;
}

#[tokio::test]
async fn a_killed_replicas_tunnels_stop_counting_within_30s() {
    let test = "a_killed_replicas_tunnels_stop_counting_within_30s";
    let extra = ["--max-tunnels-per-session", "1"];
    let Some(fleet) = Fleet::start_with(test, 2, &extra).await else {
        return;
    };
    let session = fleet.session(10_000_000).await;
    let _on_a = fleet.tunnel(0, &session).await.expect("a tunnel on A");
    let refused = fleet
        .tunnel(1, &session)
        .await
        .expect_err("the limit holds on B");
    assert_eq!(refused.status, 429, "{refused:?}");
    fleet.replicas[0].signal("KILL");
    let killed = Instant::now();
    loop {
        if fleet.tunnel(1, &session).await.is_ok() {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(36),
            "the dead replica's tunnel still counts after {:?}",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn what_a_replica_holds_goes_back_when_its_tunnels_close() {
    const BUDGET: u64 = 100_000;
    let test = "what_a_replica_holds_goes_back_when_its_tunnels_close";
    let Some(fleet) = Fleet::start_with(test, 2, &[]).await else {
        return;
    };
    let session = fleet.session(BUDGET).await;
    let mut on_a = fleet.tunnel(0, &session).await.expect("a tunnel on A");
    for _ in 0..10 {
        assert!(write(&mut on_a, &[b'y'; 3_000]).await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(on_a);
    // Within a couple of upkeep ticks of the close, A holds nothing: B spends the rest.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let mut refusals = 0;
    for _ in 0..200 {
        if refusals == 3 {
            break;
        }
        let resp = fleet.post(1, &session, 1_000).await;
        if refused(&resp, &fleet.replicas[1]) {
            refusals += 1;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = fleet.received();
    assert!(got <= BUDGET, "{got} of {BUDGET}");
    assert!(
        got >= BUDGET - 2_000,
        "only {got} of {BUDGET}: A kept what it held"
    );
}
