//! A client stream with bytes already read in front of it: a `CONNECT`'s bytes read past
//! its head, or a tunnel's first bytes, read to judge them and still owed to whoever
//! reads next (the relay, or the TLS handshake of an intercepted tunnel).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A stream that yields `first` before what it reads from `inner`.
pub(crate) struct Prefixed<S> {
    first: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    pub(crate) fn new(first: Vec<u8>, inner: S) -> Prefixed<S> {
        Prefixed {
            first,
            at: 0,
            inner,
        }
    }

    /// The bytes not yet read from `first`, and the stream.
    pub(crate) fn into_parts(mut self) -> (Vec<u8>, S) {
        let rest = self.first.split_off(self.at);
        (rest, self.inner)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.first.len() {
            let rest = &self.first[self.at..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            self.at += n;
            if self.at == self.first.len() {
                self.first = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn prefixed_yields_the_first_bytes_then_the_stream() {
        let (mut a, b) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut a, b" world")
            .await
            .unwrap();
        drop(a);
        let mut read = Prefixed::new(b"hello".to_vec(), b);
        let mut all = String::new();
        read.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "hello world");
    }

    #[tokio::test]
    async fn into_parts_gives_the_bytes_not_yet_read() {
        let (_a, b) = tokio::io::duplex(64);
        let mut read = Prefixed::new(b"hello".to_vec(), b);
        let mut two = [0u8; 2];
        read.read_exact(&mut two).await.unwrap();
        assert_eq!(read.into_parts().0, b"llo");
    }
}
