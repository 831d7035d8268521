//! The audit log's queue and writer (docs/reference/audit-log.md, "When records are
//! written").
//!
//! Records go over a bounded queue to one writer task: when the queue is full, the
//! request that writes a record waits for room, so no record is ever dropped and memory
//! stays bounded. The writer writes whole lines in batches (the file is written with
//! blocking calls on tokio's blocking pool), and:
//!
//! - when a write fails (a full disk, an I/O error), it keeps the batch and tries again
//!   until it succeeds, and while it fails [`AuditLog::refusing`] is true: the proxy
//!   answers every request 503 `audit_unavailable` and `/healthz` 503. Once a write
//!   succeeds, the queued records are written, in order, and service resumes by itself.
//!   With [`OnFailure::Open`] (`--audit-failure open`) a batch that fails is counted as
//!   lost instead, and the proxy keeps serving.
//! - on [`AuditLog::reopen`] (SIGUSR1), it finishes the batch in hand and opens the path
//!   again, so a file renamed by logrotate is left whole and a new one is created.
//! - it seals each line with the chain's `seq` and `prev` as it batches it, and with a
//!   signing key adds the checkpoints (`super::chain`); a file it opens that already
//!   holds lines is gone on from its last line, a new one from seq 1.
//!
//! # Shutdown
//!
//! [`AuditLog::open_with`] returns the handle and an [`AuditWriter`]; start it on its
//! own thread (`AuditWriter::start`, `super::thread`) or spawn [`AuditWriter::run`]. On
//! shutdown, stop accepting, then either drop every `AuditLog` clone or call
//! [`AuditLog::close`] on one of them, and await the writer's end: then every record
//! queued before that point is in the file, and the file is fsynced.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::batch::{open_at_tail, stdout_file, write_from, Batch};
use super::chain::{Chain, Format, CHECKPOINT_INTERVAL};
use super::export::{ExportQueue, Outbox};
use super::keys::Signer;
use super::live::{Live, LiveRecord};
use super::Record;

/// Records the queue holds before a writer of one waits for room.
pub(super) const QUEUE: usize = 16 * 1024;

/// Records written in one batch at most, so a steady stream still reaches the file
/// promptly.
const MAX_BATCH: usize = 256;

/// The longest pause between two tries of a write that failed.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What the proxy does while records cannot be written (`--audit-failure`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnFailure {
    /// Refuse every request (503 `audit_unavailable`) until a write succeeds again.
    #[default]
    Closed,
    /// Keep serving; count the records that could not be written as lost.
    Open,
}

/// How the log is written: `--audit-failure`, `--audit-format`, `--audit-signing-key`.
#[derive(Clone, Debug, Default)]
pub(crate) struct AuditOptions {
    pub on_failure: OnFailure,
    pub format: Format,
    /// Signs a checkpoint every 1,000 records, every 60 s and at shutdown.
    pub signer: Option<Arc<Signer>>,
    /// `--otlp-endpoint`: each line, once written, offered to the exporter.
    pub export: Option<ExportQueue>,
}

/// What the handles and the writer share.
#[derive(Debug)]
struct Shared {
    written: AtomicU64,
    lost: AtomicU64,
    failing: AtomicBool,
    on_failure: OnFailure,
    reopen: Notify,
    close: Notify,
    /// Each record taken from the queue, for `GET /v1/events` (`super::live`).
    live: Live,
    /// The OpenTelemetry export, for records that are not written (their span alone).
    export: Option<ExportQueue>,
}

impl Shared {
    fn new(on_failure: OnFailure, export: Option<ExportQueue>) -> Arc<Shared> {
        Arc::new(Shared {
            written: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            on_failure,
            reopen: Notify::new(),
            close: Notify::new(),
            live: Live::new(),
            export,
        })
    }
}

/// The handle connections write records through. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct AuditLog {
    tx: Option<mpsc::Sender<Box<Record>>>,
    shared: Arc<Shared>,
}

/// Where lines go: the file at `path`, or standard output (for `-`) as a file handle of
/// its own.
struct Sink {
    file: File,
    /// `None` for standard output: never reopened, never fsynced (it may be a pipe).
    path: Option<PathBuf>,
}

