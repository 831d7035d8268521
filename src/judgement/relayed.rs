//! The bytes relayed inside one intercepted tunnel (docs/reference/audit-log.md,
//! "Intercepted tunnels"): its record gives the request bodies and answers relayed
//! inside it, not the TLS bytes around them. Each request read inside carries a copy of
//! [`Relayed`] in its [`super::record::Client`] and adds its bytes when its own record is
//! written (a WebSocket when it closes); the tunnel's [`RelayedSum`] waits for every copy
//! to be gone before its record is written.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

/// The bytes each way, summed.
#[derive(Debug, Default)]
pub(crate) struct ByteCounts {
    up: AtomicU64,
    down: AtomicU64,
}

impl ByteCounts {
    /// `(up, down)` so far.
    pub(crate) fn load(&self) -> (u64, u64) {
        (
            self.up.load(Ordering::Relaxed),
            self.down.load(Ordering::Relaxed),
        )
    }
}

/// What one request inside the tunnel adds its bytes to. Held while the request (or
/// its WebSocket) is open: the tunnel's record waits for every copy to be dropped.
#[derive(Debug, Clone)]
pub(crate) struct Relayed {
    counts: Arc<ByteCounts>,
    _open: mpsc::Sender<()>,
}

impl Relayed {
    /// Add one request's bytes (its head and body up, its answer down).
    pub(crate) fn add(&self, (up, down): (u64, u64)) {
        self.counts.up.fetch_add(up, Ordering::Relaxed);
        self.counts.down.fetch_add(down, Ordering::Relaxed);
    }
}

/// The tunnel's side: the sum, and a wait for every request inside to be done.
#[derive(Debug)]
pub(crate) struct RelayedSum {
    counts: Arc<ByteCounts>,
    open: mpsc::Receiver<()>,
}

impl RelayedSum {
    /// The counts its record reads.
    pub(crate) fn counts(&self) -> Arc<ByteCounts> {
        self.counts.clone()
    }

    /// Completes once every [`Relayed`] copy has been dropped: every request read
    /// inside has written its record.
    pub(crate) async fn settled(&mut self) {
        while self.open.recv().await.is_some() {}
    }
}

/// A new tunnel's pair: the copy its requests carry, and its sum.
pub(crate) fn relayed() -> (Relayed, RelayedSum) {
    let counts = Arc::new(ByteCounts::default());
    let (tx, rx) = mpsc::channel(1);
    (
        Relayed {
            counts: counts.clone(),
            _open: tx,
        },
        RelayedSum { counts, open: rx },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_sum_settles_once_every_copy_is_gone_with_every_copys_bytes() {
        let (relayed, mut sum) = relayed();
        let copy = relayed.clone();
        drop(relayed);
        let waiting = tokio::spawn(async move {
            sum.settled().await;
            sum.counts().load()
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "a copy is still open");
        copy.add((10, 200));
        copy.add((1, 2));
        drop(copy);
        assert_eq!(waiting.await.unwrap(), (11, 202));
    }
}
