//! A request body scanned for canaries and secrets as it is relayed upstream (docs/reference/dlp.md,
//! "Bodies"): plain-HTTP requests and requests inside an intercepted tunnel (HTTP/1.1
//! and h2), chunked or not. Each data frame is scanned with the bytes held back from
//! the one before, and the last `hold` bytes (the longest form less one byte) are held
//! back again, so a value split across frames or TCP writes is still seen, and no byte
//! that completes a match is ever sent. On a match the body fails with [`Tripped`]: the
//! upstream request is never complete (hyper aborts it: its connection closed, its
//! stream reset), and the hit is kept in [`Sent::dlp`] for the answer and the record.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body as HttpBody, Frame, SizeHint};

use super::allowed::AllowedRecord;
use super::budgeted::Sent;
use super::BoxError;
use crate::dlp::{FoundIn, Hit, Lookout};
use crate::judgement::approved::Approved;
use crate::judgement::exfiltration;
use crate::judgement::refusal::Refusal;

/// The body failed because it carries a canary. Its text never holds the value.
#[derive(Debug)]
pub(crate) struct Tripped;

impl std::fmt::Display for Tripped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a canary was found in the request body: the request was abandoned")
    }
}

impl std::error::Error for Tripped {}

/// What `approved`'s body is looked through for: the canaries in force (the
/// organization's, and its session's) and its secret detectors. `None` when there is
/// nothing, made without allocating.
pub(crate) fn lookout(approved: &Approved) -> Option<Lookout> {
    let session = approved.session.as_ref().map(|s| &s.canaries);
    let canaries = [Some(&approved.policies.canaries), session];
    Lookout::new(canaries.into_iter().flatten().cloned(), &approved.detectors)
}

/// A body relayed through the scanners; see the module's doc.
pub(crate) struct Scanned<B> {
    inner: B,
    lookout: Lookout,
    hold: usize,
    /// The bytes held back: at most `hold`, scanned already, not yet sent.
    tail: Bytes,
    /// Trailers that came after the body, to send once the tail went out.
    trailers: Option<Frame<Bytes>>,
    inner_ended: bool,
    tripped: bool,
    sent: Arc<Sent>,
}

impl<B> Scanned<B> {
    /// `inner` looked through by `lookout`, the hit kept in `sent`.
    pub(crate) fn new(inner: B, lookout: Lookout, sent: Arc<Sent>) -> Self {
        let hold = lookout.hold_back();
        Scanned {
            inner,
            lookout,
            hold,
            tail: Bytes::new(),
            trailers: None,
            inner_ended: false,
            tripped: false,
            sent,
        }
    }

    fn scan(&self, bytes: &[u8]) -> Option<Hit> {
        self.lookout.scan(bytes, FoundIn::Body, &self.sent.flagged)
    }

    /// The first canary the tail and `data` together carry: `data` whole, and a match
    /// across the boundary (it holds a byte of the tail, so at most `hold` of `data`).
    fn scan_frame(&self, data: &[u8]) -> Option<Hit> {
        if !self.tail.is_empty() {
            let reach = data.len().min(self.hold);
            let mut seam = Vec::with_capacity(self.tail.len() + reach);
            seam.extend_from_slice(&self.tail);
            seam.extend_from_slice(&data[..reach]);
            if let Some(hit) = self.scan(&seam) {
                return Some(hit);
            }
        }
        self.scan(data)
    }

    /// What of the tail and `data` may go now (possibly nothing); the last `hold` bytes
    /// become the tail. One frame out for each frame in (a tail before it is copied in
    /// front: one write upstream, not two).
    fn release(&mut self, data: Bytes) -> Option<Bytes> {
        let total = self.tail.len() + data.len();
        if total <= self.hold {
            let mut joined = BytesMut::with_capacity(total);
            joined.extend_from_slice(&self.tail);
            joined.extend_from_slice(&data);
            self.tail = joined.freeze();
            return None;
        }
        if data.len() >= self.hold {
            let keep = data.len() - self.hold;
            let old = std::mem::replace(&mut self.tail, data.slice(keep..));
            let now = data.slice(..keep);
            if old.is_empty() {
                return (!now.is_empty()).then_some(now);
            }
            // One frame, one write upstream: the old tail copied in front of the rest.
            let mut joined = BytesMut::with_capacity(old.len() + now.len());
            joined.extend_from_slice(&old);
            joined.extend_from_slice(&now);
            return Some(joined.freeze());
        }
        // A short frame: the tail and it, joined, split where the new tail starts.
        let mut joined = BytesMut::with_capacity(total);
        joined.extend_from_slice(&self.tail);
        joined.extend_from_slice(&data);
        let mut joined = joined.freeze();
        self.tail = joined.split_off(total - self.hold);
        Some(joined)
    }
}

