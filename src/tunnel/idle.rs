//! Idle detection for tunnels: a stream wrapper that notes when bytes last moved, and a
//! watchdog that completes once nothing has moved for the idle timeout. The bytes a
//! tunnel relays are also its session's traffic (docs/reference/control-plane.md,
//! "Ending"): an [`Activity`] made for a session marks it with each relayed burst.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::session::Session;

/// When bytes last moved through any stream sharing it, in milliseconds since `start`,
/// and the session (if any) whose traffic they are.
#[derive(Clone)]
pub(crate) struct Activity {
    start: Instant,
    last_ms: Arc<AtomicU64>,
    session: Option<Arc<Session>>,
}

impl Activity {
    pub(crate) fn new() -> Activity {
        Activity::of(None)
    }

    /// The activity of a tunnel of `session`: its relayed bytes keep the session alive.
    pub(crate) fn of(session: Option<Arc<Session>>) -> Activity {
        Activity {
            start: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
            session,
        }
    }

    /// Note that bytes moved now, for the tunnel's own idle timeout.
    pub(crate) fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Note that a burst of bytes was relayed: [`touch`](Self::touch), and traffic for
    /// the session. Once per burst, not per byte: a read of a coarse clock and a relaxed
    /// atomic ([`Session::mark_traffic`]).
    pub(crate) fn relayed(&self) {
        self.touch();
        if let Some(session) = &self.session {
            session.mark_traffic();
        }
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// Completes once nothing has moved for `idle`.
    pub(crate) async fn idle_for(&self, idle: Duration) {
        loop {
            let deadline = self.last() + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }

    /// Wrap `inner` so that reads and writes through it count as activity, adding the
    /// bytes read from it to `read`.
    pub(crate) fn watch_counting<S>(&self, inner: S, read: Arc<AtomicU64>) -> Watched<S> {
        Watched {
            inner,
            activity: self.clone(),
            read,
        }
    }
}

impl Default for Activity {
    fn default() -> Self {
        Activity::new()
    }
}

/// A stream whose traffic is noted in an [`Activity`], and which counts the bytes read
/// from it (so a tunnel cut short still reports what it carried).
pub(crate) struct Watched<S> {
    inner: S,
    activity: Activity,
    read: Arc<AtomicU64>,
}

impl<S> Watched<S> {
    /// The stream and its byte count, for a copy loop that counts by itself.
    pub(crate) fn into_parts(self) -> (S, Arc<AtomicU64>) {
        (self.inner, self.read)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            self.read.fetch_add(read as u64, Ordering::Relaxed);
            self.activity.relayed();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.relayed();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn idle_fires_only_after_quiet_time() {
        let activity = Activity::new();
        let (a, mut b) = tokio::io::duplex(64);
        let mut a = activity.watch_counting(a, Arc::default());
        let idle = activity.clone();
        let watchdog = tokio::spawn(async move { idle.idle_for(Duration::from_secs(10)).await });
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            a.write_all(b"x").await.unwrap();
            let mut one = [0u8; 1];
            b.read_exact(&mut one).await.unwrap();
            assert!(
                !watchdog.is_finished(),
                "traffic every 6 s keeps a 10 s idle timer off"
            );
        }
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(watchdog.is_finished(), "11 s of quiet ends it");
    }
}
