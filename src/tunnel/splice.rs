//! Moving a tunnel's bytes from one TCP socket to another without copying them through
//! user space (Linux only, `--tunnel-splice`): splice(2) from the source socket into a
//! pipe, then from the pipe into the destination socket. The kernel passes page
//! references along; the proxy never touches the bytes.
//!
//! A [`Pipe`] lives for one burst: it is made when the source turns readable and dropped
//! when the source would block with the pipe empty, so an idle tunnel holds no pipe
//! descriptors (two per busy direction instead). A bulk burst's source is read in
//! batches, as a copied one's is ([`super::batch`]).

// Unsafe code: libc calls (pipe2, fcntl, splice), each with its `SAFETY:` comment.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;

use tokio::io::Interest;
use tokio::net::TcpStream;

use super::batch::{Batching, Pace};
use super::idle::Activity;
use super::way::Way;
use crate::judgement::budget;

/// The pipe size asked for: the default 64 KiB pipe costs a pair of system calls per
/// 64 KiB. An unprivileged process may be refused (past `/proc/sys/fs/pipe-max-size` or
/// its user's `pipe-user-pages-soft`); [`Pipe::new`] then fails and the burst is copied.
const PIPE_SIZE: usize = 256 * 1024;

/// A pipe, both ends non-blocking, closed on drop.
pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    /// A new pipe of [`PIPE_SIZE`]; fails as pipe2(2) does (EMFILE, ENFILE, ...) or when
    /// the pipe cannot have that size.
    pub(crate) fn new() -> io::Result<Pipe> {
        let mut fds: [RawFd; 2] = [-1; 2];
        // SAFETY: `fds` is a valid array of two descriptors for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
        let pipe = unsafe {
            Pipe {
                read: OwnedFd::from_raw_fd(fds[0]),
                write: OwnedFd::from_raw_fd(fds[1]),
            }
        };
        // SAFETY: a plain fcntl on a descriptor we own; F_SETPIPE_SZ takes an int and
        // touches no memory of ours.
        let size = unsafe {
            libc::fcntl(
                pipe.write.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                PIPE_SIZE as libc::c_int,
            )
        };
        // Refused (the user's pipe pages are spent, so the pipe may hold only a page or
        // two): splicing through it would be slower than copying, so the caller copies.
        if size < 0 || (size as usize) < PIPE_SIZE {
            return Err(io::Error::other("no full-size pipe"));
        }
        Ok(pipe)
    }

    /// Move bytes from `from` to `to` through the pipe until `from` would block (with
    /// the pipe drained: every byte read has been written) or ends. Returns whether it
    /// ended. Bytes read are counted (and granted) by `way`; each read and each drained
    /// batch counts as activity, and each read as the session's traffic. Bytes the way's allowance does not grant are left in
    /// the pipe, never written, and the burst fails with [`budget::Spent`].
    ///
    /// While `pace` says so, a dry `from` is waited on for a batch ([`Batching`]). The
    /// caller keeps `pace` from one burst to the next.
    pub(crate) async fn burst(
        &self,
        from: &TcpStream,
        to: &TcpStream,
        way: Way<'_>,
        activity: &Activity,
        pace: &mut Pace,
    ) -> io::Result<bool> {
        let (pipe_read, pipe_write) = (self.read.as_raw_fd(), self.write.as_raw_fd());
        let mut batching = Batching::new(from, pace);
        loop {
            // The pipe is empty here, so EAGAIN can only mean the socket has nothing, and
            // try_io then clears its readiness.
            let read = from.try_io(Interest::READABLE, || {
                splice(from.as_raw_fd(), pipe_write, PIPE_SIZE)
            });
            let read = match read {
                Ok(0) => return Ok(true),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => match batching.wait().await? {
                    true => continue,
                    false => return Ok(false),
                },
                Err(e) => return Err(e),
            };
            batching.moved(read);
            let granted = way.moved(read);
            let mut left = granted;
            // Once per splice round: the tunnel's idle clock and its session's traffic.
            activity.relayed();
            while left > 0 {
                to.writable().await?;
                match to.try_io(Interest::WRITABLE, || {
                    splice(pipe_read, to.as_raw_fd(), left)
                }) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => left -= n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            activity.touch();
            if granted < read {
                return Err(budget::spent());
            }
        }
    }
}

/// One splice(2) of up to `len` bytes, never blocking, retried when interrupted.
fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
    loop {
        // SAFETY: both descriptors are open for the call (the caller borrows their owners);
        // with null offsets splice(2) reads and writes no memory of ours.
        let n = unsafe { libc::splice(from, ptr::null_mut(), to, ptr::null_mut(), len, flags) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
