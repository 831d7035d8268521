//! A budget narrower than the session's, on a fleet (docs/scale-out.md, "One upload
//! budget"): a request whose own `X-Network-Policy` sets a smaller `max_upload_bytes`
//! is held to it, although the replica holds plenty of the session's wider budget.
//! Counted on the origin's side.

use crate::fleet::budget::Fleet;
use crate::support::client::{request_bytes, Conn, Response};

/// A `POST` of `len` bytes through replica 0 under `session`, with `extra` headers.
async fn post(
    fleet: &Fleet,
    session: &crate::support::admin::Created,
    len: usize,
    extra: &[(&str, &str)],
) -> Option<Response> {
    let url = format!("http://allowed.test:{}/", fleet.origin.port());
    let auth = session.proxy_auth();
    let mut headers = vec![("Proxy-Authorization", auth.as_str())];
    headers.extend_from_slice(extra);
    let req = request_bytes("POST", &url, &headers, &vec![b'x'; len]);
    let mut conn = Conn::open(fleet.replicas[0].addr).await;
    conn.send_lossy(&req).await;
    conn.next_response().await
}

#[tokio::test]
async fn a_narrower_request_budget_is_kept_across_the_fleet() {
    let Some(fleet) = Fleet::start("a_narrower_request_budget_is_kept_across_the_fleet", 2).await
    else {
        return;
    };
    let session = fleet.session(1_000_000).await;
    // The replica draws a slice of the session's million bytes for this one.
    let first = post(&fleet, &session, 2_000, &[]).await.expect("an answer");
    assert_eq!(first.status, 200, "{first:?}");
    let before = fleet.received();
    assert!(before >= 2_000);

    // The same 2,000 bytes under a budget of 3,000 of which about 2,200 are spent.
    let narrow =
        r#"{"type": "allowlist", "allowed_domains": ["allowed.test"], "max_upload_bytes": 3000}"#;
    let resp = post(&fleet, &session, 2_000, &[("X-Network-Policy", narrow)]).await;
    if let Some(resp) = &resp {
        assert_eq!(
            resp.status,
            403,
            "{resp:?}\n{}",
            fleet.replicas[0].diagnostics()
        );
        assert_eq!(resp.json()["error"]["reason"], "upload_budget_exceeded");
    }
    crate::fleet::budget::settle().await;
    assert_eq!(
        fleet.received(),
        before,
        "nothing of the refused request reached the origin"
    );

    // The probe: the same request under the session's own budget goes through.
    let wide = post(&fleet, &session, 2_000, &[]).await.expect("an answer");
    assert_eq!(wide.status, 200, "{wide:?}");
    assert!(fleet.received() >= before + 2_000);
}
