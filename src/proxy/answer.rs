//! The one place a refusal or failure becomes the answer a client sees.
//! A refused `CONNECT` is answered here before any tunnel opens; internal details never
//! reach the client, only the reason, the destination and a sentence we wrote.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::refusal::{Failure, Limit, Refusal, Stop};
use super::Body;

/// The header that names the reason of every refusal.
pub const DENIED_HEADER: &str = "x-egress-denied";

/// The HTTP status of a refusal: the one place it is chosen. The reason's own status
/// ([`crate::policy::Reason::status`]), except where the limit that was hit tells apart
/// what one reason covers: 431 for a head too large, 503 for the connection limit.
pub fn status(refusal: &Refusal) -> StatusCode {
    match refusal.limit {
        Some(Limit::HeadTooLarge) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        Some(Limit::Connections) => StatusCode::SERVICE_UNAVAILABLE,
        Some(Limit::Rate) | None => {
            StatusCode::from_u16(refusal.reason.status()).unwrap_or(StatusCode::FORBIDDEN)
        }
    }
}

/// Answer a request that stops before upstream.
pub fn stop(stop: &Stop, request_id: &str) -> Response<Body> {
    match stop {
        Stop::Denied(refusal) => refuse(refusal, request_id),
        Stop::Failed(failure) => fail(failure, request_id),
    }
}

/// A refusal: its status, `X-Egress-Denied: REASON` and the JSON body of SPEC 6.
pub fn refuse(refusal: &Refusal, request_id: &str) -> Response<Body> {
    let status = status(refusal);
    let mut resp = json_response(status, refusal_body(refusal, request_id));
    resp.headers_mut().insert(
        DENIED_HEADER,
        HeaderValue::from_static(refusal.reason.as_str()),
    );
    if status == StatusCode::TOO_MANY_REQUESTS {
        resp.headers_mut()
            .insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if status == StatusCode::PROXY_AUTHENTICATION_REQUIRED {
        resp.headers_mut().insert(
            hyper::header::PROXY_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"egress-proxy\""),
        );
    }
    resp
}

/// An allowed destination that could not be reached (502, or 504 on connect timeout).
pub fn fail(failure: &Failure, request_id: &str) -> Response<Body> {
    let body = json!({"error": {
        "type": "upstream_error",
        "message": failure.message,
        "request_id": request_id,
    }});
    json_response(failure.status, body)
}

fn refusal_body(refusal: &Refusal, request_id: &str) -> serde_json::Value {
    let mut error = json!({
        "type": "egress_denied",
        "reason": refusal.reason.as_str(),
        "host": refusal.host,
        "port": refusal.port,
        "request_id": request_id,
    });
    if let Some(detail) = &refusal.detail {
        error["message"] = json!(detail);
    }
    json!({ "error": error })
}

fn json_response(status: StatusCode, body: serde_json::Value) -> Response<Body> {
    let text = Bytes::from(format!("{body}\n"));
    let mut resp = Response::new(Full::new(text).map_err(|never| match never {}).boxed());
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// Write a refusal straight onto a socket that no HTTP server handles (over the
/// connection limit, or a first request head refused before hyper reads it), then close
/// it.
pub async fn write_raw(mut stream: TcpStream, refusal: &Refusal, request_id: &str) {
    let body = format!("{}\n", refusal_body(refusal, request_id));
    let status = status(refusal);
    let reason = status.canonical_reason().unwrap_or("Error");
    let status = status.as_u16();
    let retry = if matches!(status, 429 | 503) {
        "retry-after: 1\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\n{DENIED_HEADER}: {}\r\n{retry}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        refusal.reason.as_str(),
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// An empty body, for the `200` that opens a tunnel.
pub fn empty() -> Body {
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed()
}
