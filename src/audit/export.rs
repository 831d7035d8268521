//! Audit records as they are written, for the OpenTelemetry export
//! (docs/reference/opentelemetry.md).
//!
//! The writer offers each line once the file holds it, with the record it was made
//! from, to a bounded queue the exporter drains. It never waits: when the queue is full
//! (a collector that is slow or down), the line is not exported and the drop is counted,
//! so the export never slows requests or the audit log.

use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

use super::batch::Batch;
use super::live::Live;
use super::Record;

/// Records the export queue holds before new ones are dropped.
pub(crate) const EXPORT_QUEUE: usize = 10_000;

/// One line of the audit log as written, and the record it was made from (`None` for an
/// `audit.checkpoint`); or a record for its span alone, which the log does not hold (an
/// allowed request without `--audit-allowed`).
#[derive(Debug)]
pub(crate) struct Written {
    pub record: Option<Box<Record>>,
    /// The line, without its newline; `None` for a record that was not written.
    pub line: Option<Bytes>,
}

/// The sending side, given to the writer in its options.
#[derive(Clone, Debug)]
pub(crate) struct ExportQueue {
    tx: mpsc::Sender<Written>,
    /// Records that found the queue full: `egress_otlp_dropped_total{signal="logs"}`.
    dropped: Counter,
}

impl ExportQueue {
    /// A queue of [`EXPORT_QUEUE`] records, counting what it drops in `dropped`; the
    /// receiver is the exporter's.
    pub(crate) fn new(dropped: Counter) -> (ExportQueue, mpsc::Receiver<Written>) {
        let (tx, rx) = mpsc::channel(EXPORT_QUEUE);
        (ExportQueue { tx, dropped }, rx)
    }

    /// Offer `line` (a whole line, with its newline, as the batch holds it).
    fn offer(&self, record: Option<Box<Record>>, line: &[u8]) {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let written = Written {
            record,
            line: Some(Bytes::copy_from_slice(line)),
        };
        if self.tx.try_send(written).is_err() {
            self.dropped.inc();
        }
    }

    /// Offer `record`, which is not written, for its span alone; dropped uncounted when
    /// the queue is full (no log is lost).
    pub(super) fn offer_unwritten(&self, record: Record) {
        let written = Written {
            record: Some(Box::new(record)),
            line: None,
        };
        let _ = self.tx.try_send(written);
    }
}

/// The lines of the batch in hand that readers of `GET /v1/events` (`super::live`) and
/// the exporter wait for, handed on once the file holds them.
pub(super) struct Outbox {
    export: Option<ExportQueue>,
    /// For readers: `event`, `session`, the line's index in the batch.
    unpublished: Vec<(&'static str, Option<String>, usize)>,
    /// For the exporter: the record (none for a checkpoint) and the line's index.
    unexported: Vec<(Option<Box<Record>>, usize)>,
}

impl Outbox {
    pub(super) fn new(export: Option<ExportQueue>) -> Outbox {
        Outbox {
            export,
            unpublished: Vec::new(),
            unexported: Vec::new(),
        }
    }

    /// Note `rec`, at index `line` of the batch, if anyone waits for it.
    pub(super) fn note(&mut self, live: &Live, rec: Box<Record>, line: usize) {
        if live.listened() {
            self.unpublished
                .push((rec.event, rec.session.clone(), line));
        }
        if self.export.is_some() {
            self.unexported.push((Some(rec), line));
        }
    }

    /// Note the checkpoint at index `line` of the batch, for the exporter.
    pub(super) fn note_checkpoint(&mut self, line: usize) {
        if self.export.is_some() {
            self.unexported.push((None, line));
        }
    }

    /// Hand on the noted lines that lie within the first `written` bytes of `batch`,
    /// and forget the rest (they were lost with their batch).
    pub(super) fn hand_on(&mut self, live: &Live, batch: &Batch, written: usize) {
        for (event, session, line) in self.unpublished.drain(..) {
            let range = batch.line(line);
            if range.end <= written {
                live.publish(event, session, &batch.bytes[range]);
            }
        }
        let Some(export) = &self.export else { return };
        for (record, line) in self.unexported.drain(..) {
            let range = batch.line(line);
            if range.end <= written {
                export.offer(record, &batch.bytes[range]);
            }
        }
    }
}
