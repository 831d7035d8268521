//! Reading a bulk burst's source in batches: when the source runs dry mid-burst,
//! the proxy asks the kernel to wake it only once [`BATCH`] bytes have arrived
//! (`SO_RCVLOWAT`), or the source ended, or [`BATCH_WAIT`] has passed. On a shared
//! machine a wake-up per few dozen KiB cost the sender and the receiver as much as the
//! proxy's own work. A wait that runs out means the bytes come slower than a batch per
//! wait, so the direction stops batching (and stops holding bytes back) until they come
//! faster again ([`Pace`]); bytes that come while it batches wait at most
//! [`BATCH_WAIT`] (plus the timer's millisecond). Copied bursts (`super::relay`) and
//! spliced ones (`super::splice`) both batch. The mark is set on Linux only: elsewhere
//! setting it fails, so a direction stops batching at its first dry read and its bytes
//! are passed on as they come.

// Unsafe code: the setsockopt(2) of `SO_RCVLOWAT` (Linux), with its `SAFETY:` comment.
#![allow(unsafe_code)]

use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

/// In a bulk burst, how many bytes the source collects before the proxy is woken to move
/// them (`SO_RCVLOWAT`).
pub(crate) const BATCH: usize = 1024 * 1024;

/// In a bulk burst, how long the proxy waits for a [`BATCH`] before it moves what there
/// is and stops batching (see [`Pace`]): the most a late tail is held back.
pub(crate) const BATCH_WAIT: Duration = Duration::from_millis(1);

/// Whether one direction's bulk bytes come fast enough to be read in batches, kept
/// across its bursts.
///
/// It starts batching. A wait that runs out means fewer than a [`BATCH`] came in
/// [`BATCH_WAIT`]: every wait would then hold bytes back for the whole timer, so the
/// direction stops batching. It starts again once a [`BATCH`] has moved within twice
/// [`BATCH_WAIT`] (at least half a batch per wait).
pub(crate) struct Pace {
    batch: bool,
    /// While not batching: the bytes moved since `since`.
    bytes: usize,
    since: Instant,
}

impl Pace {
    pub(crate) fn new() -> Pace {
        Pace {
            batch: true,
            bytes: 0,
            since: Instant::now(),
        }
    }

    fn moved(&mut self, bytes: usize) {
        if !self.batch {
            self.moved_at(bytes, Instant::now());
        }
    }

    fn moved_at(&mut self, bytes: usize, now: Instant) {
        if now.duration_since(self.since) > 2 * BATCH_WAIT {
            self.since = now;
            self.bytes = 0;
        }
        self.bytes += bytes;
        self.batch = self.bytes >= BATCH;
    }

    fn slow(&mut self) {
        self.slow_at(Instant::now());
    }

    fn slow_at(&mut self, now: Instant) {
        self.batch = false;
        self.bytes = 0;
        self.since = now;
    }
}

impl Default for Pace {
    fn default() -> Pace {
        Pace::new()
    }
}

/// A burst's batched reading of its source: `SO_RCVLOWAT` raised to [`BATCH`] for a
/// wait, and set back to one byte when a wait runs out or the burst ends.
pub(crate) struct Batching<'a, 'p> {
    from: &'a TcpStream,
    pace: &'p mut Pace,
    /// Whether the mark is raised now.
    raised: bool,
}

impl<'a, 'p> Batching<'a, 'p> {
    pub(crate) fn new(from: &'a TcpStream, pace: &'p mut Pace) -> Batching<'a, 'p> {
        Batching {
            from,
            pace,
            raised: false,
        }
    }

    /// `bytes` were read from the source: its pace.
    pub(crate) fn moved(&mut self, bytes: usize) {
        self.pace.moved(bytes);
    }

    /// The source ran dry: wait for a batch if that pays. Returns whether to read
    /// again; false when the burst should end.
    pub(crate) async fn wait(&mut self) -> io::Result<bool> {
        if !self.pace.batch {
            return Ok(false);
        }
        if !self.raised {
            if set_rcvlowat(self.from, BATCH).is_err() {
                // Not batching costs wake-ups, not correctness: carry on without it.
                self.pace.slow();
                return Ok(false);
            }
            self.raised = true;
        }
        match tokio::time::timeout(BATCH_WAIT, self.from.readable()).await {
            Ok(ready) => ready.map(|()| true),
            Err(_) => {
                // Fewer than a batch came in time: take what there is, at the usual
                // low-water mark, and stop batching until bytes come faster. A mark that
                // cannot be set back could strand a tail: that ends the tunnel instead.
                self.lower()?;
                self.pace.slow();
                Ok(true)
            }
        }
    }

