//! The accept side: one single-threaded runtime per worker thread, each accepting on its
//! own handle of every listening socket of the request path (the explicit proxy's,
//! `crate::proxy`, the transparent one's, `crate::transparent`, and the SOCKS5 one's,
//! `crate::socks`). It sits above them, so no listener needs another to be served.
//!
//! With tokio's shared multi-threaded scheduler, a proxied request hops between threads:
//! the client connection's task on one worker, the pooled upstream connection's task on
//! another, each hand-over a futex wake and a context switch (the keep-alive profile
//! showed about an eighth of the proxy's time there). Here a connection, its upstream
//! connections (each worker has its own [`Upstream`] pool) and its tunnel live on one thread, so a
//! hand-over is a queue push. The kernel spreads new connections over the workers that
//! wait in `accept`.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;

use crate::audit::Via;
use crate::judgement::{Phase, State};
use crate::proxy::conn::{refuse_over_limit, serve_connection};
use crate::proxy::pool::{sweep_every, Upstream};
use crate::socks::serve_socks;
use crate::transparent::serve_redirected;

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The explicit proxy (`--listen`).
    Proxy,
    /// Connections redirected by nftables (`--transparent-listen`).
    Transparent,
    /// SOCKS5 clients (`--socks-listen`).
    Socks5,
}

impl Kind {
    /// The `listener` label of this listener's metrics.
    fn label(self) -> &'static str {
        match self {
            Kind::Proxy => "proxy",
            Kind::Transparent => "transparent",
            Kind::Socks5 => "socks5",
        }
    }

    /// The audit record's `via` for a connection accepted here.
    fn via(self) -> Via {
        match self {
            Kind::Proxy => Via::Proxy,
            Kind::Transparent => Via::Transparent,
            Kind::Socks5 => Via::Socks5,
        }
    }
}

/// How long connections still open when the grace period ends get to close on their
/// own before they are cut.
const CLOSING_WAIT: Duration = Duration::from_secs(2);

/// The number of workers when none is asked for: one per core the process may use.
pub(crate) fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Running worker threads, each accepting connections until [`Server::run`]'s shutdown.
pub(crate) struct Server {
    state: Arc<State>,
    threads: Vec<JoinHandle<()>>,
    order: watch::Sender<Order>,
    /// Every connection and tunnel holds a clone of this channel's sender: the channel
    /// closing tells that all of them are gone (and with them their audit log clones).
    done: mpsc::Receiver<()>,
}

impl Server {
    /// Start `workers` threads (at least one), each accepting on every one of
    /// `listeners`. Must be called inside a tokio runtime (the listeners are registered
    /// with it).
    pub(crate) fn start(
        listeners: Vec<(TcpListener, Kind)>,
        state: Arc<State>,
        workers: usize,
    ) -> io::Result<Server> {
        let listeners = listeners
            .into_iter()
            .map(|(l, kind)| Ok((l.into_std()?, kind)))
            .collect::<io::Result<Vec<_>>>()?;
        let permits = Arc::new(Semaphore::new(state.limits.max_connections));
        let (order, order_rx) = watch::channel(Order::Accept);
        let (done_tx, done) = mpsc::channel::<()>(1);
        let mut threads = Vec::new();
        for i in 0..workers.max(1) {
            let listeners = listeners
                .iter()
                .map(|(l, kind)| Ok((l.try_clone()?, *kind)))
                .collect::<io::Result<Vec<_>>>()?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let worker = Worker {
                state: state.clone(),
                permits: permits.clone(),
                order: order_rx.clone(),
                done: done_tx.clone(),
            };
            let thread = std::thread::Builder::new()
                .name(format!("egress-worker-{i}"))
                .spawn(move || worker_thread(&runtime, worker, listeners))?;
            threads.push(thread);
        }
        Ok(Server {
            state,
            threads,
            order,
            done,
        })
    }

    /// Serve until `shutdown` completes, then give open connections and tunnels
    /// `limits.shutdown_grace` to finish and close the rest; returns once every worker
    /// has stopped.
    pub(crate) async fn run(mut self, shutdown: impl Future<Output = ()>) {
        shutdown.await;
        self.order.send_replace(Order::StopAccepting);
        let state = &self.state;
        state.phase.send_replace(Phase::Draining);
        let grace = state.limits.shutdown_grace;
        if tokio::time::timeout(grace, self.done.recv()).await.is_err() {
            tracing::info!("closing connections and tunnels still open after the grace period");
            state.phase.send_replace(Phase::Closing);
            let _ = tokio::time::timeout(CLOSING_WAIT, self.done.recv()).await;
        }
        state.phase.send_replace(Phase::Closing);
        self.order.send_replace(Order::Exit);
        let threads = std::mem::take(&mut self.threads);
        let joined = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        });
        let _ = joined.await;
    }
}

