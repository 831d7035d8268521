//! Copying an open tunnel's bytes both ways.
//!
//! `tokio::io::copy_bidirectional` holds two buffers for the whole life of a tunnel (8 KiB
//! each by default): small buffers cost throughput (a read and a write system call per
//! 8 KiB), large ones cost memory on every idle tunnel. Here each direction waits for
//! readiness holding nothing, and only for a burst of bytes takes what it needs to move
//! them: a [`CHUNK`] buffer, or with `--tunnel-splice` on Linux a pipe, to `splice(2)`
//! bulk bytes from socket to socket without copying them through user space (half the
//! CPU per GiB, but a reader on the same host pays more for spliced data: see
//! docs/ARCHITECTURE.md, "Bulk bytes are copied"). Either is let go as soon as the
//! source would block, so an idle tunnel holds sockets and a task, no buffers and no
//! pipes. A bulk burst's source is read in batches (`batch`, Linux): a copied
//! download woke the proxy about every 85 KiB, and batching took it from 0.87 to 1.02 of
//! direct at a quarter less CPU (docs/development.md).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;

use super::batch;
use super::idle::{Activity, Watched};
use super::prefixed::Prefixed;
#[cfg(target_os = "linux")]
use super::splice;
use super::way::Way;
use crate::judgement::budget::{self, Allowance};

/// The most bytes moved by one read and one write. A `CONNECT` download copied 128 KiB
/// at a time came at 0.88-0.94 of direct, 64 KiB at 0.86-0.91, 32 KiB at 0.82-0.84
/// (`benches/load.sh`; docs/development.md).
pub(crate) const CHUNK: usize = 128 * 1024;

