//! Losing part of the fleet (docs/scale-out.md, "One upload budget"): a replica killed
//! while it holds part of a session's budget, and a store that stops answering
//! mid-spend. The budget is never passed, and what the dead replica held comes back.

use std::time::{Duration, Instant};

use crate::fleet::budget::{refused, settle, write, Fleet};
use crate::support::expect::{assert_denied_response, Denial};

#[tokio::test]
async fn a_replica_killed_holding_a_lease_gives_it_back_within_30s() {
    const BUDGET: u64 = 1_000_000;
    let test = "a_replica_killed_holding_a_lease_gives_it_back_within_30s";
    let Some(fleet) = Fleet::start(test, 3).await else {
        return;
    };
    let session = fleet.session(BUDGET).await;
    // A draws a slice and a reserve (about BUDGET / 16 in all), spends some, and dies.
    let first = fleet.post(0, &session, 10_000).await.expect("an answer");
    assert_eq!(first.status, 200, "{first:?}");
    fleet.replicas[0].signal("KILL");
    let killed = Instant::now();
    // B and C spend until neither can, for up to 40 s.
    let mut last_refused = [false; 2];
    let mut i = 0;
    while killed.elapsed() < Duration::from_secs(40) {
        let r = 1 + i % 2;
        i += 1;
        let resp = fleet.post(r, &session, 5_000).await;
        last_refused[r - 1] = refused(&resp, &fleet.replicas[r]);
        if last_refused == [true, true] {
            if killed.elapsed() > Duration::from_secs(31) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    settle().await;
    let got = fleet.received();
    assert!(
        got <= BUDGET,
        "the origin received {got} of a {BUDGET} budget"
    );
    // A's reserve alone is over 40 000 bytes: spending past this means it came back.
    assert!(
        got >= BUDGET - 30_000,
        "only {got} of {BUDGET} spent after the dead replica's reserve expired"
    );
}

#[tokio::test]
async fn a_stopped_store_lets_replicas_spend_what_they_hold_then_503() {
    const BUDGET: u64 = 1_000_000;
    let test = "a_stopped_store_lets_replicas_spend_what_they_hold_then_503";
    let Some(fleet) = Fleet::start(test, 2).await else {
        return;
    };
    let session = fleet.session(BUDGET).await;
    let mut tunnel = fleet.tunnel(0, &session).await.expect("tunnel through A");
    let chunk = vec![b'y'; 4_000];
    assert!(write(&mut tunnel, &chunk).await);
    settle().await;
    let before = fleet.received();
    fleet.redis.pause();
    // A spends what it holds (one slice, about BUDGET / 64), then the tunnel closes.
    for _ in 0..200 {
        if !write(&mut tunnel, &chunk).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    settle().await;
    let during = fleet.received() - before;
    let resp = fleet.post(1, &session, 100).await.expect("an answer");
    fleet.redis.resume();
    assert_denied_response(
        &resp,
        &Denial::new(503, "session_store_unavailable"),
        &fleet.replicas[1],
    );
    assert!(
        during <= BUDGET / 64 + 8_000,
        "{during} bytes went through while the store was stopped: more than A held"
    );
    // Back: spending goes on.
    let mut ok = false;
    for _ in 0..50 {
        if fleet
            .post(1, &session, 100)
            .await
            .is_some_and(|r| r.status == 200)
        {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(ok, "no request went through after the store came back");
    assert!(fleet.received() <= BUDGET);
}
