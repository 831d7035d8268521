//! Copying an open tunnel's bytes both ways.
//!
//! `tokio::io::copy_bidirectional` holds two buffers for the whole life of a tunnel (8 KiB
//! each by default): small buffers cost throughput (a read and a write system call per
//! 8 KiB), large ones cost memory on every idle tunnel. Here each direction waits for
//! readiness holding no buffer, takes a large one only while bytes flow, and lets it go
//! as soon as a read would block. An idle tunnel then holds sockets and a task, no
//! buffers; a busy one moves [`CHUNK`] bytes a system call.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{copy_bidirectional, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;

use super::idle::{Activity, Watched};

/// The most bytes moved by one read and one write.
pub const CHUNK: usize = 64 * 1024;

/// Copy until both directions have ended (each end's EOF is passed on as a half-close,
/// as `copy_bidirectional` does) or either fails. Bytes read from `client` are added to
/// its counter and bytes read from `upstream` to its own; every move counts as activity.
pub async fn both_ways(
    client: Watched<TokioIo<Upgraded>>,
    upstream: Watched<TcpStream>,
    activity: &Activity,
) -> io::Result<()> {
    let (client, up) = client.into_parts();
    let (mut upstream, down) = upstream.into_parts();
    // The server only ever serves TCP connections, so this always succeeds; the fallback
    // keeps any other transport working, with tokio's copy.
    let parts = match client.into_inner().downcast::<TokioIo<TcpStream>>() {
        Ok(parts) => parts,
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
        up.fetch_add(parts.read_buf.len() as u64, Ordering::Relaxed);
        upstream.write_all(&parts.read_buf).await?;
    }
    tcp_both_ways(parts.io.into_inner(), upstream, &up, &down, activity).await
}

/// [`both_ways`] between two TCP connections.
async fn tcp_both_ways(
    mut client: TcpStream,
    mut upstream: TcpStream,
    up: &AtomicU64,
    down: &AtomicU64,
    activity: &Activity,
) -> io::Result<()> {
    let (client_read, client_write) = client.split();
    let (upstream_read, upstream_write) = upstream.split();
    tokio::try_join!(
        one_way(client_read, upstream_write, up, activity),
        one_way(upstream_read, client_write, down, activity),
    )?;
    Ok(())
}

/// Copy `from` to `to` until `from` ends, then shut `to` down for writing.
async fn one_way(
    from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    count: &AtomicU64,
    activity: &Activity,
) -> io::Result<()> {
    loop {
        from.readable().await?;
        let mut buf = Vec::with_capacity(CHUNK);
        loop {
            buf.clear();
            match from.try_read_buf(&mut buf) {
                Ok(0) => return to.shutdown().await,
                Ok(n) => {
                    count.fetch_add(n as u64, Ordering::Relaxed);
                    activity.touch();
                    to.write_all(&buf).await?;
                    activity.touch();
                }
                // Nothing more for now: wait for readiness again without the buffer.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    /// A connected pair of TCP streams on loopback.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let near = TcpStream::connect(listener.local_addr().unwrap());
        let (near, far) = tokio::join!(near, listener.accept());
        (near.unwrap(), far.unwrap().0)
    }

    #[tokio::test]
    async fn copies_both_ways_counts_and_passes_each_end_on() {
        let (mut client, client_side) = pair().await;
        let (upstream_side, mut origin) = pair().await;
        let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
        let activity = Activity::new();
        let relay = tcp_both_ways(client_side, upstream_side, &up, &down, &activity);
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
        assert_eq!(up.load(Ordering::Relaxed), 3 * CHUNK as u64 + 5);
        assert_eq!(down.load(Ordering::Relaxed), 6);
    }
}
