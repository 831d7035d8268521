//! Copying an open tunnel's bytes both ways.
//!
//! `tokio::io::copy_bidirectional` holds two buffers for the whole life of a tunnel (8 KiB
//! each by default): small buffers cost throughput (a read and a write system call per
//! 8 KiB), large ones cost memory on every idle tunnel. Here each direction waits for
//! readiness holding nothing, and only for a burst of bytes takes what it needs to move
//! them: on Linux a pipe, to `splice(2)` them from socket to socket without copying them
//! through user space; elsewhere, or when no pipe can be had (out of descriptors), a
//! [`CHUNK`] buffer. Either is let go as soon as the source would block, so an idle
//! tunnel holds sockets and a task, no buffers and no pipes.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{copy_bidirectional, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;

use super::budget::{self, Allowance};
use super::idle::{Activity, Watched};
#[cfg(target_os = "linux")]
use super::splice;

/// The most bytes moved by one read and one write.
pub const CHUNK: usize = 64 * 1024;

/// Copy until both directions have ended (each end's EOF is passed on as a half-close,
/// as `copy_bidirectional` does) or either fails. Bytes read from `client` are added to
/// its counter and bytes read from `upstream` to its own; every move counts as activity.
///
/// Bytes from `client` are drawn from `allowance` before they are sent: once it is
/// spent, exactly the bytes that fit have gone upstream, upstream's side is shut down,
/// and the relay ends with [`budget::Spent`].
pub async fn both_ways(
    client: Watched<TokioIo<Upgraded>>,
    upstream: Watched<TcpStream>,
    activity: &Activity,
    allowance: &Allowance,
) -> io::Result<()> {
    let (client, up) = client.into_parts();
    let (mut upstream, down) = upstream.into_parts();
    // The server only ever serves TCP connections, so this always succeeds; the fallback
    // keeps any other transport working, with tokio's copy.
    let parts = match client.into_inner().downcast::<TokioIo<TcpStream>>() {
        Ok(parts) => parts,
        Err(_) if allowance.budget().is_some() => {
            // tokio's copy cannot stop at a byte count: fail closed.
            return Err(budget::spent());
        }
        Err(upgraded) => {
            let mut client = activity.watch_counting(TokioIo::new(upgraded), up);
            let mut upstream = activity.watch_counting(upstream, down);
            return copy_bidirectional(&mut client, &mut upstream)
                .await
                .map(drop);
        }
    };
    // Bytes hyper read past the CONNECT head and the first-bytes judgement did not take.
    if !parts.read_buf.is_empty() {
        let granted = allowance.grant(parts.read_buf.len());
        up.fetch_add(granted as u64, Ordering::Relaxed);
        upstream.write_all(&parts.read_buf[..granted]).await?;
        if granted < parts.read_buf.len() {
            upstream.shutdown().await?;
            return Err(budget::spent());
        }
    }
    let zero_copy = cfg!(target_os = "linux");
    let counts = Counts {
        up: &up,
        down: &down,
        allowance,
    };
    tcp_relay(parts.io.into_inner(), upstream, counts, activity, zero_copy).await
}

/// [`both_ways`] for a client that is a plain TCP connection (a redirected one).
pub async fn tcp_both_ways(
    client: Watched<TcpStream>,
    upstream: Watched<TcpStream>,
    activity: &Activity,
    allowance: &Allowance,
) -> io::Result<()> {
    let (client, up) = client.into_parts();
    let (upstream, down) = upstream.into_parts();
    let zero_copy = cfg!(target_os = "linux");
    let counts = Counts {
        up: &up,
        down: &down,
        allowance,
    };
    tcp_relay(client, upstream, counts, activity, zero_copy).await
}

/// What a relay counts into: the bytes each way, and the allowance bytes sent upstream
/// are drawn from.
#[derive(Clone, Copy)]
pub(crate) struct Counts<'a> {
    pub up: &'a AtomicU64,
    pub down: &'a AtomicU64,
    pub allowance: &'a Allowance,
}

/// [`both_ways`] between two TCP connections, splicing bulk bytes if `zero_copy` (on
/// Linux; tests turn it off to check the copy).
async fn tcp_relay(
    mut client: TcpStream,
    mut upstream: TcpStream,
    counts: Counts<'_>,
    activity: &Activity,
    zero_copy: bool,
) -> io::Result<()> {
    let (client_read, client_write) = client.split();
    let (upstream_read, upstream_write) = upstream.split();
    let up = Way {
        count: counts.up,
        allowance: Some(counts.allowance),
    };
    let down = Way {
        count: counts.down,
        allowance: None,
    };
    tokio::try_join!(
        one_way(client_read, upstream_write, up, activity, zero_copy),
        one_way(upstream_read, client_write, down, activity, zero_copy),
    )?;
    Ok(())
}

