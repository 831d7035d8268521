//! Minimal HTTP/1.1 message reading shared by the origins and the client.
//!
//! Hand-written on purpose: the tests must see exactly what went over the wire,
//! with header order and duplicates kept.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::find;

/// The largest head either side accepts before giving up.
const MAX_HEAD: usize = 256 * 1024;

/// A parsed start line plus headers (names lower-cased, order and duplicates kept).
#[derive(Clone, Debug)]
pub(crate) struct Head {
    pub start_line: String,
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The first value of header `name` (case-insensitive).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

/// The first value of header `name` in `headers` (case-insensitive).
pub(crate) fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A reader that keeps the bytes it read past the current message.
pub(crate) struct Reader<R> {
    pub inner: R,
    pub buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub(crate) fn new(inner: R) -> Self {
        Reader {
            inner,
            buf: Vec::new(),
        }
    }

    /// Read more bytes into the buffer; `Ok(0)` at end of stream.
    async fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 8192];
        let n = self.inner.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// Read a head up to the blank line. `Ok(None)` when the stream ends cleanly
    /// before any byte of a new message.
    pub(crate) async fn read_head(&mut self) -> io::Result<Option<Head>> {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let raw: Vec<u8> = self.buf.drain(..end + 4).collect();
                return parse_head(&raw[..end]).map(Some);
            }
            if self.buf.len() > MAX_HEAD {
                return Err(invalid("head too large"));
            }
            if self.fill().await? == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "stream ended inside a head: {:?}",
                        String::from_utf8_lossy(&self.buf)
                    ),
                ));
            }
        }
    }

    /// Read exactly `n` body bytes.
    pub(crate) async fn read_exact_body(&mut self, n: usize) -> io::Result<Vec<u8>> {
        while self.buf.len() < n {
            if self.fill().await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("body ended after {} of {} bytes", self.buf.len(), n),
                ));
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// Read one CRLF-terminated line (without the CRLF).
    async fn read_line(&mut self) -> io::Result<String> {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..end + 2).collect();
                return Ok(String::from_utf8_lossy(&line[..end]).into_owned());
            }
            if self.fill().await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "stream ended inside a chunked body",
                ));
            }
        }
    }

    /// Decode a chunked body (trailers are read and dropped).
    pub(crate) async fn read_chunked_body(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line().await?;
            let size_text = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| invalid(&format!("bad chunk size line {line:?}")))?;
            if size == 0 {
                // Trailers, up to the empty line.
                while !self.read_line().await?.is_empty() {}
                return Ok(body);
            }
            body.extend(self.read_exact_body(size).await?);
            if !self.read_line().await?.is_empty() {
                return Err(invalid("chunk not followed by CRLF"));
            }
        }
    }

    /// Read until the peer closes the stream.
    pub(crate) async fn read_to_end(&mut self) -> io::Result<Vec<u8>> {
        while self.fill().await? != 0 {}
        Ok(std::mem::take(&mut self.buf))
    }

    /// Read the body that follows `head`, framed by `Content-Length` or chunked;
    /// `to_eof` says what to do when neither is present.
    pub(crate) async fn read_body(&mut self, head: &Head, to_eof: bool) -> io::Result<Vec<u8>> {
        let chunked = head
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        if chunked {
            return self.read_chunked_body().await;
        }
        if let Some(len) = head.header("content-length") {
            let len: usize = len
                .trim()
                .parse()
                .map_err(|_| invalid(&format!("bad content-length {len:?}")))?;
            return self.read_exact_body(len).await;
        }
        if to_eof {
            self.read_to_end().await
        } else {
            Ok(Vec::new())
        }
    }
}

fn parse_head(raw: &[u8]) -> io::Result<Head> {
    let text = String::from_utf8_lossy(raw);
    let mut lines = text.split("\r\n");
    let start_line = lines.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| invalid(&format!("header line without a colon: {line:?}")))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok(Head {
        start_line,
        headers,
    })
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}
