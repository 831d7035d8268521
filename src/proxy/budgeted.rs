//! An upload budget on an HTTP request's way upstream (docs/reference/policy-files.md,
//! "Upload budget"): its head, taken whole or refused once it is built for upstream, and
//! its body, cut where the [`Allowance`] ends. The meters and the step of the judgement
//! that refuses before anything is sent are `crate::judgement::budget`'s.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper::header::HeaderMap;

use super::BoxError;
use crate::judgement::budget::{refusal, Allowance, Spent};
use crate::judgement::refusal::Refusal;
use crate::policy::Target;
use crate::proxy::request::declared_length;

/// Take the bytes of a request head built for upstream (`head` bytes, as
/// [`super::head::wire_len`] counts them), all or nothing, before any of it is sent.
/// Refused when the head, with the body its `headers` declare, does not fit what is
/// left. Without a budget the head is counted all the same.
pub(crate) fn admit_head(
    allowance: &Allowance,
    head: u64,
    headers: &HeaderMap,
    target: &Target,
) -> Result<(), Refusal> {
    let Some(budget) = allowance.budget() else {
        allowance.grant_whole(head);
        return Ok(());
    };
    let left = allowance.remaining().unwrap_or(0);
    let body = declared_length(headers).unwrap_or(0);
    if head.saturating_add(body) <= left && allowance.grant_whole(head) {
        return Ok(());
    }
    let why = match body {
        0 => format!("the request head ({head} bytes) is more than the {left} bytes left of the upload budget"),
        _ => format!("the request head and body ({head} + {body} bytes) are more than the {left} bytes left of the upload budget"),
    };
    Err(refusal(target, budget).with_detail(why))
}

/// A draw from the store a body waits on.
type Draw = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What a request sent upstream, shared by its body and its record (one allocation per
/// request): the bytes granted, whether the upload budget cut the body, and the canary
/// its body carried, if one did ([`super::scanned`]).
#[derive(Debug, Default)]
pub(crate) struct Sent {
    pub bytes: AtomicU64,
    pub cut: AtomicBool,
    pub dlp: std::sync::OnceLock<crate::dlp::Hit>,
    /// The first secret its body carried that `[dlp] action = "report"` let through.
    pub flagged: std::sync::OnceLock<crate::dlp::Hit>,
}

/// A request body that draws its bytes from an [`Allowance`]: a data frame that does
/// not fit is cut to what does, and the body then fails with [`Spent`], so the upstream
/// request is never complete (hyper aborts it). Bytes granted are added to
/// `sent.bytes`; `sent.cut` is set once the body is cut.
pub(crate) struct Budgeted<B> {
    pub inner: B,
    pub allowance: Allowance,
    pub sent: Arc<Sent>,
    /// The failure is held back for one poll after the cut frame, so hyper writes that
    /// frame out (it flushes when the body is not ready) before it aborts the request.
    held: bool,
    /// With a fleet-wide budget: the rest of a frame this replica held too little for,
    /// waiting on a draw from the store (docs/scale-out.md, "One upload budget").
    /// (In a mutex only so the body is `Sync`, as hyper's boxed bodies are; it is only
    /// ever reached through `&mut`.)
    waiting: Option<(Bytes, Mutex<Draw>)>,
}

impl<B> Budgeted<B> {
    pub(crate) fn new(inner: B, allowance: Allowance, sent: Arc<Sent>) -> Self {
        Budgeted {
            inner,
            allowance,
            sent,
            held: false,
            waiting: None,
        }
    }
}

impl<B> HttpBody for Budgeted<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.sent.cut.load(Ordering::Relaxed) {
            if !std::mem::replace(&mut self.held, true) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            return Poll::Ready(Some(Err(Box::new(Spent))));
        }
        if let Some((_, draw)) = &mut self.waiting {
            let draw = draw.get_mut().unwrap_or_else(|p| p.into_inner());
            if draw.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let (data, _) = self.waiting.take().expect("waiting");
            return self.send(data, false);
        }
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return Poll::Pending,
        };
        let data = match frame.into_data() {
            Ok(data) => data,
            // Trailers are a head, not body bytes: not counted.
            Err(frame) => return Poll::Ready(Some(Ok(frame))),
        };
        let again = self.allowance.leased();
        let polled = self.send(data, again);
        if matches!(polled, Poll::Pending) {
            // A draw to wait on: poll it now, so its waker is this task's.
            return self.poll_frame(cx);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        // Bytes held back for a draw are still to come, even when the body under them
        // has ended: hyper must not end the request before them.
        self.waiting.is_none()
            && !self.sent.cut.load(Ordering::Relaxed)
            && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Budgeted<B> {
    /// Grant `data` what fits; with `draw`, what does not fit waits for one draw from
    /// the store (`Pending`, [`Budgeted::waiting`] set) before it is cut.
    fn send(
        &mut self,
        mut data: Bytes,
        draw: bool,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let granted = self.allowance.grant(data.len());
        self.sent.bytes.fetch_add(granted as u64, Ordering::Relaxed);
        if granted < data.len() && draw {
            let rest = data.split_off(granted);
            let allowance = self.allowance.clone();
            let need = rest.len() as u64;
            let fill = Box::pin(async move {
                let _ = allowance.fill(need).await;
            });
            self.waiting = Some((rest, Mutex::new(fill)));
            if granted == 0 {
                return Poll::Pending;
            }
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if granted < data.len() {
            self.sent.cut.store(true, Ordering::Relaxed);
            if granted == 0 {
                self.held = true;
                return Poll::Ready(Some(Err(Box::new(Spent))));
            }
            data.truncate(granted);
        }
        Poll::Ready(Some(Ok(Frame::data(data))))
    }
}