/// One direction's counter, and (upstream-bound only) the allowance it draws from.
#[derive(Clone, Copy)]
pub(crate) struct Way<'a> {
    pub count: &'a AtomicU64,
    pub allowance: Option<&'a Allowance>,
}

impl Way<'_> {
    /// Count `n` bytes read, granting them from the allowance if there is one: returns
    /// how many may be sent on.
    pub fn moved(&self, n: usize) -> usize {
        let granted = self.allowance.map_or(n, |a| a.grant(n));
        self.count.fetch_add(granted as u64, Ordering::Relaxed);
        granted
    }
}

/// How a burst of bytes ended.
#[derive(Debug, PartialEq, Eq)]
enum Burst {
    /// The source ended (EOF).
    Ended,
    /// The source has nothing more for now.
    WouldBlock,
    /// A read filled the whole buffer: a bulk transfer, worth a pipe.
    Bulk,
    /// The allowance is spent: what fitted was sent, the rest was not.
    Spent,
}

/// Copy `from` to `to` until `from` ends, then shut `to` down for writing.
///
/// Every burst starts with copies through a buffer, so a small message costs a read and
/// a write. Only once a read fills the whole buffer (a bulk transfer) does the rest of
/// the burst go through a pipe, when splicing is on and a full-size pipe can be had.
async fn one_way(
    from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    way: Way<'_>,
    activity: &Activity,
    zero_copy: bool,
) -> io::Result<()> {
    // Whether bulk bytes are read in batches (see `splice`), kept from burst to burst.
    #[cfg(target_os = "linux")]
    let mut pace = splice::Pace::new();
    loop {
        from.readable().await?;
        let mut burst = copy_burst(&from, &mut to, way, activity, zero_copy).await?;
        if burst == Burst::Bulk {
            burst = match pipe(zero_copy) {
                #[cfg(target_os = "linux")]
                Some(pipe) => match pipe
                    .burst(from.as_ref(), to.as_ref(), way, activity, &mut pace)
                    .await
                {
                    Ok(true) => Burst::Ended,
                    Ok(false) => Burst::WouldBlock,
                    Err(e) if budget::is_spent(&e) => Burst::Spent,
                    Err(e) => return Err(e),
                },
                _ => copy_burst(&from, &mut to, way, activity, false).await?,
            };
        }
        match burst {
            Burst::Ended => return to.shutdown().await,
            // Upstream gets the bytes that fit and an end, and the tunnel closes.
            Burst::Spent => {
                to.shutdown().await?;
                return Err(budget::spent());
            }
            Burst::WouldBlock | Burst::Bulk => {}
        }
    }
}

/// A pipe for one burst, if splicing is on and one can be had.
#[cfg(target_os = "linux")]
fn pipe(zero_copy: bool) -> Option<splice::Pipe> {
    zero_copy.then(splice::Pipe::new)?.ok()
}

/// No splicing here: every burst is copied.
#[cfg(not(target_os = "linux"))]
fn pipe(_zero_copy: bool) -> Option<std::convert::Infallible> {
    None
}

/// Copy through a [`CHUNK`] buffer until `from` would block (the buffer is then let go)
/// or ends, or, if `stop_on_bulk`, until a read fills the whole buffer.
async fn copy_burst(
    from: &ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    way: Way<'_>,
    activity: &Activity,
    stop_on_bulk: bool,
) -> io::Result<Burst> {
    let mut buf = Vec::with_capacity(CHUNK);
    loop {
        buf.clear();
        match from.try_read_buf(&mut buf) {
            Ok(0) => return Ok(Burst::Ended),
            Ok(n) => {
                let granted = way.moved(n);
                activity.touch();
                to.write_all(&buf[..granted]).await?;
                activity.touch();
                if granted < n {
                    return Ok(Burst::Spent);
                }
                if stop_on_bulk && n == CHUNK {
                    return Ok(Burst::Bulk);
                }
            }
            // Nothing more for now: wait for readiness again without the buffer.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Burst::WouldBlock),
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;
    use tokio::time::timeout;

    /// A connected pair of TCP streams on loopback (also used by `splice`'s tests).
    pub(in crate::proxy) async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let near = TcpStream::connect(listener.local_addr().unwrap());
        let (near, far) = tokio::join!(near, listener.accept());
        (near.unwrap(), far.unwrap().0)
    }

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
}
