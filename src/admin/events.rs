//! `GET /v1/events`: audit records as Server-Sent Events, as the writer takes them
//! (docs/reference/control-plane.md, "Events").
//!
//! Each reader has a task of its own between the audit log's broadcast and its HTTP
//! body, with a small queue to the body. Only that task ever waits on a reader: a reader
//! whose queue stays full, or who fell behind the broadcast (`Lagged`), is dropped, its
//! connection closed through its [`Closer`], so a slow or stuck reader never holds
//! anything else back. The log itself is written whatever readers do.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{broadcast, mpsc, Notify};

use super::{error, Admin, Body};
use crate::audit::LiveRecord;

/// A comment line every so often, so that intermediaries keep an idle stream open.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// Frames queued for one reader's body, beyond what its socket holds.
const READER_QUEUE: usize = 256;

/// How long a reader whose queue is full may take to make room before it is dropped.
/// A burst of records fills a queue faster than the connection drains it; a reader
/// that reads nothing for this long is stuck. Meanwhile the broadcast keeps its place
/// for `audit::live::LIVE_QUEUE` records, past which it is dropped too.
const STUCK: Duration = Duration::from_secs(5);

/// Closes the admin connection it was made for: how a dropped reader's connection ends
/// even while its socket accepts no more bytes (hyper would wait on it forever).
pub(crate) type Closer = Arc<Notify>;

/// What a reader asked for: records whose fields match exactly.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Filter {
    session: Option<String>,
    /// One event name, or several separated by commas.
    event: Option<String>,
}

impl Filter {
    /// `session=ID` and `event=NAME` (or `event=NAME,NAME`), each at most once; anything
    /// else is refused, as is an empty event name.
    pub(super) fn parse(query: Option<&str>) -> Result<Filter, String> {
        let mut filter = Filter::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value)?;
            let slot = match key {
                "session" => &mut filter.session,
                "event" => &mut filter.event,
                other => return Err(format!("unknown parameter `{other}`")),
            };
            if slot.replace(value).is_some() {
                return Err(format!("`{key}` given twice"));
            }
        }
        if let Some(events) = &filter.event {
            if events.split(',').any(str::is_empty) {
                return Err(format!("an empty event name in `{events}`"));
            }
        }
        Ok(filter)
    }

    fn matches(&self, rec: &LiveRecord) -> bool {
        self.event
            .as_deref()
            .is_none_or(|events| events.split(',').any(|e| e == rec.event))
            && self
                .session
                .as_deref()
                .is_none_or(|s| rec.session.as_deref() == Some(s))
    }
}

/// A query value: `+` is a space, then `%XX` escapes (`crate::net::percent_decode`).
fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = crate::net::percent_decode(&text.replace('+', " "))
        .ok_or_else(|| format!("bad percent-encoding in `{text}`"))?;
    String::from_utf8(bytes).map_err(|_| format!("`{text}` is not UTF-8"))
}

