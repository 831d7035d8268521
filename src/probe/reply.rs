//! What comes back over TCP: a reply read within the deadline, and this proxy's own
//! refusal told from a peer's answer (docs/reference/probe.md). Shared by the direct TCP
//! checks and the web checks.

use std::io;

use tokio::io::AsyncReadExt;
use tokio::time::{timeout_at, Instant};

/// The most read back: enough for a status line and headers.
const MAX_REPLY: usize = 4096;

/// Read until the peer closes, a whole HTTP head or anything else arrives, or
/// `deadline` (a `TimedOut` error).
pub(super) async fn read_reply(
    stream: &mut (impl AsyncReadExt + Unpin),
    reply: &mut Vec<u8>,
    deadline: Instant,
) -> io::Result<()> {
    let mut buf = [0u8; 1024];
    loop {
        let n = match timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
            Ok(r) => r?,
        };
        if n == 0 {
            return Ok(());
        }
        reply.extend_from_slice(&buf[..n]);
        let http = reply.starts_with(b"HTTP/") || b"HTTP/".starts_with(reply);
        let head_done = reply.windows(4).any(|w| w == b"\r\n\r\n");
        if !http || head_done || reply.len() >= MAX_REPLY {
            return Ok(());
        }
    }
}

/// This proxy's refusal in an HTTP answer: its status and `X-Egress-Denied` reason.
pub(super) fn refusal(reply: &[u8]) -> Option<String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    response.parse(reply).ok()?;
    let reason = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("x-egress-denied"))?;
    Some(format!(
        "{} {}",
        response.code.unwrap_or(0),
        String::from_utf8_lossy(reason.value)
    ))
}

/// The first line of a reply if it is text, else its first bytes in hex.
pub(super) fn first_line(reply: &[u8]) -> String {
    let line = reply
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(&[]);
    if !line.is_empty() && line.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        return String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
    }
    let hex: String = reply.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("starting {hex}")
}
