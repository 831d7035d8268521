//! Posting OTLP/HTTP bodies to the collector (docs/reference/opentelemetry.md,
//! "Delivery"): one HTTP/1.1 connection, kept alive and made again when it fails, with
//! hyper's client; each body tried a few times with backoff on a connection failure, a
//! timeout or 429/502/503/504, then given up.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The longest one try may take, connection included.
const TRY_TIMEOUT: Duration = Duration::from_secs(5);

/// Tries of one body, and the pause before the second (doubled each time).
const TRIES: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// The most of a collector's answer that is read (then the connection is made again).
const MAX_ANSWER: usize = 64 * 1024;

/// Where OTLP/HTTP bodies go: `http://HOST:PORT/PATH`, the signal's path after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Endpoint {
    host: String,
    port: u16,
    /// The URL's path without its trailing `/` (`/v1/logs` is added).
    base: String,
}

impl Endpoint {
    /// `http://HOST[:PORT][/PATH]`: the URL `--otlp-endpoint` takes.
    pub(crate) fn parse(url: &str) -> Result<Endpoint, String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(format!(
                    "{other}: only http:// is supported (a collector on this host or beside it)"
                ))
            }
            None => return Err("give the scheme: http://HOST:PORT".into()),
        }
        let host = uri.host().ok_or("the URL names no host")?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if uri.query().is_some() || url.contains('@') {
            return Err("the URL may have no query and no userinfo".into());
        }
        Ok(Endpoint {
            host: host.to_string(),
            port: uri.port_u16().unwrap_or(80),
            base: uri.path().trim_end_matches('/').to_string(),
        })
    }

    fn authority(&self) -> String {
        match self.host.contains(':') {
            true => format!("[{}]:{}", self.host, self.port),
            false => format!("{}:{}", self.host, self.port),
        }
    }
}

/// Why a try failed: worth another try, or not (the collector refused the body).
enum Failure {
    Retry(String),
    Refused(StatusCode),
}

/// The collector's client.
pub(super) struct Sender {
    endpoint: Endpoint,
    headers: Vec<(HeaderName, HeaderValue)>,
    conn: Option<SendRequest<Full<Bytes>>>,
}

impl Sender {
    pub(super) fn new(endpoint: Endpoint, headers: Vec<(HeaderName, HeaderValue)>) -> Sender {
        Sender {
            endpoint,
            headers,
            conn: None,
        }
    }

    /// Post `body` to the signal's `path` (`/v1/logs`, ...), trying again with backoff;
    /// false when it was given up.
    pub(super) async fn deliver(&mut self, path: &str, body: Bytes) -> bool {
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=TRIES {
            let tried = tokio::time::timeout(TRY_TIMEOUT, self.post(path, body.clone())).await;
            let failure = match tried {
                Ok(Ok(())) => return true,
                Ok(Err(failure)) => failure,
                Err(_) => Failure::Retry("no answer in time".into()),
            };
            match failure {
                Failure::Refused(status) => {
                    tracing::warn!(path, %status, "the OTLP collector refused a batch; dropped");
                    return false;
                }
                Failure::Retry(why) if attempt == TRIES => {
                    tracing::warn!(path, error = %why, "OTLP export failed; batch dropped");
                }
                Failure::Retry(why) => {
                    tracing::debug!(path, attempt, error = %why, "OTLP export failed; trying again");
                    self.conn = None;
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
            }
        }
        self.conn = None;
        false
    }

    async fn connection(&mut self) -> Result<&mut SendRequest<Full<Bytes>>, Failure> {
        let usable = self.conn.as_ref().is_some_and(|c| !c.is_closed());
        if !usable {
            let stream = TcpStream::connect((self.endpoint.host.as_str(), self.endpoint.port))
                .await
                .map_err(|e| Failure::Retry(format!("connect: {e}")))?;
            let _ = stream.set_nodelay(true);
            let (send, conn) = http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| Failure::Retry(format!("handshake: {e}")))?;
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "OTLP connection ended");
                }
            });
            self.conn = Some(send);
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    async fn post(&mut self, path: &str, body: Bytes) -> Result<(), Failure> {
        let uri = format!("{}{path}", self.endpoint.base);
        let mut req = Request::post(uri)
            .header(HOST, self.endpoint.authority())
            .header(CONTENT_TYPE, "application/x-protobuf");
        for (name, value) in &self.headers {
            req = req.header(name, value);
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| Failure::Retry(e.to_string()))?;
        let conn = self.connection().await?;
        conn.ready()
            .await
            .map_err(|e| Failure::Retry(format!("connection: {e}")))?;
        let answer = conn
            .send_request(req)
            .await
            .map_err(|e| Failure::Retry(format!("request: {e}")))?;
        let status = answer.status();
        // Read the answer to its end, so the connection can carry the next body.
        if Limited::new(answer.into_body(), MAX_ANSWER)
            .collect()
            .await
            .is_err()
        {
            self.conn = None;
        }
        match status {
            s if s.is_success() => Ok(()),
            StatusCode::TOO_MANY_REQUESTS
            | StatusCode::BAD_GATEWAY
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT => Err(Failure::Retry(format!("answered {status}"))),
            s => Err(Failure::Refused(s)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_to_host_port_and_path() {
        let e = Endpoint::parse("http://127.0.0.1:4318").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.base.as_str()),
            ("127.0.0.1", 4318, "")
        );
        let e = Endpoint::parse("http://[::1]:4318/otlp/").unwrap();
        assert_eq!(
            (e.authority().as_str(), e.base.as_str()),
            ("[::1]:4318", "/otlp")
        );
        assert_eq!(Endpoint::parse("http://c.test").unwrap().port, 80);
        for bad in [
            "c.test:4318",
            "https://c.test",
            "http://u:p@c.test",
            "http://c.test/?a",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
