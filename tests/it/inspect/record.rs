//! The record of an intercepted `CONNECT` (docs/reference/audit-log.md, "Intercepted
//! tunnels"): its bytes are those of the requests relayed inside it, not the TLS bytes
//! around them, and it says `"intercepted": true`.

use std::time::Duration;

use super::Setup;

#[tokio::test]
async fn an_intercepted_connects_record_gives_the_bytes_of_the_requests_inside() {
    let s = Setup::start(r#"{ host = "secure.test", inspect = true }"#).await;
    let mut inner = s.inner().await;
    let got = inner.request("GET", "/a", &[], b"").await;
    assert_eq!(got.status, 200, "{got:?}");
    let posted = inner.request("POST", "/b", &[], &[b'x'; 1000]).await;
    assert_eq!(posted.status, 200, "{posted:?}");
    // Both requests' records are written once their answers end.
    let inside = |r: &serde_json::Value| {
        r["event"] == "egress.allowed" && (r["method"] == "GET" || r["method"] == "POST")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while s.proxy.audit_lines().iter().filter(|r| inside(r)).count() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            s.proxy.audit_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(inner);
    let tunnel = s
        .proxy
        .wait_audit(
            |r| r["event"] == "egress.allowed" && r["method"] == "CONNECT",
            Duration::from_secs(5),
        )
        .await;
    let requests: Vec<_> = s.proxy.audit_lines().into_iter().filter(inside).collect();
    let sum = |field: &str| -> u64 {
        requests
            .iter()
            .map(|r| r[field].as_u64().expect(field))
            .sum()
    };
    assert_eq!(tunnel["intercepted"], true, "{tunnel}");
    assert_eq!(
        tunnel["bytes_up"].as_u64(),
        Some(sum("bytes_up")),
        "{tunnel}"
    );
    assert_eq!(
        tunnel["bytes_down"].as_u64(),
        Some(sum("bytes_down")),
        "{tunnel}"
    );
    // The POST's body went up; two answers came down.
    assert!(sum("bytes_up") > 1000, "{requests:?}");
    let body = s.bed.origin.body().len() as u64;
    assert!(sum("bytes_down") >= 2 * body, "{requests:?}");
    // The requests' own records say nothing of interception; neither does a tunnel
    // that is not intercepted (the SOCKS5 and CONNECT tests read those).
    assert!(requests.iter().all(|r| r.get("intercepted").is_none()));
}