impl AuditLog {
    /// Opens `path` for appending (created with mode 0600 if missing), or standard output
    /// for `-`, to write in `options`' format, signing checkpoints with its key. Start
    /// the returned writer (see the module docs).
    pub(crate) async fn open_with(
        path: &str,
        options: AuditOptions,
    ) -> io::Result<(AuditLog, AuditWriter)> {
        let mut chain = Chain::new(options.format, options.signer);
        let sink = if path == "-" {
            Sink {
                file: stdout_file()?,
                path: None,
            }
        } else {
            let path = PathBuf::from(path);
            let (file, tail) = open_at_tail(path.clone()).await?;
            chain.continue_in(tail, chain.position());
            Sink {
                file,
                path: Some(path),
            }
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        let shared = Shared::new(options.on_failure, options.export.clone());
        let log = AuditLog {
            tx: Some(tx),
            shared: shared.clone(),
        };
        let writer = AuditWriter {
            rx,
            sink: Some(sink),
            shared,
            batch: Batch::default(),
            chain,
            outbox: Outbox::new(options.export),
            closing: false,
        };
        Ok((log, writer))
    }

    /// A log that discards every record.
    #[cfg(test)]
    pub(crate) fn disabled() -> AuditLog {
        AuditLog {
            tx: None,
            shared: Shared::new(OnFailure::Closed, None),
        }
    }

    /// How many lines the writer has written so far.
    pub(crate) fn lines_written(&self) -> u64 {
        self.shared.written.load(Ordering::Relaxed)
    }

    /// How many records could not be written (only with [`OnFailure::Open`]).
    pub(crate) fn lines_lost(&self) -> u64 {
        self.shared.lost.load(Ordering::Relaxed)
    }

    /// The last write failed and has not succeeded since.
    pub(crate) fn failing(&self) -> bool {
        self.shared.failing.load(Ordering::Relaxed)
    }

    /// Records cannot be written and the proxy fails closed: refuse every request.
    pub(crate) fn refusing(&self) -> bool {
        self.shared.on_failure == OnFailure::Closed && self.failing()
    }

    /// Queues `rec` for the writer, waiting while the queue is full. A record sent after
    /// the writer stopped is reported on the proxy's own log.
    pub(crate) async fn write(&self, rec: Record) {
        let Some(tx) = &self.tx else { return };
        if let Err(mpsc::error::SendError(rec)) = tx.send(Box::new(rec)).await {
            stopped(&rec);
        }
    }

    /// [`write`](Self::write) from code that cannot wait (a response body's end, a
    /// reload holding the session store's lock): queued at once when there is room, else
    /// by a task that waits for it. Never dropped.
    pub(crate) fn write_detached(&self, rec: Record) {
        let Some(tx) = &self.tx else { return };
        match tx.try_send(Box::new(rec)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(rec)) => {
                let tx = tx.clone();
                tokio::spawn(async move {
                    if let Err(mpsc::error::SendError(rec)) = tx.send(rec).await {
                        stopped(&rec);
                    }
                });
            }
            Err(mpsc::error::TrySendError::Closed(rec)) => stopped(&rec),
        }
    }

    /// Hand `rec`, which the log does not hold, to the OpenTelemetry export for its
    /// span alone (an allowed request without `--audit-allowed`); nothing without one.
    pub(crate) fn export_unwritten(&self, rec: Record) {
        if let Some(export) = &self.shared.export {
            export.offer_unwritten(rec);
        }
    }

    /// Every record the writer takes from now on, as it takes it; a receiver that falls
    /// [`super::live::LIVE_QUEUE`] records behind gets `Lagged`.
    pub(crate) fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<LiveRecord>> {
        self.shared.live.subscribe()
    }

    /// Asks the writer to open the file again at its path (log rotation): records
    /// already in hand go to the old file, later ones to the new.
    pub(crate) fn reopen(&self) {
        self.shared.reopen.notify_one();
    }

    /// Asks the writer to finish: it writes every record queued before this call (by any
    /// clone), fsyncs and returns, even while other clones are still alive.
    pub(crate) fn close(&self) {
        self.shared.close.notify_one();
    }
}

fn stopped(rec: &Record) {
    tracing::error!(
        event = rec.event,
        request_id = %rec.request_id,
        "audit writer has stopped; record not written"
    );
}

/// The task that owns the audit file. See the module docs for shutdown.
pub(crate) struct AuditWriter {
    rx: mpsc::Receiver<Box<Record>>,
    /// Taken while a blocking write has it.
    sink: Option<Sink>,
    shared: Arc<Shared>,
    batch: Batch,
    chain: Chain,
    /// The batch's records readers and the exporter wait for: handed on once the file
    /// holds them, never before.
    outbox: Outbox,
    closing: bool,
}

impl AuditWriter {
    /// Writes records until every [`AuditLog`] clone is dropped or one calls
    /// [`AuditLog::close`]; then writes everything still queued, fsyncs and returns the
    /// number of lines written. A batch is written whenever the queue is momentarily
    /// empty (and at least every [`MAX_BATCH`] records), so each record reaches the file
    /// well within a second. A failed write is tried again (see the module docs); only
    /// the final fsync's error is returned.
    pub(crate) async fn run(mut self) -> io::Result<u64> {
        let shared = self.shared.clone();
        let mut checkpoint_at = Instant::now() + CHECKPOINT_INTERVAL;
        loop {
            tokio::select! {
                biased;
                _ = shared.reopen.notified() => {
                    self.reopen().await;
                    continue;
                }
                _ = shared.close.notified(), if !self.closing => {
                    // Refuse new records; those already queued are still received.
                    self.closing = true;
                    self.rx.close();
                    continue;
                }
                rec = self.rx.recv() => match rec {
                    Some(rec) => self.take(rec),
                    None => break,
                },
                _ = tokio::time::sleep_until(checkpoint_at), if self.chain.signs() => {
                    checkpoint_at = Instant::now() + CHECKPOINT_INTERVAL;
                    if self.chain.unsigned() > 0 {
                        let line = self.batch.push_checkpoint(&mut self.chain);
                        self.outbox.note_checkpoint(line);
                    }
                }
            }
            while self.batch.lines < MAX_BATCH as u64 {
                match self.rx.try_recv() {
                    Ok(rec) => self.take(rec),
                    Err(_) => break,
                }
            }
            self.write_batch().await;
        }
        if self.chain.unsigned() > 0 {
            let line = self.batch.push_checkpoint(&mut self.chain);
            self.outbox.note_checkpoint(line);
        }
        self.write_batch().await;
        let sink = self
            .sink
            .take()
            .expect("the sink is back after every write");
        if sink.path.is_some() {
            tokio::task::spawn_blocking(move || sink.file.sync_all())
                .await
                .map_err(io::Error::other)??;
        }
        Ok(self.shared.written.load(Ordering::Relaxed))
    }

