//! The audit writer's own thread (docs/reference/audit-log.md, "The chain"): the
//! writer serialises each record, seals it with the chain's SHA-256 and writes the
//! file on a thread named `egress-audit`, with a runtime of its own (its blocking
//! writes on `egress-audit-io`), so neither the workers that serve connections nor the
//! control plane's thread pays for a line: a request only queues its record.

use std::io;

use tokio::sync::oneshot;

use super::writer::AuditWriter;

/// The writer's result (the lines it wrote, or the final fsync's error) once its thread
/// ends; an error of its own if the thread ended without one (a panic).
pub(crate) type WriterDone = oneshot::Receiver<io::Result<u64>>;

impl AuditWriter {
    /// Run [`AuditWriter::run`] on a thread of its own; await the returned receiver as
    /// its `JoinHandle` (see `super::writer`'s module docs for shutdown).
    pub(crate) fn start(self) -> io::Result<WriterDone> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("egress-audit-io")
            .build()?;
        let (done, result) = oneshot::channel();
        std::thread::Builder::new()
            .name("egress-audit".into())
            .spawn(move || {
                let _ = done.send(writer_thread(&runtime, self));
            })?;
        Ok(result)
    }
}

/// The thread's body, never inlined: `benches/instructions.sh` tells the writer's
/// thread from the others by this function's name in its profile.
#[inline(never)]
fn writer_thread(runtime: &tokio::runtime::Runtime, writer: AuditWriter) -> io::Result<u64> {
    runtime.block_on(writer.run())
}
