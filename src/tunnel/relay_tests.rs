//! The relay on loopback: every byte both ways, half-closes, resets, and the upload
//! budget, through the copy and through splice.

use super::*;
use crate::tunnel::test_pair::pair;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::time::timeout;

/// What a relay under test counts into: its byte counters and its activity.
struct Meter {
    up: AtomicU64,
    down: AtomicU64,
    activity: Activity,
    allowance: Allowance,
}

impl Default for Meter {
    fn default() -> Meter {
        Meter::with(Allowance::unlimited())
    }
}

impl Meter {
    fn with(allowance: Allowance) -> Meter {
        Meter {
            up: AtomicU64::default(),
            down: AtomicU64::default(),
            activity: Activity::default(),
            allowance,
        }
    }
}

/// A client and an origin on loopback, and the relay between them (not yet polled),
/// counting into `meter`.
async fn relayed(
    meter: &Meter,
    zero_copy: bool,
) -> (
    TcpStream,
    TcpStream,
    impl std::future::Future<Output = io::Result<()>> + '_,
) {
    let (client, client_side) = pair().await;
    let (upstream_side, origin) = pair().await;
    let counts = Counts {
        up: &meter.up,
        down: &meter.down,
        allowance: &meter.allowance,
    };
    let relay = tcp_relay(
        client_side,
        upstream_side,
        counts,
        &meter.activity,
        zero_copy,
    );
    (client, origin, relay)
}

/// `len` bytes that differ from any shift of themselves by less than 251.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

async fn copies_both_ways_counts_and_passes_each_end_on(zero_copy: bool) {
    let meter = Meter::default();
    let (mut client, mut origin, relay) = relayed(&meter, zero_copy).await;
    let ends = async {
        // More than a chunk up, so the loop goes round; then the client's EOF.
        let big = vec![7u8; 3 * CHUNK + 5];
        client.write_all(&big).await.unwrap();
        client.shutdown().await.unwrap();
        let mut got = Vec::new();
        origin.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, big, "every byte up, then EOF");
        // The other direction still works after the half-close.
        origin.write_all(b"answer").await.unwrap();
        origin.shutdown().await.unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"answer");
    };
    let (relayed, ()) = tokio::join!(relay, ends);
    relayed.unwrap();
    assert_eq!(meter.up.load(Ordering::Relaxed), 3 * CHUNK as u64 + 5);
    assert_eq!(meter.down.load(Ordering::Relaxed), 6);
}

#[tokio::test]
async fn spliced_copies_both_ways_counts_and_passes_each_end_on() {
    copies_both_ways_counts_and_passes_each_end_on(true).await;
}

#[tokio::test]
async fn copied_copies_both_ways_counts_and_passes_each_end_on() {
    copies_both_ways_counts_and_passes_each_end_on(false).await;
}

/// Several MiB each way at once, every byte checked.
async fn large_transfer_both_ways_at_once(zero_copy: bool) {
    const LEN: usize = 8 * 1024 * 1024 + 13;
    let meter = Meter::default();
    let (client, origin, relay) = relayed(&meter, zero_copy).await;
    // Each end sends its pattern and reads the other's, both at once.
    let end = |mut stream: TcpStream, seed: u8| async move {
        let (mut read, mut write) = stream.split();
        let send = async {
            write.write_all(&pattern(LEN, seed)).await.unwrap();
            write.shutdown().await.unwrap();
        };
        let mut got = Vec::with_capacity(LEN);
        let (_, read) = tokio::join!(send, read.read_to_end(&mut got));
        read.unwrap();
        got
    };
    let ends = async { tokio::join!(end(client, 1), end(origin, 2)) };
    let (relayed, (at_client, at_origin)) =
        timeout(Duration::from_secs(60), async { tokio::join!(relay, ends) })
            .await
            .expect("the relay finishes");
    relayed.unwrap();
    assert!(at_origin == pattern(LEN, 1), "every byte up, in order");
    assert!(at_client == pattern(LEN, 2), "every byte down, in order");
    assert_eq!(meter.up.load(Ordering::Relaxed), LEN as u64);
    assert_eq!(meter.down.load(Ordering::Relaxed), LEN as u64);
}

#[tokio::test]
async fn spliced_large_transfer_both_ways_at_once() {
    large_transfer_both_ways_at_once(true).await;
}

#[tokio::test]
async fn copied_large_transfer_both_ways_at_once() {
    large_transfer_both_ways_at_once(false).await;
}

