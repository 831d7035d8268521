//! Unix sockets of the host are out of CMD's reach (docs/reference/confinement.md, "Unix
//! sockets").
//!
//! A network namespace confines abstract Unix sockets but not those bound to a path: a
//! host daemon's socket file that CMD's view shows (the host's `/tmp`, a home directory,
//! the starting directory, a `--writable` place) would take CMD's connection, and a
//! read-only mount does not stop `connect(2)`. So every `connect` in the jail goes through
//! `run`:
//!
//! - CMD starts with a second seccomp filter ([`filter`]) that turns each `connect` into a
//!   user notification; its listener goes to `run` over a socket the jail's init holds.
//! - `run`'s supervisor ([`supervise`]) takes each one, copies the address out of the
//!   caller's memory, takes the caller's socket (`pidfd_getfd`), and makes the `connect`
//!   itself on that socket with its own copy of the address, so nothing the caller
//!   changes after the check counts. Other families than `AF_UNIX`, abstract and unnamed
//!   addresses are connected as they are (the socket's own network namespace, the jail's,
//!   is where they lead).
//! - A path is resolved as CMD would resolve it (in the jail's mount namespace, from
//!   CMD's working directory) and connected through the descriptor it resolved to, never
//!   by name again. It is connected only when a socket of the jail's own network
//!   namespace is bound to that file ([`diag`]: the kernel's `sock_diag` lists them), or
//!   when `--allow-unix` names it or its directory; otherwise the call fails with
//!   `EACCES` and the host's socket never sees a connection.
//!
//! Unix datagram sockets, which could send to a path without `connect`, cannot be made in
//! the jail (the jail's seccomp table refuses them), so `connect` is the one door.

mod allow;
mod diag;
pub(super) mod filter;
mod notify;
mod resolve;
mod supervise;

pub(super) use allow::AllowUnix;
pub(super) use diag::Diag;
pub(super) use supervise::Supervisor;