    fn lower(&mut self) -> io::Result<()> {
        self.raised = false;
        set_rcvlowat(self.from, 1)
    }
}

impl Drop for Batching<'_, '_> {
    fn drop(&mut self) {
        // A burst ends with the mark raised only when its source ended, failed, or the
        // tunnel is being dropped; the mark is set back anyway, and a failure here has
        // nothing left to strand.
        if self.raised {
            let _ = self.lower();
        }
    }
}

/// Set the socket's receive low-water mark: readiness is signalled only once `bytes` are
/// queued (or the peer ended, or the receive window runs short).
#[cfg(target_os = "linux")]
fn set_rcvlowat(socket: &TcpStream, bytes: usize) -> io::Result<()> {
    let value = bytes.min(libc::c_int::MAX as usize) as libc::c_int;
    // SAFETY: a setsockopt on an open socket (borrowed for the call); the option value
    // points to a live c_int and the length given is its size, so the kernel reads only it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Not set here: the caller does not batch.
#[cfg(not(target_os = "linux"))]
fn set_rcvlowat(_socket: &TcpStream, _bytes: usize) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::tunnel::test_pair::pair;
    use tokio::io::AsyncWriteExt;

    fn rcvlowat(socket: &TcpStream) -> libc::c_int {
        let mut value: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a getsockopt into a c_int of the size given.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        value
    }

    /// Fewer bytes than a batch arrive while the burst waits: the wait runs out, the mark
    /// is set back to one byte, the next dry read ends the burst, and the direction stops
    /// batching.
    #[tokio::test]
    async fn a_short_batch_wait_runs_out_and_sets_the_mark_back() {
        let (mut sender, from) = pair().await;
        run_dry(&from);
        let mut pace = Pace::new();
        let mut batching = Batching::new(&from, &mut pace);
        {
            let waiting = batching.wait();
            tokio::pin!(waiting);
            // The first poll raises the mark; then a tail too small to reach it.
            assert!(futures_poll_once(waiting.as_mut()).await.is_none());
            assert_eq!(rcvlowat(&from), BATCH as libc::c_int);
            sender.write_all(b"tail").await.unwrap();
            let woke = tokio::time::timeout(Duration::from_secs(5), waiting)
                .await
                .expect("the wait runs out by itself");
            assert!(woke.unwrap(), "read again after the wait");
        }
        assert_eq!(rcvlowat(&from), 1, "the mark is back to one byte");
        assert!(
            !batching.wait().await.unwrap(),
            "the next dry read ends the burst"
        );
        drop(batching);
        assert!(!pace.batch, "the direction stops batching");
    }

    /// A burst that ends while the mark is raised (here: the batching is dropped mid-wait,
    /// as when the tunnel closes) sets it back.
    #[tokio::test]
    async fn dropping_a_raised_batching_sets_the_mark_back() {
        let (_sender, from) = pair().await;
        run_dry(&from);
        let mut pace = Pace::new();
        let mut batching = Batching::new(&from, &mut pace);
        {
            let waiting = batching.wait();
            tokio::pin!(waiting);
            assert!(futures_poll_once(waiting.as_mut()).await.is_none());
        }
        assert_eq!(rcvlowat(&from), BATCH as libc::c_int);
        drop(batching);
        assert_eq!(rcvlowat(&from), 1);
    }

    /// A direction that stopped batching starts again once a batch moves quickly, and not
    /// on bytes spread thinly over time.
    #[test]
    fn pace_batches_again_once_a_batch_moves_quickly() {
        let mut pace = Pace::new();
        pace.slow();
        pace.moved(BATCH / 2);
        assert!(!pace.batch);
        pace.moved(BATCH / 2);
        assert!(pace.batch, "a batch within twice the wait");
        pace.slow();
        pace.moved(BATCH / 2);
        std::thread::sleep(3 * BATCH_WAIT);
        pace.moved(BATCH / 2);
        assert!(
            !pace.batch,
            "half a batch, then half again after the window"
        );
    }

    /// Read the socket dry, as the burst has when it waits: tokio forgets its readiness.
    fn run_dry(socket: &TcpStream) {
        let err = socket.try_read(&mut [0u8; 16]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    /// Poll a future once, returning its output if it was ready.
    async fn futures_poll_once<F: std::future::Future + Unpin>(fut: F) -> Option<F::Output> {
        let mut fut = fut;
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut fut).poll(cx) {
                std::task::Poll::Ready(out) => Some(out),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
