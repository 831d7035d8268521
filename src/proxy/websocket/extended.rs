//! WebSocket over HTTP/2, by RFC 8441's extended `CONNECT` (docs/reference/inspection.md,
//! "WebSocket over HTTP/2"). A stream with `:method CONNECT` and `:protocol websocket`
//! is made the HTTP/1.1 handshake it stands for before it is judged: a `GET` of its
//! `:path` with `Upgrade: websocket`. So it is judged by the same code as every request
//! inside (its method `GET`, its normalised path, the budget), exactly as an HTTP/1.1
//! client's handshake to the same URL would be, and forwarded as one by
//! [`super::forward`]: upstream is sent the HTTP/1.1 handshake, with a key of the
//! proxy's own and the client's other headers (`Sec-WebSocket-Protocol`,
//! `Sec-WebSocket-Extensions`, ...) as they came. Upstream's `101`, checked against that
//! key, is the client's `200` on its stream; then the stream's bytes are relayed as an
//! HTTP/1.1 WebSocket's are.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hyper::ext::Protocol;
use hyper::header::{
    HeaderValue, CONNECTION, CONTENT_LENGTH, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY,
    SEC_WEBSOCKET_VERSION, UPGRADE,
};
use hyper::http::response;
use hyper::{Method, Request, Response, StatusCode};
use sha1::{Digest, Sha1};

use crate::judgement::refusal::Failure;
use crate::policy::Target;

/// RFC 6455 4.2.2's GUID, appended to the key for the accept value.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// The `Sec-WebSocket-Key` the proxy sent upstream for an extended `CONNECT`: left on the
/// handshake by [`as_handshake`] for `forward`, which checks upstream's answer against it
/// and answers the client over h2.
#[derive(Debug, Clone)]
pub(crate) struct SentKey(HeaderValue);

/// The HTTP/1.1 WebSocket handshake an extended `CONNECT` for `websocket` stands for;
/// every other request as it came. Another `:protocol`, or none, stays a `CONNECT`, which
/// the judgement refuses (`crate::judgement::request::inner_target`).
pub(crate) fn as_handshake<B>(mut req: Request<B>) -> Request<B> {
    if req.method() != Method::CONNECT {
        return req;
    }
    let websocket = req
        .extensions()
        .get::<Protocol>()
        .is_some_and(|p| p.as_str().eq_ignore_ascii_case("websocket"));
    if !websocket {
        return req;
    }
    req.extensions_mut().remove::<Protocol>();
    *req.method_mut() = Method::GET;
    let key = fresh_key();
    let headers = req.headers_mut();
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    // RFC 8441 5: the key and the accept value are not used over h2; upstream's
    // handshake needs them, so they are the proxy's.
    headers.insert(SEC_WEBSOCKET_KEY, key.clone());
    headers.insert(SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
    headers.remove(SEC_WEBSOCKET_ACCEPT);
    req.extensions_mut().insert(SentKey(key));
    req
}

/// Whether upstream's answer opened the WebSocket asked for with `key`: a `101` with the
/// one `Sec-WebSocket-Accept` that answers the key. Why not, if not.
pub(crate) fn opened<B>(resp: &Response<B>, key: &SentKey) -> Result<(), String> {
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Err(format!("answered {} instead of switching", resp.status()));
    }
    let mut values = resp.headers().get_all(SEC_WEBSOCKET_ACCEPT).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err("switched without one Sec-WebSocket-Accept".into());
    };
    if value.as_bytes() != accept_for(key.0.as_bytes()).as_bytes() {
        return Err("switched with a Sec-WebSocket-Accept that does not answer the key".into());
    }
    Ok(())
}

/// Upstream's `101` head, made the client's `200` on its stream (RFC 8441 5): the
/// hop-by-hop headers are already gone; the accept value, which the client never asked
/// for, and any length (a successful `CONNECT` has no body) go too.
pub(crate) fn switched_to_ok(head: &mut response::Parts) {
    head.status = StatusCode::OK;
    head.headers.remove(SEC_WEBSOCKET_ACCEPT);
    head.headers.remove(CONTENT_LENGTH);
}

/// The failure answered to an extended `CONNECT` whose upstream did not open the
/// WebSocket, for `why`: a 502, as for any upstream that breaks the exchange. (Only a
/// `2xx` would open the stream, and only a `101` opens the WebSocket: an answer that is
/// neither is passed on as it is.)
pub(crate) fn not_opened(target: &Target, why: &str) -> Failure {
    let target = target.host.authority(target.port);
    Failure {
        status: 502,
        message: format!("upstream {target} did not open the WebSocket: it {why}"),
        detail: None,
    }
}

