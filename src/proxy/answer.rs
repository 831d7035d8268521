//! The one place a refusal or failure becomes the answer a client sees.
//! A refused `CONNECT` is answered here before any tunnel opens; internal details never
//! reach the client, only the reason, the destination and a sentence we wrote.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::ext::ReasonPhrase;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::Body;
use crate::audit::RequestId;
use crate::judgement::refusal::{Failure, Limit, Refusal, Stop};
use crate::policy::Reason;

/// The header that names the reason of every refusal.
pub(crate) const DENIED_HEADER: &str = "x-egress-denied";

/// The HTTP status of a refusal: the one place it is chosen. The reason's own status
/// ([`crate::policy::Reason::status`]), except where the limit that was hit tells apart
/// what one reason covers: 431 for a head too large, 503 for the connection limit.
pub(crate) fn status(refusal: &Refusal) -> StatusCode {
    match refusal.limit {
        Some(Limit::HeadTooLarge) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        Some(Limit::Connections) => StatusCode::SERVICE_UNAVAILABLE,
        Some(Limit::Rate) | None => {
            StatusCode::from_u16(refusal.reason.status()).unwrap_or(StatusCode::FORBIDDEN)
        }
    }
}

/// Answer a request that stops before upstream.
pub(crate) fn stop(stop: &Stop, request_id: RequestId) -> Response<Body> {
    match stop {
        Stop::Denied(refusal) => refuse(refusal, request_id),
        Stop::Failed(failure) => fail(failure, request_id),
    }
}

/// A refusal: its status, a reason phrase naming the reason, `X-Egress-Denied: REASON`
/// and the JSON body (`docs/reference/clients.md` says why the phrase matters).
pub(crate) fn refuse(refusal: &Refusal, request_id: RequestId) -> Response<Body> {
    let status = status(refusal);
    let mut resp = json_response(status, refusal_body(refusal, request_id));
    // The phrase is built from a status name and a reason name, both plain ASCII, so it
    // is always a valid reason phrase; were it not, the canonical phrase would be sent.
    if let Ok(phrase) = ReasonPhrase::try_from(reason_phrase(status, refusal.reason)) {
        resp.extensions_mut().insert(phrase);
    }
    resp.headers_mut().insert(
        DENIED_HEADER,
        HeaderValue::from_static(refusal.reason.as_str()),
    );
    if matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
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
pub(crate) fn fail(failure: &Failure, request_id: RequestId) -> Response<Body> {
    let mut body = json!({"error": {
        "type": "upstream_error",
        "message": failure.message,
        "request_id": request_id,
    }});
    if let Some(detail) = &failure.detail {
        body["error"]["detail"] = json!(detail);
    }
    json_response(
        StatusCode::from_u16(failure.status).unwrap_or(StatusCode::BAD_GATEWAY),
        body,
    )
}

/// The reason phrase of a refusal's status line, e.g. `Egress denied: not_in_org_allowlist`.
///
/// Clients print neither the headers nor the body of a refused `CONNECT`, at most its
/// status line (pip, npm), so the reason must be there too. A policy denial (403) says
/// "Egress denied"; every other refusal keeps its status's standard phrase, so the line
/// still reads as what it is (`407 Proxy Authentication Required: auth_required`).
pub(crate) fn reason_phrase(status: StatusCode, reason: Reason) -> String {
    let what = match status {
        StatusCode::FORBIDDEN => "Egress denied",
        other => other.canonical_reason().unwrap_or("Refused"),
    };
    format!("{what}: {}", reason.as_str())
}

fn refusal_body(refusal: &Refusal, request_id: RequestId) -> serde_json::Value {
    let mut error = json!({
        "type": "egress_denied",
        "reason": refusal.reason.as_str(),
        "host": refusal.host,
        "port": refusal.port,
        "request_id": request_id,
    });
    // Every 403 carries the message written for it (docs/reference/answers.md, "The
    // message"); other refusals keep their detail, when they have one.
    if status(refusal) == StatusCode::FORBIDDEN {
        error["message"] = json!(super::message::message(refusal));
    } else if let Some(detail) = &refusal.detail {
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
pub(crate) async fn write_raw(mut stream: TcpStream, refusal: &Refusal, request_id: RequestId) {
    let body = format!("{}\n", refusal_body(refusal, request_id));
    let code = status(refusal);
    let phrase = reason_phrase(code, refusal.reason);
    let status = code.as_u16();
    let retry = if matches!(status, 429 | 503) {
        "retry-after: 1\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {status} {phrase}\r\n{DENIED_HEADER}: {}\r\n{retry}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        refusal.reason.as_str(),
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// An empty body, for the `200` that opens a tunnel.
pub(crate) fn empty() -> Body {
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_phrase_names_the_reason_after_the_status() {
        let cases = [
            (
                403,
                Reason::NotInOrgAllowlist,
                "Egress denied: not_in_org_allowlist",
            ),
            (
                403,
                Reason::PrivateAddress,
                "Egress denied: private_address",
            ),
            (400, Reason::InvalidRequest, "Bad Request: invalid_request"),
            (400, Reason::InvalidHost, "Bad Request: invalid_host"),
            (
                407,
                Reason::AuthRequired,
                "Proxy Authentication Required: auth_required",
            ),
            (
                429,
                Reason::LimitExceeded,
                "Too Many Requests: limit_exceeded",
            ),
            (
                431,
                Reason::InvalidRequest,
                "Request Header Fields Too Large: invalid_request",
            ),
            (
                503,
                Reason::LimitExceeded,
                "Service Unavailable: limit_exceeded",
            ),
        ];
        for (status, reason, want) in cases {
            let status = StatusCode::from_u16(status).unwrap();
            assert_eq!(reason_phrase(status, reason), want, "{status} {reason}");
        }
    }

    #[test]
    fn every_reason_makes_a_valid_phrase() {
        for reason in Reason::ALL {
            let status = StatusCode::from_u16(reason.status()).unwrap();
            let phrase = reason_phrase(status, reason);
            assert!(
                ReasonPhrase::try_from(phrase.clone()).is_ok(),
                "{phrase:?} is not a valid reason phrase"
            );
        }
    }

    #[test]
    fn refuse_sets_the_phrase_and_keeps_status_and_header() {
        let refusal = Refusal::new(Reason::NotInOrgAllowlist, "evil.test".into(), 443);
        let resp = refuse(&refusal, RequestId::new());
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            resp.extensions()
                .get::<ReasonPhrase>()
                .map(|p| p.as_bytes()),
            Some(&b"Egress denied: not_in_org_allowlist"[..])
        );
        assert_eq!(
            resp.headers().get(DENIED_HEADER).unwrap(),
            "not_in_org_allowlist"
        );
    }
}