/// Copy until both directions have ended (each end's EOF is passed on as a half-close,
/// as `copy_bidirectional` does) or either fails. Bytes read from `client` are added to
/// its counter and bytes read from `upstream` to its own; every move counts as activity,
/// and each burst as traffic for the tunnel's session ([`Activity::relayed`]).
///
/// Bytes from `client` are drawn from `allowance` before they are sent: once it is
/// spent, exactly the bytes that fit have gone upstream, upstream's side is shut down,
/// and the relay ends with [`budget::Spent`]. The client bytes read before the relay
/// and not yet sent (a `CONNECT`'s bytes read past its head) go first. With `splice`,
/// bulk bytes are spliced (Linux; `--tunnel-splice`).
pub(crate) async fn both_ways(
    client: Watched<Prefixed<TcpStream>>,
    upstream: Watched<TcpStream>,
    activity: &Activity,
    allowance: &Allowance,
    splice: bool,
) -> io::Result<()> {
    let (client, up) = client.into_parts();
    let (mut upstream, down) = upstream.into_parts();
    let (ahead, client) = client.into_parts();
    if !ahead.is_empty() {
        let granted = allowance.grant_filled(ahead.len()).await;
        up.fetch_add(granted as u64, Ordering::Relaxed);
        upstream.write_all(&ahead[..granted]).await?;
        if granted < ahead.len() {
            upstream.shutdown().await?;
            return Err(budget::spent());
        }
    }
    let zero_copy = splice && cfg!(target_os = "linux");
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

/// How a burst of bytes ended.
#[derive(Debug, PartialEq, Eq)]
enum Burst {
    /// The source ended (EOF).
    Ended,
    /// The source has nothing more for now.
    WouldBlock,
    /// A read filled the whole buffer: a bulk transfer.
    Bulk,
    /// The allowance is spent: what fitted was sent, the rest was not.
    Spent,
}

/// Copy `from` to `to` until `from` ends, then shut `to` down for writing.
///
/// Every burst starts with copies through a buffer, so a small message costs a read and
/// a write. Only once a read fills the whole buffer (a bulk transfer) is the rest of the
/// burst read in batches (`batch`), and moved through a pipe when splicing is on and a
/// full-size pipe can be had.
async fn one_way(
    from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    way: Way<'_>,
    activity: &Activity,
    zero_copy: bool,
) -> io::Result<()> {
    // Whether bulk bytes are read in batches, kept from burst to burst.
    let mut pace = batch::Pace::new();
    loop {
        from.readable().await?;
        let mut burst = copy_burst(&from, &mut to, way, activity, None).await?;
        if burst == Burst::Bulk {
            // Boxed: an idle tunnel's task keeps no room for a bulk burst's state (a
            // burst of 128 KiB or more pays the allocation).
            burst = Box::pin(bulk(&from, &mut to, way, activity, zero_copy, &mut pace)).await?;
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

/// The rest of a bulk burst, read in batches while `pace` says so: spliced when
/// `zero_copy` and a full-size pipe can be had (Linux), else copied.
async fn bulk(
    from: &ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    way: Way<'_>,
    activity: &Activity,
    zero_copy: bool,
    pace: &mut batch::Pace,
) -> io::Result<Burst> {
    #[cfg(target_os = "linux")]
    if let Some(pipe) = pipe(zero_copy, way) {
        return match pipe
            .burst(from.as_ref(), to.as_ref(), way, activity, pace)
            .await
        {
            Ok(true) => Ok(Burst::Ended),
            Ok(false) => Ok(Burst::WouldBlock),
            Err(e) if budget::is_spent(&e) => Ok(Burst::Spent),
            Err(e) => Err(e),
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = zero_copy; // nothing splices here
    let mut batching = batch::Batching::new(from.as_ref(), pace);
    copy_burst(from, to, way, activity, Some(&mut batching)).await
}

/// A pipe for a bulk burst, if splicing is on and one can be had. A pipe's bytes are
/// granted without waiting; a fleet-wide budget may have to wait for a draw, so its bytes
/// are copied.
#[cfg(target_os = "linux")]
fn pipe(zero_copy: bool, way: Way<'_>) -> Option<splice::Pipe> {
    let leased = way.allowance.is_some_and(Allowance::leased);
    (zero_copy && !leased).then(splice::Pipe::new)?.ok()
}

/// Copy through a [`CHUNK`] buffer until `from` ends or would block (the buffer is then
/// let go). Without `batching`, also until a read fills the whole buffer ([`Burst::Bulk`]);
/// with it (the rest of a bulk burst), a dry `from` is waited on for a batch first.
async fn copy_burst(
    from: &ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    way: Way<'_>,
    activity: &Activity,
    mut batching: Option<&mut batch::Batching<'_, '_>>,
) -> io::Result<Burst> {
    let mut buf = Vec::with_capacity(CHUNK);
    loop {
        match read_draining(from.as_ref(), &mut buf) {
            Ok(0) => return Ok(Burst::Ended),
            Ok(n) => {
                if let Some(batching) = batching.as_deref_mut() {
                    batching.moved(n);
                }
                if !pass_on(&mut buf, to, way, activity).await? {
                    return Ok(Burst::Spent);
                }
                if n == CHUNK && batching.is_none() {
                    return Ok(Burst::Bulk);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let more = match batching.as_deref_mut() {
                    Some(batching) => batching.wait().await?,
                    None => false,
                };
                // Nothing more for now: wait for readiness again without the buffer.
                if !more {
                    return Ok(Burst::WouldBlock);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Send the bytes just read into `buf` on, as many as the way's allowance grants, and
/// empty `buf` for the next read. Returns false when the allowance granted fewer (the
/// rest is never sent).
async fn pass_on(
    buf: &mut Vec<u8>,
    to: &mut WriteHalf<'_>,
    way: Way<'_>,
    activity: &Activity,
) -> io::Result<bool> {
    let n = buf.len();
    let granted = way.moved_filled(n).await;
    activity.relayed();
    to.write_all(&buf[..granted]).await?;
    activity.touch();
    buf.clear();
    Ok(granted == n)
}

/// Read what `from` holds into `buf`'s spare room. A read that leaves room has drained
/// the socket, so `from`'s readiness is cleared then, as tokio's own `poll_read` does:
/// the burst ends without another read that would find nothing, and the next wait
/// sleeps until more bytes come.
fn read_draining(from: &TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
    let room = buf.capacity() - buf.len();
    let mut got = 0;
    let read = from.try_io(Interest::READABLE, || {
        got = from.try_read_buf(buf)?;
        if got == 0 || got == room {
            Ok(got)
        } else {
            // Drained: the error clears readiness; the bytes read are in `got`.
            Err(io::ErrorKind::WouldBlock.into())
        }
    });
    match read {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => Ok(got),
        other => other,
    }
}

#[cfg(test)]
#[path = "relay_tests.rs"]
mod tests;
