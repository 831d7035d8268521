//! `GET /v1/events` on the wire (docs/reference/control-plane.md, "Events"): records as
//! they are written, with their `event:` lines; the filters; a stuck reader dropped while
//! requests go on and the log keeps every record; the admin token.
//!
//! - `stuck`: the stuck reader under 1,000 requests.
//! - `watch`: `egress-proxy watch`, the binary reading the stream.

mod stuck;
mod watch;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::client::get_via_proxy;
use crate::support::http::Reader;
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};

const TOKEN: &str = "events-token";

/// How long an event may take to reach a reader.
const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

/// One reader of the stream: the response's head, then its chunked body decoded into
/// events.
pub(crate) struct Events {
    reader: Reader<TcpStream>,
    /// Decoded body bytes not yet split into events.
    text: String,
}

/// One event: its `event:` line and its `data:` parsed.
#[derive(Debug)]
pub(crate) struct Event {
    pub name: String,
    pub data: Value,
}

/// `GET /v1/events?query` with the token, written on `stream`.
pub(crate) async fn request(stream: &mut TcpStream, admin: SocketAddr, query: &str, token: &str) {
    let req = format!(
        "GET /v1/events{query} HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    stream.write_all(req.as_bytes()).await.unwrap();
}

impl Events {
    /// Open a stream on `proxy`'s admin listener; panics unless it answers 200 with
    /// `text/event-stream`.
    pub(crate) async fn open(proxy: &Proxy, query: &str) -> Events {
        let admin = proxy.admin().addr;
        let mut stream = TcpStream::connect(admin).await.unwrap();
        request(&mut stream, admin, query, TOKEN).await;
        let mut reader = Reader::new(stream);
        let head = tokio::time::timeout(EVENT_TIMEOUT, reader.read_head())
            .await
            .expect("the stream's head in time")
            .unwrap()
            .expect("a head");
        assert!(head.start_line.contains(" 200 "), "{head:?}");
        assert_eq!(head.header("content-type"), Some("text/event-stream"));
        assert_eq!(head.header("transfer-encoding"), Some("chunked"));
        let mut events = Events {
            reader,
            text: String::new(),
        };
        // The stream opens with a comment: once it is here, the reader is subscribed.
        let first = events.next_block().await.expect("the opening comment");
        assert!(first.starts_with(':'), "{first:?}");
        events
    }

    /// The next chunk of the body, decoded; `None` at its end.
    async fn chunk(&mut self) -> Option<String> {
        let line = self.line().await?;
        let size = usize::from_str_radix(line.trim(), 16).expect("a chunk size");
        if size == 0 {
            return None;
        }
        while self.reader.buf.len() < size + 2 {
            self.fill().await?;
        }
        let data: Vec<u8> = self.reader.buf.drain(..size + 2).take(size).collect();
        Some(String::from_utf8(data).expect("UTF-8 events"))
    }

    async fn line(&mut self) -> Option<String> {
        loop {
            if let Some(i) = crate::support::find(&self.reader.buf, b"\r\n") {
                let line: Vec<u8> = self.reader.buf.drain(..i + 2).take(i).collect();
                return Some(String::from_utf8(line).unwrap());
            }
            self.fill().await?;
        }
    }

    async fn fill(&mut self) -> Option<()> {
        let mut buf = [0u8; 8192];
        match self.reader.inner.read(&mut buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => {
                self.reader.buf.extend_from_slice(&buf[..n]);
                Some(())
            }
        }
    }

    /// The next block (up to a blank line), comments included; `None` at the end.
    async fn next_block(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.text.find("\n\n") {
                let block = self.text[..i].to_string();
                self.text.drain(..i + 2);
                return Some(block);
            }
            let chunk = tokio::time::timeout(EVENT_TIMEOUT, self.chunk())
                .await
                .expect("an event in time")?;
            self.text.push_str(&chunk);
        }
    }

    /// The next event, comments skipped.
    pub(crate) async fn next(&mut self) -> Event {
        for _ in 0..100 {
            let block = self.next_block().await.expect("the stream goes on");
            if block.starts_with(':') {
                continue;
            }
            let mut lines = block.lines();
            let name = lines.next().and_then(|l| l.strip_prefix("event: "));
            let data = lines.next().and_then(|l| l.strip_prefix("data: "));
            let (Some(name), Some(data), None) = (name, data, lines.next()) else {
                panic!("not an event: {block:?}");
            };
            let data: Value = serde_json::from_str(data).expect("data is a JSON line");
            return Event {
                name: name.to_string(),
                data,
            };
        }
        panic!("only comments on the stream");
    }
}

