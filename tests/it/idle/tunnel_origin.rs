//! The tunnels' origin of the idle tests: a raw TCP server that counts what it receives,
//! notes each connection the proxy closes, and may talk on its own.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::BEAT;

/// A raw TCP origin for tunnels: it counts the bytes it receives, notes each connection
/// the proxy closes, and, if it talks, writes a byte every [`BEAT`] (a server that
/// speaks while the client stays silent).
pub(super) struct TunnelOrigin {
    pub(super) port: u16,
    received: Arc<AtomicUsize>,
    closed: watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl TunnelOrigin {
    pub(super) async fn start(talks: bool) -> TunnelOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(AtomicUsize::new(0));
        let (closed_tx, closed) = watch::channel(0);
        let closed_tx = Arc::new(closed_tx);
        let counter = received.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, talks, counter.clone(), closed_tx.clone()));
            }
        });
        TunnelOrigin {
            port,
            received,
            closed,
            task,
        }
    }

    pub(super) fn received(&self) -> usize {
        self.received.load(Ordering::SeqCst)
    }

    /// Whether the proxy has closed a connection to this origin within `limit`.
    pub(super) async fn closed_within(&self, limit: Duration) -> bool {
        let mut closed = self.closed.clone();
        tokio::time::timeout(limit, closed.wait_for(|n| *n > 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

impl Drop for TunnelOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One tunnel's connection at the origin: read (and count) until the proxy closes it,
/// meanwhile writing a byte every [`BEAT`] if the origin talks (at most a minute's worth).
async fn serve(
    stream: TcpStream,
    talks: bool,
    received: Arc<AtomicUsize>,
    closed: Arc<watch::Sender<usize>>,
) {
    let (mut read, mut write) = stream.into_split();
    let talking = tokio::spawn(async move {
        for _ in 0..200 {
            if !talks {
                return;
            }
            tokio::time::sleep(BEAT).await;
            if write.write_all(b"o").await.is_err() {
                return;
            }
        }
    });
    let mut buf = [0u8; 1024];
    loop {
        match read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                received.fetch_add(n, Ordering::SeqCst);
            }
        }
    }
    talking.abort();
    closed.send_modify(|n| *n += 1);
}
