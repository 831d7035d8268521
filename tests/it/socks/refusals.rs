//! What is refused before any judgement of a destination (docs/reference/socks5.md,
//! "Refused before judging"): names with bytes a host name cannot hold (no lookup is
//! made for them), SOCKS4, bytes that are not SOCKS, and a handshake that stalls.

use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use super::{assert_socks_record, Setup, Socks, To, CONNECT};
use crate::support::IO_TIMEOUT;

#[tokio::test]
async fn a_name_with_a_nul_is_refused_before_any_lookup() {
    let s = Setup::start(&[]).await;
    // The bug others shipped: the part after the NUL passes a suffix check
    // (`*.allowed.test`), and the resolver dials the part before it.
    let name = b"evil.test\0.allowed.test".to_vec();
    let (code, mut socks) = Socks::connect(s.socks, &To::Name(name), s.origin.port()).await;
    assert_eq!(code, 0x02);
    assert!(socks.closed_within(IO_TIMEOUT).await);
    let record = s.proxy.single_audit().await;
    assert_socks_record(&record, "egress.denied", Some("invalid_request"));
    assert_eq!(record["host"], "evil.test\\x00.allowed.test");
    assert_eq!(record["method"], "CONNECT");
    assert!(
        s.dns.queried_names().is_empty(),
        "{:?}",
        s.dns.queried_names()
    );
    assert_eq!(s.origin.connections(), 0);
}

#[tokio::test]
async fn names_with_bytes_outside_letters_digits_hyphen_dot_underscore_are_refused() {
    let s = Setup::start(&[]).await;
    let bad: &[&[u8]] = &[
        b"allowed.test\0",
        b"allowed.test:80",
        b"allowed .test",
        b"allowed.test/x",
        b"\xc3\xa9.allowed.test",
        b"allowed.test\r\n",
        b"",
    ];
    for name in bad {
        let (code, mut socks) =
            Socks::connect(s.socks, &To::Name(name.to_vec()), s.origin.port()).await;
        assert_eq!(code, 0x02, "{name:?}");
        assert!(socks.closed_within(IO_TIMEOUT).await);
    }
    let records = s.proxy.expect_audit_count(bad.len()).await;
    for record in &records {
        assert_socks_record(record, "egress.denied", Some("invalid_request"));
    }
    assert!(
        s.dns.queried_names().is_empty(),
        "{:?}",
        s.dns.queried_names()
    );
    assert_eq!(s.origin.connections(), 0);
}

#[tokio::test]
async fn socks4_and_socks4a_are_closed_and_audited() {
    let s = Setup::start(&[]).await;
    let port = s.origin.port().to_be_bytes();
    let socks4 = [&[4u8, CONNECT][..], &port, &[127, 0, 0, 1], b"user\0"].concat();
    let socks4a = [
        &[4u8, CONNECT][..],
        &port,
        &[0, 0, 0, 1],
        b"\0allowed.test\0",
    ]
    .concat();
    for hello in [socks4, socks4a] {
        let mut socks = Socks::open(s.socks).await;
        socks.send(&hello).await;
        assert!(socks.closed_within(IO_TIMEOUT).await);
    }
    let records = s.proxy.expect_audit_count(2).await;
    for record in &records {
        assert_socks_record(record, "egress.denied", Some("invalid_request"));
    }
    assert_eq!(s.origin.connections(), 0);
    assert!(s.dns.queried_names().is_empty());
}

#[tokio::test]
async fn bytes_that_are_not_socks_are_closed_and_audited() {
    let s = Setup::start(&[]).await;
    let mut socks = Socks::open(s.socks).await;
    let req = format!("CONNECT allowed.test:{} HTTP/1.1\r\n\r\n", s.origin.port());
    socks.send(req.as_bytes()).await;
    assert!(socks.closed_within(IO_TIMEOUT).await);
    let record = s.proxy.single_audit().await;
    assert_socks_record(&record, "egress.denied", Some("invalid_request"));
    assert_eq!(s.origin.connections(), 0);
}

#[tokio::test]
async fn a_stalled_handshake_is_closed_within_the_header_timeout_and_audited() {
    let s = Setup::start(&["--header-timeout", "1"]).await;
    // Stalled after the first byte, after the greeting, and halfway through a request.
    let stalls: [&[u8]; 3] = [&[5], &[5, 1, 0], &[5, 1, 0, 5, CONNECT, 0, 3, 12, b'a']];
    for stall in stalls {
        let mut socks = Socks::open(s.socks).await;
        let started = Instant::now();
        socks.send(stall).await;
        assert!(
            socks.closed_within(Duration::from_secs(4)).await,
            "{stall:?}"
        );
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(900),
            "{stall:?} closed after {waited:?}"
        );
        assert!(
            waited < Duration::from_secs(3),
            "{stall:?} closed after {waited:?}"
        );
    }
    let records = s.proxy.expect_audit_count(3).await;
    for record in &records {
        assert_socks_record(record, "egress.denied", Some("invalid_request"));
    }
    assert!(s.dns.queried_names().is_empty());
}

#[tokio::test]
async fn a_client_over_the_connection_limit_is_closed_unanswered_and_audited_via_socks5() {
    let s = Setup::start(&[
        "--max-connections",
        "1",
        "--connection-wait",
        "0.2",
        "--header-timeout",
        "5",
    ])
    .await;
    // The one slot is held by a client that has not greeted yet.
    let _holder = Socks::open(s.socks).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Nothing sent, so nothing unread makes the close a reset: whatever the proxy wrote
    // (an HTTP 503 before) would be read here.
    let mut over = Socks::open(s.socks).await;
    let mut got = Vec::new();
    let read = tokio::time::timeout(IO_TIMEOUT, over.stream.read_to_end(&mut got)).await;
    assert!(matches!(read, Ok(Ok(_))), "closed in time: {read:?}");
    assert!(got.is_empty(), "no HTTP 503 nor a method reply: {got:?}");
    let record = s.proxy.single_audit().await;
    assert_socks_record(&record, "egress.denied", Some("limit_exceeded"));
    assert!(s.dns.queried_names().is_empty());
}
