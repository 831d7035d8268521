//! Per-client limits: how many tunnels one client address may hold open at once, and
//! (the same counter, [`super::pending`]) how many connections that have not finished
//! their head.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Open tunnels per client address, capped at `max`.
pub(crate) type TunnelCounts = ClientCounts;

/// One open tunnel, counted against its client until dropped.
pub(crate) type TunnelSlot = ClientSlot;

/// Things held per client address (tunnels, unfinished connections), capped at `max`.
pub(crate) struct ClientCounts {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl ClientCounts {
    pub(crate) fn new(max: usize) -> Arc<ClientCounts> {
        Arc::new(ClientCounts {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for one more from `client`, or `None` when it already holds `max`. The
    /// slot frees itself when dropped.
    pub(crate) fn try_take(self: &Arc<Self>, client: IpAddr) -> Option<ClientSlot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(client).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            counts: self.clone(),
            client,
        })
    }

    #[cfg(test)]
    /// How many slots `client` holds.
    pub(crate) fn held_by(&self, client: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&client).copied().unwrap_or(0)
    }
}

/// One slot, counted against its client until dropped.
pub(crate) struct ClientSlot {
    counts: Arc<ClientCounts>,
    client: IpAddr,
}

impl Drop for ClientSlot {
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
        let counts = TunnelCounts::new(2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let first = counts.try_take(a).unwrap();
        let _second = counts.try_take(a).unwrap();
        assert!(
            counts.try_take(a).is_none(),
            "a third tunnel from one client is refused"
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
    }
}
