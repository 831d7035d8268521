//! The response body of a forwarded request ([`super::forward`]): its bytes counted,
//! its allowed record written once when it ends or is dropped, and its upstream
//! connection put back in the pool only when it was read to its end.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};

use super::allowed::AllowedRecord;
use super::pool::{Lease, Upstream};

/// A response body that counts the bytes it carries and writes the allowed record once,
/// when it ends or is dropped (the client went away). Its upstream connection goes back
/// to the pool only if the body was read to its end.
pub(super) struct Metered {
    pub(super) inner: Incoming,
    pub(super) down: u64,
    pub(super) record: Option<Box<AllowedRecord>>,
    pub(super) ended: bool,
    pub(super) lease: Option<(Lease, Arc<Upstream>)>,
}

impl HttpBody for Metered {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.down += data.len() as u64;
                }
            }
            Poll::Ready(None) => self.ended = true,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        if let Some(mut record) = self.record.take() {
            record.write(self.down);
        }
        if let Some((lease, pool)) = self.lease.take() {
            // hyper stops polling a body of known length after its last byte, so the end
            // is also when nothing is left to read.
            if self.ended || self.inner.is_end_stream() {
                pool.put_back(lease);
            }
        }
    }
}