    /// Add `rec` to the batch and, when anyone listens or exports, note its line for
    /// handing on once it is written.
    fn take(&mut self, rec: Box<Record>) {
        if let Some(line) = self.batch.push(&rec, &mut self.chain) {
            self.outbox.note(&self.shared.live, rec, line);
        }
        if self.chain.checkpoint_due() {
            let line = self.batch.push_checkpoint(&mut self.chain);
            self.outbox.note_checkpoint(line);
        }
    }

    /// Hand on the noted lines that lie within the first `written` bytes of the batch
    /// (the file holds those), and forget the rest with the batch.
    fn publish_written(&mut self, written: usize) {
        self.outbox.hand_on(&self.shared.live, &self.batch, written);
    }

    /// Write the batch, trying again after a failure until it is written (or, with
    /// [`OnFailure::Open`], counting it lost).
    async fn write_batch(&mut self) {
        if self.batch.bytes.is_empty() {
            return;
        }
        let mut backoff = Duration::from_millis(10);
        loop {
            let error = match self.write_out().await {
                Ok(()) => break,
                Err(e) => e,
            };
            let shared = &self.shared;
            if !shared.failing.swap(true, Ordering::Relaxed) {
                match shared.on_failure {
                    OnFailure::Closed => {
                        tracing::error!(error = %error, "cannot write the audit log: refusing every request (503 audit_unavailable) until a write succeeds")
                    }
                    OnFailure::Open => {
                        tracing::error!(error = %error, "cannot write the audit log: records are lost (--audit-failure open)")
                    }
                }
            }
            if shared.on_failure == OnFailure::Open {
                let done = self.batch.complete_lines();
                shared.written.fetch_add(done, Ordering::Relaxed);
                let written = self.batch.written;
                self.publish_written(written);
                let shared = &self.shared;
                shared
                    .lost
                    .fetch_add(self.batch.lines - done, Ordering::Relaxed);
                self.batch.clear();
                return;
            }
            let shared = self.shared.clone();
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                // A rotation may be the way out (a new file elsewhere): take it now.
                _ = shared.reopen.notified() => self.reopen().await,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        self.shared
            .written
            .fetch_add(self.batch.lines, Ordering::Relaxed);
        self.publish_written(self.batch.bytes.len());
        self.batch.clear();
        if self.shared.failing.swap(false, Ordering::Relaxed) {
            tracing::info!("the audit log is writable again: serving");
        }
    }

    /// One try at writing the rest of the batch, on the blocking pool.
    async fn write_out(&mut self) -> io::Result<()> {
        let mut sink = self
            .sink
            .take()
            .expect("the sink is back after every write");
        let bytes = std::mem::take(&mut self.batch.bytes);
        let mut at = self.batch.written;
        let (sink, bytes, at, result) = tokio::task::spawn_blocking(move || {
            let result = write_from(&mut sink.file, &bytes, &mut at);
            (sink, bytes, at, result)
        })
        .await
        .expect("the audit write does not panic");
        self.sink = Some(sink);
        self.batch.bytes = bytes;
        self.batch.written = at;
        result
    }

    /// Open the path again (SIGUSR1). On failure the old file stays in use.
    async fn reopen(&mut self) {
        let Some(path) = self.sink.as_ref().and_then(|s| s.path.clone()) else {
            return;
        };
        match open_at_tail(path.clone()).await {
            Ok((file, tail)) => {
                let old = std::mem::replace(&mut self.sink.as_mut().expect("sink").file, file);
                let _ = tokio::task::spawn_blocking(move || old.sync_all()).await;
                // A line cut short in the old file is written whole to the new one.
                let at = self.batch.written;
                self.batch.written = self.batch.bytes[..at]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
                // The lines not yet written go on in the new file, from its last line
                // (or from seq 1, after the last line the old file holds).
                let before = self
                    .batch
                    .unwritten_position()
                    .unwrap_or(self.chain.position());
                self.chain.continue_in(tail, before);
                self.batch.reseal_unwritten(&mut self.chain);
                tracing::info!(path = %path.display(), "audit log reopened");
            }
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "cannot reopen the audit log; still writing to the old file")
            }
        }
    }
}