/// A bulk download, then a few bytes on their own with the connection left open: the
/// relay's batched reading (on Linux) must not hold them back waiting for more.
async fn a_tail_after_a_bulk_download_is_passed_on(zero_copy: bool) {
    const BULK: usize = 4 * 1024 * 1024;
    let meter = Meter::default();
    let (mut client, mut origin, relay) = relayed(&meter, zero_copy).await;
    let ends = async {
        let (bulk, mut got) = (pattern(BULK, 4), vec![0u8; BULK]);
        let (sent, read) = tokio::join!(origin.write_all(&bulk), client.read_exact(&mut got));
        sent.unwrap();
        read.unwrap();
        assert!(got == bulk);
        for tail in [&b"tail one"[..], b"tail two"] {
            origin.write_all(tail).await.unwrap();
            let mut got = vec![0u8; tail.len()];
            timeout(Duration::from_secs(5), client.read_exact(&mut got))
                .await
                .expect("the tail is passed on without more bytes behind it")
                .unwrap();
            assert_eq!(got, tail);
        }
        drop((client, origin));
    };
    let (relayed, ()) = timeout(Duration::from_secs(60), async { tokio::join!(relay, ends) })
        .await
        .expect("the relay ends");
    drop(relayed);
    assert_eq!(meter.down.load(Ordering::Relaxed), BULK as u64 + 16);
}

#[tokio::test]
async fn spliced_a_tail_after_a_bulk_download_is_passed_on() {
    a_tail_after_a_bulk_download_is_passed_on(true).await;
}

#[tokio::test]
async fn copied_a_tail_after_a_bulk_download_is_passed_on() {
    a_tail_after_a_bulk_download_is_passed_on(false).await;
}

/// The origin resets its connection while the client is still sending: the relay
/// ends with an error, and does not hang.
async fn peer_reset_mid_transfer_ends_with_an_error(zero_copy: bool) {
    let meter = Meter::default();
    let (mut client, mut origin, relay) = relayed(&meter, zero_copy).await;
    let sending = tokio::spawn(async move {
        let chunk = pattern(CHUNK, 3);
        // Fails once the relay gives up and closes its end.
        while client.write_all(&chunk).await.is_ok() {}
    });
    let reset = async {
        let mut got = vec![0u8; 1024 * 1024];
        origin.read_exact(&mut got).await.unwrap();
        origin.set_zero_linger().unwrap();
        drop(origin);
    };
    let (relayed, ()) = timeout(Duration::from_secs(30), async {
        tokio::join!(relay, reset)
    })
    .await
    .expect("the relay ends");
    assert!(relayed.is_err(), "a reset is an error: {relayed:?}");
    assert!(meter.up.load(Ordering::Relaxed) >= 1024 * 1024);
    timeout(Duration::from_secs(30), sending)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn spliced_peer_reset_mid_transfer_ends_with_an_error() {
    peer_reset_mid_transfer_ends_with_an_error(true).await;
}

#[tokio::test]
async fn copied_peer_reset_mid_transfer_ends_with_an_error() {
    peer_reset_mid_transfer_ends_with_an_error(false).await;
}

/// A budget smaller than the upload: the origin gets exactly the bytes that fit
/// (through the pipe once the transfer is bulk, when splicing), then an end; the
/// relay ends with `Spent`, and downloads before that were unaffected.
async fn stops_exactly_at_the_budget(zero_copy: bool, budget: usize) {
    let allowance = Allowance::of(Some(crate::policy::Budget {
        bytes: budget as u64,
        level: crate::policy::Level::Org,
    }));
    let meter = Meter::with(allowance);
    let (mut client, mut origin, relay) = relayed(&meter, zero_copy).await;
    let ends = async {
        origin.write_all(b"hello").await.unwrap();
        let mut hello = [0u8; 5];
        client.read_exact(&mut hello).await.unwrap();
        // Far more than fits, so several bulk bursts would follow.
        let sending = async {
            let _ = client.write_all(&pattern(budget + 4 * CHUNK, 9)).await;
        };
        let mut got = Vec::new();
        let (_, read) = tokio::join!(sending, origin.read_to_end(&mut got));
        read.unwrap();
        got
    };
    let (relayed, got) = timeout(Duration::from_secs(30), async { tokio::join!(relay, ends) })
        .await
        .expect("the relay ends at the budget");
    let err = relayed.unwrap_err();
    assert!(budget::is_spent(&err), "{err}");
    assert_eq!(got.len(), budget, "exactly the bytes that fit");
    assert!(got == pattern(budget, 9)[..], "and those bytes, in order");
    assert_eq!(meter.up.load(Ordering::Relaxed), budget as u64);
    assert_eq!(meter.down.load(Ordering::Relaxed), 5);
}

#[tokio::test]
async fn spliced_stops_exactly_at_the_budget() {
    stops_exactly_at_the_budget(true, 3 * CHUNK + 17).await;
}

#[tokio::test]
async fn copied_stops_exactly_at_the_budget() {
    stops_exactly_at_the_budget(false, 3 * CHUNK + 17).await;
}

#[tokio::test]
async fn a_small_budget_stops_within_the_first_read() {
    stops_exactly_at_the_budget(true, 100).await;
    stops_exactly_at_the_budget(false, 0).await;
}
