//! A client of a running proxy's admin API, for `watch` and `approve`: one request on
//! its own connection, with the bearer token, and the errors a user is told.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

use crate::config::{AdminTarget, TokenSource, TOKEN_ENV};

/// How long connecting to the admin API and its answer's head may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a command talking to the admin API stopped (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("cannot read the admin token from {path}: {source}")]
    TokenFile {
        path: String,
        source: std::io::Error,
    },
    #[error("the admin token file {0} is empty")]
    EmptyToken(String),
    #[error("cannot reach the admin API at {url}: {why}")]
    Unreachable { url: String, why: String },
    #[error("the admin API at {url} refused the token (401): give the proxy's admin token with --admin-token-file or {TOKEN_ENV}")]
    Unauthorized { url: String },
    #[error("the admin API at {url} answered {status}: {message}")]
    Refused {
        url: String,
        status: StatusCode,
        message: String,
    },
    #[error("the event stream from {url} broke off: {why}")]
    Broken { url: String, why: String },
    #[error("the proxy at {url} ended the event stream (it stopped, or dropped this reader for falling behind)")]
    Ended { url: String },
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
}

/// `method path` (a path under the API's URL), with `body` as JSON when given. A 2xx
/// answer is returned with its body unread; a 401 or another status is an error that
/// carries the API's own message.
pub(super) async fn call(
    api: &AdminTarget,
    method: Method,
    path: &str,
    body: Option<&Value>,
    accept: &str,
) -> Result<Response<Incoming>, ApiError> {
    let token = token(&api.token)?;
    let url = api.url.clone();
    let unreachable = |why: String| ApiError::Unreachable {
        url: url.clone(),
        why,
    };
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&api.authority))
        .await
        .map_err(|_| unreachable(format!("no connection within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| unreachable(e.to_string()))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(format!("{}{path}", api.base))
        .header(HOST, &api.authority)
        .header(ACCEPT, accept);
    if let Some(token) = &token {
        req = req.header(AUTHORIZATION, format!("Bearer {token}"));
    }
    let payload = match body {
        Some(v) => {
            req = req.header(CONTENT_TYPE, "application/json");
            Bytes::from(v.to_string())
        }
        None => Bytes::new(),
    };
    let req = req
        .body(Full::new(payload))
        .map_err(|e| unreachable(e.to_string()))?;
    let resp = tokio::time::timeout(CONNECT_TIMEOUT, sender.send_request(req))
        .await
        .map_err(|_| unreachable(format!("no answer within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| unreachable(e.to_string()))?;
    match resp.status() {
        s if s.is_success() => Ok(resp),
        StatusCode::UNAUTHORIZED => Err(ApiError::Unauthorized { url }),
        status => {
            let body = resp.into_body().collect().await.map(|b| b.to_bytes());
            let message = body
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "an answer that is not the admin API's".to_string());
            Err(ApiError::Refused {
                url,
                status,
                message,
            })
        }
    }
}

/// A 2xx answer's body as JSON.
pub(super) async fn json(api: &AdminTarget, resp: Response<Incoming>) -> Result<Value, ApiError> {
    let broken = |why: String| ApiError::Broken {
        url: api.url.clone(),
        why,
    };
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| broken(e.to_string()))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| broken(format!("not JSON: {e}")))
}

fn token(source: &TokenSource) -> Result<Option<String>, ApiError> {
    match source {
        TokenSource::None => Ok(None),
        TokenSource::Env(token) => Ok(Some(token.clone())),
        TokenSource::File(path) => {
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|source| ApiError::TokenFile {
                path: shown.clone(),
                source,
            })?;
            match text.trim() {
                "" => Err(ApiError::EmptyToken(shown)),
                token => Ok(Some(token.to_string())),
            }
        }
    }
}
