//! Per-client limits on the accept path: how many connections one client address may
//! hold that have not finished their request head or SOCKS5 handshake
//! (`--max-pending-per-client`, docs/reference/command-line.md, `--max-pending-per-client`).
//!
//! Without it one client that opens connections and sends nothing holds every
//! connection slot until `--header-timeout`, and everyone else gets 503. One map keyed
//! by address, its lock held for an increment; a slot frees itself when dropped, once
//! the head is complete or the connection ends.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Unfinished connections per client address, capped at `max`.
pub struct PendingCounts {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl PendingCounts {
    pub fn new(max: usize) -> Arc<PendingCounts> {
        Arc::new(PendingCounts {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for one more unfinished connection from `client`, or `None` when it
    /// already holds `max`.
    pub fn try_hold(self: &Arc<Self>, client: IpAddr) -> Option<PendingSlot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(client).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(PendingSlot {
            counts: self.clone(),
            client,
        })
    }

    #[cfg(test)]
    fn held_by(&self, client: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&client).copied().unwrap_or(0)
    }
}

/// One connection that has not finished its head, counted against its client until
/// dropped.
pub struct PendingSlot {
    counts: Arc<PendingCounts>,
    client: IpAddr,
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        let mut open = self.counts.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_capped_per_client_and_freed_on_drop() {
        let counts = PendingCounts::new(2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let first = counts.try_hold(a).unwrap();
        let _second = counts.try_hold(a).unwrap();
        assert!(
            counts.try_hold(a).is_none(),
            "a third from one client is refused"
        );
        assert!(
            counts.try_hold(b).is_some(),
            "another client is not affected"
        );
        drop(first);
        assert_eq!(counts.held_by(a), 1);
        assert!(
            counts.try_hold(a).is_some(),
            "a freed slot can be used again"
        );
        assert_eq!(counts.held_by(b), 0, "a dropped slot leaves no entry");
    }
}
