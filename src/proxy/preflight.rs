//! A look at the first request head of a connection before hyper reads it.
//!
//! hyper answers a request it cannot parse with a bare `400`/`431` of its own, without the
//! `X-Egress-Denied` header and JSON body every refusal must carry. So the first head is
//! read here with `peek` (nothing is consumed) and anything hyper would refuse, or that
//! we refuse before judging (an unreadable host, ambiguous framing), is answered by us.
//! Later requests on a kept-alive connection that hyper cannot parse still get hyper's
//! bare answer; they are audited all the same (see `serve_connection`).

use std::time::Duration;

use hyper::Uri;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::judgement::refusal::Refusal;
use crate::judgement::request::split_host_port;
use crate::policy::{Host, Reason};

/// The most headers a request may carry (hyper's own default limit).
const MAX_HEADERS: usize = 100;

/// What the first look found.
pub(crate) enum Preflight {
    /// A head that hyper will read: hand the connection over.
    Ready,
    /// The client closed or sent nothing in time: close without an answer.
    Gone,
    /// No complete head within the header timeout (a slow or idle client): close.
    TimedOut,
    /// Refuse (400, or 431 for a head too large) and close.
    Refuse(Refusal),
}

/// The first peek's size: a typical request head fits, and a connection does not pay for
/// zeroing `max` bytes (64 KiB by default) it almost never uses.
const FIRST_PEEK: usize = 4096;

/// Wait (up to `timeout`) for a complete first request head of at most `max` bytes.
pub(crate) async fn first_head(stream: &TcpStream, max: usize, timeout: Duration) -> Preflight {
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; FIRST_PEEK.min(max)];
    let mut backoff = Duration::from_millis(1);
    loop {
        match tokio::time::timeout_at(deadline, stream.readable()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Preflight::Gone,
            Err(_) => return Preflight::TimedOut,
        }
        // Readiness can be reported before any byte has come (a fresh socket's first
        // wake-up), and `peek` then waits for data: the deadline bounds that wait too, so
        // a client that connects and sends nothing is closed like a slow one.
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Err(_) => return Preflight::TimedOut,
            Ok(Ok(0) | Err(_)) => return Preflight::Gone,
            Ok(Ok(n)) => n,
        };
        match check(&buf[..n]) {
            Some(found) => return found,
            None if n == max => {
                let refusal =
                    Refusal::head_too_large(format!("request head larger than {max} bytes"));
                return Preflight::Refuse(refusal);
            }
            // The buffer is full but the head goes on: look again with a larger one.
            None if n == buf.len() => buf.resize((buf.len() * 4).min(max), 0),
            None => {
                // Partial head: the bytes stay unread, so readiness stays set; wait a
                // little before looking again rather than spinning. A client that has
                // closed is gone now, not at the deadline: until then it would hold one
                // of its --max-pending-per-client slots.
                if read_closed(stream).await {
                    return Preflight::Gone;
                }
                if Instant::now() + backoff > deadline {
                    return Preflight::TimedOut;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(50));
            }
        }
    }
}

/// Whether the client has closed its side (readiness already seen, without waiting).
async fn read_closed(stream: &TcpStream) -> bool {
    let ready = tokio::time::timeout(Duration::ZERO, stream.ready(Interest::READABLE)).await;
    matches!(ready, Ok(Ok(r)) if r.is_read_closed())
}

/// Judge the bytes seen so far: `None` while the head is incomplete. Pure (fuzzed).
pub(crate) fn check(bytes: &[u8]) -> Option<Preflight> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(bytes) {
        Ok(httparse::Status::Partial) => None,
        Ok(httparse::Status::Complete(_)) => Some(check_head(&req)),
        Err(httparse::Error::TooManyHeaders) => Some(Preflight::Refuse(Refusal::head_too_large(
            format!("more than {MAX_HEADERS} headers"),
        ))),
        Err(e) => Some(Preflight::Refuse(Refusal::malformed(format!(
            "not an HTTP/1.1 request: {e}"
        )))),
    }
}

fn check_head(req: &httparse::Request) -> Preflight {
    let refuse = |detail: String| Preflight::Refuse(Refusal::malformed(detail));
    let (Some(method), Some(path)) = (req.method, req.path) else {
        return refuse("incomplete request line".into());
    };
    if hyper::Method::from_bytes(method.as_bytes()).is_err() {
        return refuse(format!("invalid method `{method}`"));
    }
    let authority = target_authority(method, path);
    if authority.is_some_and(|a| a.contains('@')) {
        return refuse("userinfo in the request target is refused".into());
    }
    if Uri::try_from(path).is_err() {
        // The host is judged again, fully, after hyper has read the request; here it
        // only names the problem better than "not a URI" when it is the cause.
        let refusal = authority
            .and_then(unreadable_host)
            .unwrap_or_else(|| Refusal::malformed("the request target is not a valid URI"));
        return Preflight::Refuse(refusal);
    }
    let named = |name: &'static str| {
        req.headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
    };
    let mut lengths = named("content-length").map(|h| h.value);
    let first_length = lengths.next();
    if first_length.is_some_and(|first| lengths.any(|other| other != first)) {
        return refuse("conflicting Content-Length headers".into());
    }
    if first_length.is_some() && named("transfer-encoding").next().is_some() {
        return refuse("both Content-Length and Transfer-Encoding".into());
    }
    Preflight::Ready
}

/// The authority of an absolute-form or `CONNECT` target, as written.
fn target_authority<'a>(method: &str, path: &'a str) -> Option<&'a str> {
    if method == "CONNECT" {
        return Some(path);
    }
    let rest = path.split_once("://")?.1;
    Some(&rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())])
}

/// `invalid_host` when the authority's host does not survive normalisation: it names
/// the problem better than hyper's URI error.
fn unreadable_host(authority: &str) -> Option<Refusal> {
    let (host, port) = split_host_port(authority)?;
    let err = Host::parse(host).err()?;
    Some(
        Refusal::new(Reason::InvalidHost, host.to_string(), port.unwrap_or(0))
            .with_detail(format!("invalid host: {err}")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::answer::status;

    fn verdict(bytes: &str) -> Option<(u16, &'static str)> {
        match check(bytes.as_bytes()) {
            None => None,
            Some(Preflight::Ready) => Some((0, "ready")),
            Some(Preflight::Gone) => Some((0, "gone")),
            Some(Preflight::TimedOut) => Some((0, "timed out")),
            Some(Preflight::Refuse(r)) => Some((status(&r).as_u16(), r.reason.as_str())),
        }
    }

    #[test]
    fn first_head_cases() {
        let cases: &[(&str, Option<(u16, &str)>)] = &[
            ("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", Some((0, "ready"))),
            ("CONNECT a.test:443 HTTP/1.1\r\n\r\n", Some((0, "ready"))),
            ("GET http://a.test/ HTTP/1.1\r\nHost: a", None),
            ("\x16\x03\x01\x02\x00garbage\r\n\r\n", Some((400, "invalid_request"))),
            ("GET http://bad%41.test/ HTTP/1.1\r\n\r\n", Some((400, "invalid_host"))),
            ("CONNECT bad%41.test:443 HTTP/1.1\r\n\r\n", Some((400, "invalid_host"))),
            ("GET http://u@a.test/ HTTP/1.1\r\n\r\n", Some((400, "invalid_request"))),
            (
                "POST http://a.test/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                Some((400, "invalid_request")),
            ),
            (
                "POST http://a.test/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                Some((400, "invalid_request")),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(verdict(input), *want, "{input:?}");
        }
    }
}