/// A proxy for `allowed.test` (at `origin`) with allowed records on and an admin API.
async fn proxy(origin: &Origin) -> Proxy {
    ProxyBuilder::standard(origin.port())
        .audit_allowed()
        .admin(TOKEN)
        .start()
        .await
}

fn url(host: &str, origin: &Origin) -> String {
    format!("http://{host}:{}/", origin.port())
}

#[tokio::test]
async fn a_reader_sees_denied_and_allowed_records_as_they_are_written() {
    let origin = Origin::start().await;
    let proxy = proxy(&origin).await;
    let mut events = Events::open(&proxy, "").await;
    let resp = get_via_proxy(proxy.addr, &url("evil.test", &origin), &[]).await;
    assert_eq!(resp.status, 403);
    let denied = events.next().await;
    assert_eq!(denied.name, "egress.denied");
    assert_eq!(denied.data["event"], "egress.denied");
    assert_eq!(denied.data["host"], "evil.test");
    assert_eq!(denied.data["reason"], "not_in_org_allowlist");
    assert_eq!(
        denied.data["request_id"].as_str(),
        resp.json()["error"]["request_id"].as_str()
    );
    let resp = get_via_proxy(proxy.addr, &url("allowed.test", &origin), &[]).await;
    assert_eq!(resp.status, 200);
    let allowed = events.next().await;
    assert_eq!(allowed.name, "egress.allowed");
    assert_eq!(allowed.data["host"], "allowed.test");
    // The same lines as the file's.
    let lines = proxy.expect_audit_count(2).await;
    assert_eq!(lines, vec![denied.data, allowed.data]);
}

#[tokio::test]
async fn the_filters_match_the_records_fields_exactly() {
    let origin = Origin::start().await;
    let proxy = proxy(&origin).await;
    let policy = json!({"type": "allowlist", "allowed_domains": ["allowed.test"]});
    let session = proxy.admin().create_session(&policy, None).await;
    let mut denied = Events::open(&proxy, "?event=egress.denied").await;
    let mut in_session = Events::open(&proxy, &format!("?session={}", session.id)).await;
    let auth = session.proxy_auth();
    let with_session = [("Proxy-Authorization", auth.as_str())];
    // Allowed without a session, denied without, then denied in the session.
    get_via_proxy(proxy.addr, &url("allowed.test", &origin), &[]).await;
    get_via_proxy(proxy.addr, &url("evil.test", &origin), &[]).await;
    get_via_proxy(proxy.addr, &url("other.test", &origin), &with_session).await;
    let first = denied.next().await;
    assert_eq!(
        (first.name.as_str(), &first.data["host"]),
        ("egress.denied", &json!("evil.test"))
    );
    assert!(first.data["session"].is_null());
    let second = denied.next().await;
    assert_eq!(second.data["host"], "other.test");
    assert_eq!(second.data["session"], session.id.as_str());
    let only = in_session.next().await;
    assert_eq!(only.name, "egress.denied");
    assert_eq!(only.data["host"], "other.test");
    assert_eq!(only.data["session"], session.id.as_str());
    // An allowed request in the session comes to its reader; not to the denied one.
    get_via_proxy(proxy.addr, &url("allowed.test", &origin), &with_session).await;
    let allowed = in_session.next().await;
    assert_eq!(allowed.name, "egress.allowed");
    get_via_proxy(proxy.addr, &url("evil2.test", &origin), &[]).await;
    assert_eq!(denied.next().await.data["host"], "evil2.test");
}

#[tokio::test]
async fn the_stream_needs_the_admin_token_and_a_known_filter() {
    let origin = Origin::start().await;
    let proxy = proxy(&origin).await;
    let admin = proxy.admin();
    let resp = admin.call_as("GET", "/v1/events", None, None).await;
    assert_eq!(resp.status, 401, "{resp:?}");
    assert_eq!(resp.header("www-authenticate"), Some("Bearer"));
    let wrong = admin
        .call_as("GET", "/v1/events", None, Some("Bearer not-the-token"))
        .await;
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let unknown = admin.call("GET", "/v1/events?host=evil.test", None).await;
    assert_eq!(unknown.status, 400, "{unknown:?}");
    assert_eq!(unknown.json()["error"]["type"], "invalid_query");
    let post = admin.call("POST", "/v1/events", None).await;
    assert_eq!(post.status, 405, "{post:?}");
}

/// Wait (bounded) until `pred` holds.
async fn eventually(what: &str, limit: Duration, pred: impl Fn() -> bool) {
    let started = Instant::now();
    while !pred() {
        assert!(started.elapsed() < limit, "{what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