/// RFC 6455 4.2.2: the base64 of the SHA-1 of the key and the GUID.
fn accept_for(key: &[u8]) -> String {
    let mut sha = Sha1::new();
    sha.update(key);
    sha.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// A new key: 16 random bytes in base64 (RFC 6455 4.1). It must be new for each
/// handshake, not secret; should the system's random source fail, the time and a
/// process-wide counter make it new.
fn fresh_key() -> HeaderValue {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut nonce = [0u8; 16];
    if getrandom::fill(&mut nonce).is_err() {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        nonce[..8].copy_from_slice(&nanos.to_be_bytes());
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        nonce[8..].copy_from_slice(&n.to_be_bytes());
    }
    let text = base64::engine::general_purpose::STANDARD.encode(nonce);
    HeaderValue::from_str(&text).expect("base64 is a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, accept: &[&str]) -> Response<()> {
        let mut resp = Response::builder().status(status);
        for value in accept {
            resp = resp.header(SEC_WEBSOCKET_ACCEPT, *value);
        }
        resp.body(()).unwrap()
    }

    #[test]
    fn accept_for_the_rfc_6455_example_key() {
        assert_eq!(
            accept_for(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn an_extended_connect_for_websocket_is_the_handshake_it_stands_for() {
        let mut req = Request::connect("https://secure.test/chat?x=1")
            .header(SEC_WEBSOCKET_KEY, "the client's")
            .header("sec-websocket-protocol", "chat")
            .body(())
            .unwrap();
        req.extensions_mut().insert(Protocol::from("websocket"));
        let req = as_handshake(req);
        assert_eq!(req.method(), Method::GET);
        assert_eq!(req.uri(), "https://secure.test/chat?x=1");
        let h = req.headers();
        assert_eq!(h[UPGRADE], "websocket");
        assert_eq!(h[CONNECTION], "upgrade");
        assert_eq!(h[SEC_WEBSOCKET_VERSION], "13");
        assert_eq!(h["sec-websocket-protocol"], "chat");
        let key = req.extensions().get::<SentKey>().expect("the key is kept");
        assert_eq!(
            h[SEC_WEBSOCKET_KEY], key.0,
            "the proxy's key, not the client's"
        );
        assert_eq!(key.0.len(), 24, "16 bytes in base64");
        assert!(req.extensions().get::<Protocol>().is_none());
    }

    #[test]
    fn each_handshake_gets_a_new_key() {
        assert_ne!(fresh_key(), fresh_key());
    }

    #[test]
    fn other_protocols_and_plain_connect_stay_connect() {
        let mut other = Request::connect("https://secure.test/").body(()).unwrap();
        other.extensions_mut().insert(Protocol::from("connect-udp"));
        assert_eq!(as_handshake(other).method(), Method::CONNECT);
        let plain = Request::connect("secure.test:443").body(()).unwrap();
        assert_eq!(as_handshake(plain).method(), Method::CONNECT);
        let get = Request::get("https://secure.test/").body(()).unwrap();
        let get = as_handshake(get);
        assert!(get.headers().is_empty() && get.extensions().get::<SentKey>().is_none());
    }

    #[test]
    fn only_a_101_that_answers_the_key_opens_the_websocket() {
        let key = SentKey(HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="));
        let right = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";
        assert_eq!(opened(&answer(101, &[right]), &key), Ok(()));
        assert!(opened(&answer(101, &["wrong"]), &key).is_err());
        assert!(opened(&answer(101, &[]), &key).is_err());
        assert!(opened(&answer(101, &[right, right]), &key).is_err());
        assert!(opened(&answer(200, &[right]), &key).is_err());
    }

    #[test]
    fn the_switch_is_a_200_without_the_accept_value() {
        let (mut parts, ()) = answer(101, &["s3pPLMBiTxaQ9kYGzzhZRbK+xOo="]).into_parts();
        parts
            .headers
            .insert("sec-websocket-protocol", HeaderValue::from_static("chat"));
        switched_to_ok(&mut parts);
        assert_eq!(parts.status, StatusCode::OK);
        assert!(!parts.headers.contains_key(SEC_WEBSOCKET_ACCEPT));
        assert_eq!(parts.headers["sec-websocket-protocol"], "chat");
    }
}
