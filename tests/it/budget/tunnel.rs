//! Tunnels under an upload budget.

use super::*;

/// A bulk upload through a tunnel, copied (the default) and spliced (`--tunnel-splice`,
/// on Linux): the origin gets exactly the budget's bytes, then an end.
#[tokio::test]
async fn a_bulk_tunnel_upload_stops_at_exactly_the_budget() {
    const BUDGET: usize = 1024 * 1024 + 17;
    for args in [&[][..], &["--tunnel-splice"][..]] {
        let sink = Sink::start().await;
        let proxy = proxy_with(sink.addr.port(), BUDGET as u64, args).await;
        let stream = tunnel(&proxy, &sink, &[]).await;
        let sent = pattern(4 * BUDGET);
        send_until_closed(stream, &sent, sent.len(), Duration::ZERO).await;
        let got = sink.ended(0).await;
        assert_eq!(got.len(), BUDGET, "{args:?}: {}", proxy.diagnostics());
        assert!(got == sent[..BUDGET], "{args:?}: the first bytes, in order");
    }
}

/// Small writes through a tunnel (the relay copies them): the same exact stop.
#[tokio::test]
async fn a_tunnel_of_small_writes_stops_at_exactly_the_budget() {
    const BUDGET: usize = 1000;
    let sink = Sink::start().await;
    let proxy = proxy(sink.addr.port(), BUDGET as u64).await;
    let stream = tunnel(&proxy, &sink, &[]).await;
    let sent = pattern(3000);
    send_until_closed(stream, &sent, 70, Duration::from_millis(2)).await;
    let got = sink.ended(0).await;
    assert_eq!(got, sent[..BUDGET], "{}", proxy.diagnostics());
}

/// The tunnel the budget closed leaves one record, saying so, with the bytes it carried
/// (and no allowed record besides it, even with `--audit-allowed`).
#[tokio::test]
async fn a_tunnel_closed_by_the_budget_has_one_record_saying_why() {
    const BUDGET: usize = 5000;
    let sink = Sink::start().await;
    let proxy = proxy(sink.addr.port(), BUDGET as u64).await;
    let stream = tunnel(&proxy, &sink, &[]).await;
    send_until_closed(stream, &pattern(20_000), 1000, Duration::from_millis(1)).await;
    let records = records_with(&proxy, "upload_budget_exceeded", 1).await;
    let rec = &records[0];
    assert_eq!(rec["event"], "egress.denied", "{rec}");
    assert_eq!(rec["method"], "CONNECT", "{rec}");
    assert_eq!(rec["host"], "sink.test", "{rec}");
    assert_eq!(rec["rule"], "upload_bytes = 5000", "{rec}");
    assert_eq!(rec["policy_level"], "org", "{rec}");
    assert_eq!(rec["bytes_up"], BUDGET, "{rec}");
    assert_eq!(rec["resolved_ip"], "127.0.0.1", "{rec}");
    let all = proxy.audit_lines();
    assert_eq!(all.len(), 1, "one record for the tunnel: {all:#?}");
    assert_eq!(sink.ended(0).await.len(), BUDGET);
}

/// Once the budget is spent, a new tunnel is refused at `CONNECT`: the origin sees no
/// connection.
#[tokio::test]
async fn a_new_tunnel_once_the_budget_is_spent_is_refused_at_connect() {
    const BUDGET: usize = 300;
    let sink = Sink::start().await;
    let proxy = proxy(sink.addr.port(), BUDGET as u64).await;
    let stream = tunnel(&proxy, &sink, &[]).await;
    send_until_closed(stream, &pattern(1000), 100, Duration::from_millis(1)).await;
    assert_eq!(sink.ended(0).await.len(), BUDGET);
    let target = format!("sink.test:{}", sink.addr.port());
    let (resp, _conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    let want = Denial::new(403, "upload_budget_exceeded")
        .at("sink.test", sink.addr.port())
        .level("org");
    let id = assert_denied_response(&resp, &want, &proxy);
    let phrase = "Egress denied: upload_budget_exceeded";
    assert!(resp.status_line.contains(phrase), "{resp:?}");
    let records = records_with(&proxy, "upload_budget_exceeded", 2).await;
    assert_denied_record(&records[1], &want, &id, &proxy);
    assert_eq!(sink.connections(), 1, "no second connection upstream");
}