impl<B> HttpBody for Scanned<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.tripped {
            return Poll::Ready(Some(Err(Box::new(Tripped))));
        }
        // Each turn takes a frame from the body under it, which ends or waits in time.
        loop {
            if self.inner_ended {
                if !self.tail.is_empty() {
                    let tail = std::mem::take(&mut self.tail);
                    return Poll::Ready(Some(Ok(Frame::data(tail))));
                }
                return Poll::Ready(self.trailers.take().map(Ok));
            }
            let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    self.inner_ended = true;
                    continue;
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            let data = match frame.into_data() {
                Ok(data) => data,
                Err(trailers) => {
                    // Trailers end the body; the tail goes out before them.
                    self.trailers = Some(trailers);
                    self.inner_ended = true;
                    continue;
                }
            };
            if let Some(hit) = self.scan_frame(&data) {
                let _ = self.sent.dlp.set(hit);
                self.tripped = true;
                return Poll::Ready(Some(Err(Box::new(Tripped))));
            }
            if let Some(now) = self.release(data) {
                return Poll::Ready(Some(Ok(Frame::data(now))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        !self.tripped
            && self.tail.is_empty()
            && self.trailers.is_none()
            && (self.inner_ended || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl AllowedRecord {
    /// The refusal of a request whose body carried a canary, if it did.
    pub(super) fn tripped(&self) -> Option<Refusal> {
        let hit = self.sent.dlp.get()?.clone();
        let mut refusal =
            Refusal::exfiltration(hit, &self.approved.target).in_session(&self.approved.session);
        refusal.resolved_ip = self.dialed.map(|d| d.ip());
        Some(refusal)
    }

    /// After a trip, end the session it ran under (unless `on_trip` is `refuse`), once.
    pub(super) async fn end_session(&mut self) {
        let Some(refusal) = self.tripped() else {
            return;
        };
        if std::mem::replace(&mut self.trip_ended, true) {
            return;
        }
        let approved = &self.approved;
        let on_trip = exfiltration::on_trip(&approved.policies, approved.session.as_ref());
        let session = approved.session.as_ref();
        exfiltration::end_session(&self.state, on_trip, session, &refusal).await;
    }

    /// [`AllowedRecord::end_session`] from a drop (the answer had started): by a task.
    pub(super) fn end_session_detached(&mut self, refusal: Refusal) {
        if std::mem::replace(&mut self.trip_ended, true) || self.approved.session.is_none() {
            return;
        }
        let approved = &self.approved;
        let on_trip = exfiltration::on_trip(&approved.policies, approved.session.as_ref());
        let (state, session) = (self.state.clone(), approved.session.clone());
        tokio::spawn(async move {
            exfiltration::end_session(&state, on_trip, session.as_ref(), &refusal).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlp::{Canary, Scanner};
    use http_body_util::{BodyExt, StreamBody};

    const VALUE: &str = "AKIAQ7EGRESSCANARY42";

    fn scanner() -> Arc<Scanner> {
        let canary = Canary::new("c1", "generic", VALUE.as_bytes().to_vec());
        Arc::new(Scanner::new(&[canary]))
    }

    /// What a body of `pieces` relays: the bytes sent, and whether it tripped.
    async fn relay(scanner: &Arc<Scanner>, pieces: &[&[u8]]) -> (Vec<u8>, bool) {
        let frames: Vec<Result<Frame<Bytes>, BoxError>> = pieces
            .iter()
            .map(|p| Ok(Frame::data(Bytes::copy_from_slice(p))))
            .collect();
        let inner = StreamBody::new(futures_util::stream::iter(frames));
        let lookout = Lookout::new([scanner.clone()], &Arc::default()).unwrap();
        let mut body = Scanned::new(inner, lookout, Arc::new(Sent::default()));
        let mut sent = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => sent.extend_from_slice(f.data_ref().unwrap()),
                Err(_) => return (sent, true),
            }
        }
        (sent, false)
    }

    #[tokio::test]
    async fn a_value_split_anywhere_is_caught_and_never_sent_whole() {
        let body = format!(
            "{{\"note\": \"x\", \"key\": \"{VALUE}\", \"pad\": \"{}\"}}",
            "y".repeat(300)
        );
        let (bytes, s) = (body.as_bytes(), scanner());
        for cut in 0..bytes.len() {
            for second in [cut, (cut + 7).min(bytes.len())] {
                let (sent, tripped) =
                    relay(&s, &[&bytes[..cut], &bytes[cut..second], &bytes[second..]]).await;
                assert!(tripped, "cut at {cut}, {second}");
                // Never a complete value, and not even its last byte in place.
                let at = body.find(VALUE).unwrap();
                assert!(
                    sent.len() < at + VALUE.len(),
                    "cut at {cut}: {} sent",
                    sent.len()
                );
            }
        }
    }

    #[tokio::test]
    async fn a_body_without_the_value_goes_through_whole_in_any_pieces() {
        let near = VALUE.replace('Q', "R");
        let body = format!("a={near}&b={}", "z".repeat(200));
        let (bytes, s) = (body.as_bytes(), scanner());
        for cut in [0, 1, 5, 30, bytes.len() - 1, bytes.len()] {
            let (sent, tripped) = relay(&s, &[&bytes[..cut], &bytes[cut..]]).await;
            assert!(!tripped);
            assert_eq!(sent, bytes, "cut at {cut}");
        }
        let (sent, tripped) = relay(&s, &[]).await;
        assert!(!tripped && sent.is_empty());
    }
}
