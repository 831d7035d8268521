//! `wss://` inside an intercepted tunnel: the echo path relayed and audited open and
//! close, another path refused before the origin, and the upload budget closing the
//! connection with the origin given no more than the budget.

use std::time::Duration;

use super::{client, said, Setup};
use crate::support::proxy::AUDIT_TIMEOUT;
use crate::support::ws_origin::require_websockets;

#[tokio::test]
async fn an_allowed_websocket_is_relayed_and_audited_when_it_opens_and_closes() {
    require_websockets!();
    let s = Setup::start(None).await;
    let out = client(&s, "/echo", 3, 1000).await;
    assert!(said(&out).starts_with("echoed 3"), "{}", said(&out));
    assert_eq!(
        s.origin.closed(1, Duration::from_secs(15)),
        [("/echo".to_string(), 3000)]
    );
    s.assert_echo_records().await;
}

#[tokio::test]
async fn a_websocket_to_a_refused_path_is_403_and_never_reaches_the_origin() {
    require_websockets!();
    let s = Setup::start(None).await;
    let out = client(&s, "/admin", 1, 10).await;
    assert!(
        said(&out).starts_with("refused 403 path_not_allowed"),
        "{}",
        said(&out)
    );
    let denied = s
        .proxy
        .wait_audit(|r| r["event"] == "egress.denied", AUDIT_TIMEOUT)
        .await;
    assert_eq!(denied["reason"], "path_not_allowed");
    // The echo path in the same setup reaches it: the probe works.
    let out = client(&s, "/echo", 1, 10).await;
    assert!(said(&out).starts_with("echoed 1"), "{}", said(&out));
    let closed = s.origin.closed(1, Duration::from_secs(15));
    assert_eq!(
        closed,
        [("/echo".to_string(), 10)],
        "the refused path reached the origin"
    );
}

#[tokio::test]
async fn the_upload_budget_closes_a_websocket_and_the_origin_gets_no_more_than_it() {
    require_websockets!();
    const BUDGET: u64 = 20_000;
    let s = Setup::start(Some(BUDGET)).await;
    let out = client(&s, "/echo", 10, 4000).await;
    let told = said(&out);
    assert!(
        told.starts_with("ended"),
        "the budget did not end it: {told}"
    );
    s.assert_cut_at(BUDGET).await;
}
