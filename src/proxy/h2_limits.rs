//! The HTTP/2 server's limits inside intercepted tunnels, set deliberately rather than
//! left to hyper's defaults, each against one way a hostile client could keep the proxy
//! busy (docs/reference/inspection.md, "HTTP/2").

use std::time::Duration;

use hyper::server::conn::http2::Builder;
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// Streams one connection may have open at once; more are refused by the protocol
/// (`REFUSED_STREAM`), each a request the client may send again.
pub(crate) const MAX_STREAMS: u32 = 100;

/// Streams a client may reset before the proxy has accepted them, at once (rapid reset,
/// CVE-2023-44487): past it the connection is closed with `ENHANCE_YOUR_CALM`.
pub(crate) const MAX_PENDING_RESETS: usize = 20;

/// Streams the proxy may have to reset because the client broke the protocol on them,
/// over the connection's life: past it the connection is closed.
pub(crate) const MAX_ERROR_RESETS: usize = 256;

/// The most response bytes buffered per stream for a client that does not read.
pub(crate) const MAX_SEND_BUFFER: usize = 256 * 1024;

/// A ping every so often, and a connection whose client does not answer one within
/// [`KEEP_ALIVE_TIMEOUT`] closed: a dead client's streams do not hold their tasks.
pub(crate) const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub(crate) const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Set every limit on `builder`. A header list (HEADERS and its CONTINUATIONs,
/// decoded) over `max_header_bytes` (`--max-header-bytes`) ends the stream with 431
/// before it is judged, so a CONTINUATION flood is read no further than that.
pub(crate) fn apply(builder: &mut Builder<TokioExecutor>, max_header_bytes: usize) {
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(u32::try_from(max_header_bytes).unwrap_or(u32::MAX))
        .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
        .max_local_error_reset_streams(MAX_ERROR_RESETS)
        .max_send_buf_size(MAX_SEND_BUFFER)
        .keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT);
}
