//! Audit records as they are written, for `GET /v1/events`
//! (docs/reference/control-plane.md, "Events").
//!
//! The writer publishes each record once it is in the file, on a bounded broadcast: a
//! reader that falls behind loses its place (and is dropped by the admin API), while
//! the writer never waits for anyone, so a slow reader never slows requests or the
//! log. With no reader subscribed nothing extra is done; with readers, the line is the
//! one the writer serialised for the file, copied once.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::broadcast;

/// Records the broadcast holds for its slowest reader before that reader lags.
pub(super) const LIVE_QUEUE: usize = 4096;

/// One record as written: what the filters look at, and its JSON line (no newline).
#[derive(Debug)]
pub(crate) struct LiveRecord {
    /// The record's `event`.
    pub event: &'static str,
    /// The record's `session`.
    pub session: Option<String>,
    /// The record's JSON line, as in the file, without its newline.
    pub line: Bytes,
}

/// The sending side, owned by what the audit handles and the writer share.
#[derive(Debug)]
pub(super) struct Live {
    tx: broadcast::Sender<Arc<LiveRecord>>,
}

impl Live {
    pub(super) fn new() -> Live {
        Live {
            tx: broadcast::channel(LIVE_QUEUE).0,
        }
    }

    pub(super) fn subscribe(&self) -> broadcast::Receiver<Arc<LiveRecord>> {
        self.tx.subscribe()
    }

    /// Anyone listening: checked before building anything to publish.
    pub(super) fn listened(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    /// Publish a record's `line` (a whole line with its newline, as the batch holds it),
    /// once the file holds it.
    pub(super) fn publish(&self, event: &'static str, session: Option<String>, line: &[u8]) {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let live = LiveRecord {
            event,
            session,
            line: Bytes::copy_from_slice(line),
        };
        // No receiver left since `listened`: nothing to do.
        let _ = self.tx.send(Arc::new(live));
    }
}
