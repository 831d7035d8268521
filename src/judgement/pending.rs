//! Per-client limits on the accept path: how many connections one client address may
//! hold that have not finished their request head or SOCKS5 handshake
//! (`--max-pending-per-client`, docs/reference/command-line.md, `--max-pending-per-client`).
//!
//! Without it one client that opens connections and sends nothing holds every
//! connection slot until `--header-timeout`, and everyone else gets 503. One map keyed
//! by address, its lock held for an increment; a slot frees itself when dropped, once
//! the head is complete or the connection ends.

/// Unfinished connections per client address, capped at `--max-pending-per-client`:
/// the same counter as the tunnels'.
pub(crate) use super::tunnel_counts::{ClientCounts as PendingCounts, ClientSlot as PendingSlot};

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    #[test]
    fn slots_are_capped_per_client_and_freed_on_drop() {
        let counts = PendingCounts::new(2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let first = counts.try_take(a).unwrap();
        let _second = counts.try_take(a).unwrap();
        assert!(
            counts.try_take(a).is_none(),
            "a third from one client is refused"
        );
        assert!(
            counts.try_take(b).is_some(),
            "another client is not affected"
        );
        drop(first);
        assert_eq!(counts.held_by(a), 1);
        assert!(
            counts.try_take(a).is_some(),
            "a freed slot can be used again"
        );
        assert_eq!(counts.held_by(b), 0, "a dropped slot leaves no entry");
    }
}