/// A worker thread's body, never inlined: `benches/instructions.sh` tells the request
/// path's threads from the others by this function's name in their profiles.
#[inline(never)]
fn worker_thread(
    runtime: &tokio::runtime::Runtime,
    worker: Worker,
    listeners: Vec<(std::net::TcpListener, Kind)>,
) {
    runtime.block_on(worker.serve(listeners))
}

/// What the server tells its workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    Accept,
    /// Shutting down: accept no more, let what is open finish.
    StopAccepting,
    /// Everything has ended or its time is up: cut what is left and stop the thread
    /// (its runtime drops every task still on it, tunnels included).
    Exit,
}

/// What one worker thread holds.
#[derive(Clone)]
struct Worker {
    state: Arc<State>,
    permits: Arc<Semaphore>,
    order: watch::Receiver<Order>,
    done: mpsc::Sender<()>,
}

impl Worker {
    /// Accept on every listener, sharing this worker's upstream pool, until told to
    /// exit.
    async fn serve(self, listeners: Vec<(std::net::TcpListener, Kind)>) {
        let tls = self.state.interception.as_ref().map(|i| i.upstream.clone());
        let upstream = Arc::new(Upstream::with_tls(self.state.limits.connect_timeout, tls));
        tokio::spawn(sweep_every(upstream.clone(), Duration::from_secs(10)));
        let mut loops = listeners.into_iter().map(|(listener, kind)| {
            let (worker, upstream) = (self.clone(), upstream.clone());
            async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => worker.accept_loop(listener, kind, upstream).await,
                    Err(e) => tracing::error!(error = %e, "a worker cannot listen"),
                }
            }
        });
        // The proxy listener and at most the transparent and SOCKS5 ones, on this one
        // thread.
        let run = |l: Option<_>| async {
            if let Some(l) = l {
                l.await
            }
        };
        let (first, second, third) = (loops.next(), loops.next(), loops.next());
        debug_assert!(loops.next().is_none(), "at most three listeners");
        drop(self);
        tokio::join!(run(first), run(second), run(third));
    }

    /// Accept until told to stop, then keep running this worker's connections and
    /// tunnels (they end themselves as the phase moves on) until told to exit.
    async fn accept_loop(mut self, listener: TcpListener, kind: Kind, upstream: Arc<Upstream>) {
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                _ = self.order.wait_for(|order| *order != Order::Accept) => break,
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(pair) => pair,
                        Err(e) => {
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    // One client may not hold every slot with connections that never
                    // finish their head: past its share it is closed at once, unanswered.
                    let Some(pending) = self.state.pending.try_take(peer.ip()) else {
                        self.state.metrics.pending_refused(kind.label());
                        tracing::debug!(client = %peer, "closed: the client holds --max-pending-per-client unfinished connections");
                        drop(stream);
                        continue;
                    };
                    // Reap finished connections here rather than in a `join_next`
                    // branch, which would wake this loop every time a connection ends.
                    while conns.try_join_next().is_some() {}
                    let state = self.state.clone();
                    let done = self.done.clone();
                    let permits = self.permits.clone();
                    let upstream = upstream.clone();
                    conns.spawn(async move {
                        // Over the limit, a connection waits briefly for a slot, then 503.
                        let wait = state.limits.connection_wait;
                        match tokio::time::timeout(wait, permits.acquire_owned()).await {
                            Ok(Ok(permit)) => {
                                match kind {
                                    Kind::Proxy => {
                                        serve_connection(stream, peer, state, (done, pending), upstream, None)
                                            .await
                                    }
                                    Kind::Transparent => {
                                        serve_redirected(stream, peer, state, (done, pending), upstream).await
                                    }
                                    Kind::Socks5 => {
                                        serve_socks(stream, peer, state, (done, pending), Arc::new(upstream)).await
                                    }
                                }
                                drop(permit);
                            }
                            _ => refuse_over_limit(stream, peer, state, kind.via()).await,
                        }
                    });
                }
            }
        }
        drop(listener);
        drop(self.done);
        let _ = self.order.wait_for(|order| *order == Order::Exit).await;
        conns.shutdown().await;
    }
}
