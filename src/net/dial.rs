//! The address guard, and dialing exactly what it approved
//! (docs/reference/policy-files.md, "Addresses").
//!
//! [`dial`] takes [`CheckedAddr`]s, and only the address guard ([`guard`]) can make one,
//! so a code path that connects without checking the address does not compile.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::policy::{check_address, Decision, Effective, Reason, Verdict};

/// A socket address the proxy's address check approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CheckedAddr(SocketAddr);

/// The checked addresses of one approval. Most names have one: kept inline, so a
/// request's judgement allocates nothing for it; more go in a `Vec`.
#[derive(Debug, Clone, Default)]
pub(crate) enum CheckedAddrs {
    #[default]
    None,
    One([CheckedAddr; 1]),
    Many(Vec<CheckedAddr>),
}

impl CheckedAddrs {
    pub(crate) fn push(&mut self, addr: CheckedAddr) {
        *self = match std::mem::take(self) {
            CheckedAddrs::None => CheckedAddrs::One([addr]),
            CheckedAddrs::One([first]) => CheckedAddrs::Many(vec![first, addr]),
            CheckedAddrs::Many(mut all) => {
                all.push(addr);
                CheckedAddrs::Many(all)
            }
        };
    }
}

impl std::ops::Deref for CheckedAddrs {
    type Target = [CheckedAddr];

    fn deref(&self) -> &[CheckedAddr] {
        match self {
            CheckedAddrs::None => &[],
            CheckedAddrs::One(one) => one,
            CheckedAddrs::Many(all) => all,
        }
    }
}

/// The address guard: judge `ip` on `port` at the address level (refused classes,
/// `allowed_cidrs`, the proxy's own listeners `own`). The only way to make a
/// [`CheckedAddr`]; a refusal comes back as the deciding [`Decision`] and its reason.
pub(crate) fn guard(
    eff: &Effective,
    ip: IpAddr,
    own: &[SocketAddr],
    port: u16,
) -> Result<CheckedAddr, (Decision, Reason)> {
    let decision = check_address(eff, ip, own, port);
    match decision.verdict {
        Verdict::Allow => Ok(CheckedAddr(SocketAddr::new(ip, port))),
        // The address level is never relaxed by report mode.
        Verdict::Deny(reason) | Verdict::WouldDeny(reason) => Err((decision, reason)),
    }
}

impl CheckedAddr {
    /// Marks `addr` as approved without judging it: for the crate's unit tests only
    /// (`cfg(test)`: the pool's and the parent proxy's tests dial a test origin with it).
    #[cfg(test)]
    pub(crate) fn unchecked_for_test(addr: SocketAddr) -> CheckedAddr {
        CheckedAddr(addr)
    }

    /// The parent proxy's address (`serve --upstream-proxy`): the one destination the
    /// operator's configuration approves, without the guard (`super::parent`).
    pub(super) fn parent(addr: SocketAddr) -> CheckedAddr {
        CheckedAddr(addr)
    }

    /// The approved address.
    pub fn addr(&self) -> SocketAddr {
        self.0
    }
}

impl std::fmt::Display for CheckedAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Why no connection was made. The proxy answers [`DialError::Timeout`] with 504 and the
/// others with 502 (docs/reference/answers.md).
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The connect timeout ran out before any address accepted.
    #[error("connect timed out")]
    Timeout,
    /// The last address tried refused the connection.
    #[error("connection refused: {0}")]
    Refused(#[source] io::Error),
    /// Any other failure, including an empty address list.
    #[error("connect failed: {0}")]
    Other(#[source] io::Error),
    /// The parent proxy (`serve --upstream-proxy`) could not be reached, or did not open
    /// the tunnel: what it answered, or why not.
    #[error("{0}")]
    Parent(String),
}

/// Tries each checked address in order until one connects, and returns the stream with
/// the address it reached (for the audit record's `resolved_ip`). `timeout` bounds the
/// whole dial, all addresses together (`--connect-timeout`), not each attempt.
/// TCP_NODELAY is set on the stream: the proxy relays small writes as they come.
pub(crate) async fn dial(
    addrs: &[CheckedAddr],
    timeout: Duration,
) -> Result<(TcpStream, CheckedAddr), DialError> {
    let deadline = Instant::now() + timeout;
    let mut last = DialError::Other(io::Error::new(
        io::ErrorKind::InvalidInput,
        "no approved address to dial",
    ));
    for &addr in addrs {
        match tokio::time::timeout_at(deadline, TcpStream::connect(addr.0)).await {
            Err(_) => return Err(DialError::Timeout),
            Ok(Ok(stream)) => {
                stream.set_nodelay(true).map_err(DialError::Other)?;
                return Ok((stream, addr));
            }
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                last = DialError::Refused(e);
            }
            Ok(Err(e)) if e.kind() == io::ErrorKind::TimedOut => last = DialError::Timeout,
            Ok(Err(e)) => last = DialError::Other(e),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    const SECOND: Duration = Duration::from_secs(1);

    /// Pushed addresses come back in order, however many there are.
    #[test]
    fn checked_addrs_keep_every_address_in_order() {
        let all: Vec<CheckedAddr> = (1..=3)
            .map(|i| CheckedAddr::unchecked_for_test(SocketAddr::from(([127, 0, 0, i], 80))))
            .collect();
        let mut addrs = CheckedAddrs::default();
        assert!(addrs.is_empty());
        for (n, addr) in all.iter().enumerate() {
            addrs.push(*addr);
            assert_eq!(&addrs[..], &all[..=n]);
        }
    }

    /// A loopback port with nothing listening on it (bound, then released).
    async fn closed_port() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    }

    #[tokio::test]
    async fn connects_to_a_local_listener_with_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = CheckedAddr::unchecked_for_test(listener.local_addr().unwrap());
        let (stream, reached) = dial(&[addr], SECOND).await.unwrap();
        assert_eq!(reached, addr);
        assert_eq!(stream.peer_addr().unwrap(), addr.addr());
        assert!(stream.nodelay().unwrap());
        listener.accept().await.unwrap();
    }

    #[tokio::test]
    async fn closed_port_is_refused() {
        let addr = CheckedAddr::unchecked_for_test(closed_port().await);
        let err = dial(&[addr], SECOND).await.unwrap_err();
        assert!(matches!(err, DialError::Refused(_)), "{err:?}");
    }

    #[tokio::test]
    async fn falls_through_to_the_next_address_in_order() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed = CheckedAddr::unchecked_for_test(closed_port().await);
        let open = CheckedAddr::unchecked_for_test(listener.local_addr().unwrap());
        let (_stream, reached) = dial(&[closed, open], SECOND).await.unwrap();
        assert_eq!(reached, open);
    }

    #[tokio::test]
    async fn empty_list_is_an_error() {
        let err = dial(&[], SECOND).await.unwrap_err();
        assert!(matches!(err, DialError::Other(ref e) if e.kind() == io::ErrorKind::InvalidInput));
    }
}