/// The answer to `GET /v1/events?QUERY`: the stream, or 400 for a query it cannot read.
pub(super) fn stream(admin: &Admin, query: Option<&str>, closer: &Closer) -> Response<Body> {
    let filter = match Filter::parse(query) {
        Ok(filter) => filter,
        Err(why) => return error(StatusCode::BAD_REQUEST, "invalid_query", &why),
    };
    let records = admin.state.audit.subscribe();
    let (tx, rx) = mpsc::channel(READER_QUEUE);
    tokio::spawn(feed(records, filter, tx, closer.clone()));
    let mut resp = Response::new(Frames(rx).boxed());
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// One SSE event: `event: NAME`, `data: LINE`, a blank line.
fn frame(rec: &LiveRecord) -> Bytes {
    let mut out = Vec::with_capacity(rec.line.len() + rec.event.len() + 16);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(rec.event.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(&rec.line);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// Move matching records to the reader's body until the reader goes away, is stuck or
/// lags; then close its connection.
async fn feed(
    mut records: broadcast::Receiver<Arc<LiveRecord>>,
    filter: Filter,
    tx: mpsc::Sender<Bytes>,
    closer: Closer,
) {
    let mut heartbeat =
        tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
    // A comment first, so the reader knows at once that the stream is open.
    let mut next = Some(Bytes::from_static(b": stream open\n\n"));
    loop {
        if let Some(bytes) = next.take() {
            let sent = match tx.try_send(bytes) {
                Ok(()) => true,
                Err(TrySendError::Full(bytes)) => {
                    matches!(
                        tokio::time::timeout(STUCK, tx.send(bytes)).await,
                        Ok(Ok(()))
                    )
                }
                Err(TrySendError::Closed(_)) => false,
            };
            if !sent {
                tracing::info!("an event reader stopped reading or went away: dropped");
                break;
            }
        }
        tokio::select! {
            got = records.recv() => match got {
                Ok(rec) if filter.matches(&rec) => next = Some(frame(&rec)),
                Ok(_) => {}
                Err(RecvError::Lagged(n)) => {
                    tracing::info!(missed = n, "an event reader fell behind: dropped");
                    break;
                }
                Err(RecvError::Closed) => break,
            },
            _ = heartbeat.tick() => next = Some(Bytes::from_static(b": keep-alive\n\n")),
            () = tx.closed() => break,
        }
    }
    closer.notify_one();
}

/// The body of one reader's stream: the frames its [`feed`] queues.
struct Frames(mpsc::Receiver<Bytes>);

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_and_refuse_what_they_do_not_know() {
        let f = Filter::parse(Some("session=s%2D1&event=egress.denied")).unwrap();
        assert_eq!(f.session.as_deref(), Some("s-1"));
        assert_eq!(f.event.as_deref(), Some("egress.denied"));
        assert_eq!(Filter::parse(None).unwrap(), Filter::default());
        assert!(Filter::parse(Some("host=x")).is_err());
        assert!(Filter::parse(Some("event=a&event=b")).is_err());
        assert!(Filter::parse(Some("session=%zz")).is_err());
    }

    #[test]
    fn a_frame_is_event_data_and_a_blank_line() {
        let rec = LiveRecord {
            event: "egress.denied",
            session: None,
            line: Bytes::from_static(b"{\"a\":1}"),
        };
        assert_eq!(
            &frame(&rec)[..],
            b"event: egress.denied\ndata: {\"a\":1}\n\n"
        );
    }

    fn live(event: &'static str) -> Arc<LiveRecord> {
        Arc::new(LiveRecord {
            event,
            session: None,
            line: Bytes::from_static(b"{}"),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_stream_gets_a_keep_alive_comment_every_15_seconds() {
        let (records_tx, records) = broadcast::channel(8);
        let (tx, mut rx) = mpsc::channel(8);
        let closer = Closer::default();
        tokio::spawn(feed(records, Filter::default(), tx, closer.clone()));
        assert_eq!(&rx.recv().await.unwrap()[..], b": stream open\n\n");
        for _ in 0..3 {
            let started = tokio::time::Instant::now();
            assert_eq!(&rx.recv().await.unwrap()[..], b": keep-alive\n\n");
            assert_eq!(started.elapsed(), HEARTBEAT);
        }
        records_tx.send(live("egress.denied")).unwrap();
        assert!(rx
            .recv()
            .await
            .unwrap()
            .starts_with(b"event: egress.denied\n"));
    }

    #[tokio::test]
    async fn a_reader_that_lags_the_broadcast_is_dropped() {
        let (records_tx, records) = broadcast::channel(2);
        for _ in 0..5 {
            records_tx.send(live("egress.denied")).unwrap();
        }
        let (tx, mut rx) = mpsc::channel(8);
        let closer = Closer::default();
        let task = tokio::spawn(feed(records, Filter::default(), tx, closer.clone()));
        tokio::time::timeout(Duration::from_secs(5), closer.notified())
            .await
            .expect("the connection is closed");
        task.await.unwrap();
        assert_eq!(&rx.recv().await.unwrap()[..], b": stream open\n\n");
        assert!(rx.recv().await.is_none(), "nothing after the lag");
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_whose_queue_stays_full_is_dropped() {
        let (records_tx, records) = broadcast::channel(1024);
        let (tx, _rx) = mpsc::channel(1);
        let closer = Closer::default();
        let task = tokio::spawn(feed(records, Filter::default(), tx, closer.clone()));
        // The opening comment fills the queue; the first record waits for room.
        records_tx.send(live("egress.denied")).unwrap();
        let started = tokio::time::Instant::now();
        closer.notified().await;
        assert!(started.elapsed() >= STUCK, "{:?}", started.elapsed());
        task.await.unwrap();
    }

    #[test]
    fn a_filter_matches_fields_exactly() {
        let rec = |event, session: Option<&str>| LiveRecord {
            event,
            session: session.map(str::to_owned),
            line: Bytes::new(),
        };
        let f = Filter::parse(Some("session=s1")).unwrap();
        assert!(f.matches(&rec("egress.allowed", Some("s1"))));
        assert!(!f.matches(&rec("egress.allowed", Some("s10"))));
        assert!(!f.matches(&rec("egress.allowed", None)));
        let f = Filter::parse(Some("event=egress.denied")).unwrap();
        assert!(f.matches(&rec("egress.denied", None)));
        assert!(!f.matches(&rec("egress.would_deny", None)));
    }

    /// `event=A,B` keeps the records of either event, and only whole names match.
    #[test]
    fn an_event_filter_may_name_several_events() {
        let rec = |event| LiveRecord {
            event,
            session: None,
            line: Bytes::new(),
        };
        let f = Filter::parse(Some("event=egress.denied%2Cegress.flagged")).unwrap();
        assert!(f.matches(&rec("egress.denied")));
        assert!(f.matches(&rec("egress.flagged")));
        assert!(!f.matches(&rec("egress.allowed")));
        let f = Filter::parse(Some("event=egress.denied,egress.flagged")).unwrap();
        assert!(f.matches(&rec("egress.flagged")));
        assert!(!f.matches(&rec("egress")));
        for empty in [
            "event=",
            "event=egress.denied,",
            "event=,egress.denied",
            "event=a,,b",
        ] {
            assert!(Filter::parse(Some(empty)).is_err(), "{empty}");
        }
    }
}
