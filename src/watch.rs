//! `egress-proxy watch`: a running proxy's audit records as they are written, read from
//! its admin API's event stream (docs/reference/command-line.md, "watch";
//! docs/reference/control-plane.md, "Events"), one line each or their JSON lines.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::header::{ACCEPT, AUTHORIZATION, HOST};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

use crate::config::{TokenSource, WatchConfig, TOKEN_ENV};

/// How long connecting to the admin API and its answer's head may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why `watch` stopped (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
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

/// Read the stream and print it until it ends; every way it ends is an error.
pub async fn run(config: &WatchConfig) -> Result<(), WatchError> {
    let token = token(&config.token)?;
    let url = config.url.clone();
    let unreachable = |why: String| WatchError::Unreachable {
        url: url.clone(),
        why,
    };
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&config.authority))
        .await
        .map_err(|_| unreachable(format!("no connection within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| unreachable(e.to_string()))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    tokio::spawn(conn);
    let mut req = Request::get(&config.path)
        .header(HOST, &config.authority)
        .header(ACCEPT, "text/event-stream");
    if let Some(token) = &token {
        req = req.header(AUTHORIZATION, format!("Bearer {token}"));
    }
    let req = req
        .body(Empty::<Bytes>::new())
        .map_err(|e| unreachable(e.to_string()))?;
    let resp = tokio::time::timeout(CONNECT_TIMEOUT, sender.send_request(req))
        .await
        .map_err(|_| unreachable(format!("no answer within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| unreachable(e.to_string()))?;
    match resp.status() {
        StatusCode::OK => {}
        StatusCode::UNAUTHORIZED => return Err(WatchError::Unauthorized { url }),
        status => {
            let body = resp.into_body().collect().await.map(|b| b.to_bytes());
            let message = body
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "not an event stream".to_string());
            return Err(WatchError::Refused {
                url,
                status,
                message,
            });
        }
    }
    eprintln!("egress-proxy: watching {url}");
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let mut body = resp.into_body();
    let mut text = String::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| WatchError::Broken {
            url: url.clone(),
            why: e.to_string(),
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        text.push_str(&String::from_utf8_lossy(&data));
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            if let Some(line) = event_data(&block) {
                print(line, config.json, colour)?;
            }
        }
    }
    Err(WatchError::Ended { url })
}

fn token(source: &TokenSource) -> Result<Option<String>, WatchError> {
    match source {
        TokenSource::None => Ok(None),
        TokenSource::Env(token) => Ok(Some(token.clone())),
        TokenSource::File(path) => {
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|source| WatchError::TokenFile {
                path: shown.clone(),
                source,
            })?;
            match text.trim() {
                "" => Err(WatchError::EmptyToken(shown)),
                token => Ok(Some(token.to_string())),
            }
        }
    }
}

/// The `data:` line of an event block; `None` for a comment (`: keep-alive`).
fn event_data(block: &str) -> Option<&str> {
    block
        .lines()
        .find_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
}

fn print(line: &str, json: bool, colour: bool) -> Result<(), WatchError> {
    let out = match json {
        true => line.to_string(),
        false => match serde_json::from_str::<Value>(line) {
            Ok(record) => text_line(&record, colour),
            Err(_) => line.to_string(),
        },
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{out}")
        .and_then(|()| stdout.flush())
        .map_err(WatchError::Output)
}

/// One record as a line: time, event, destination, reason and rule, session.
pub fn text_line(record: &Value, colour: bool) -> String {
    let field = |name: &str| match &record[name] {
        Value::String(s) if !s.is_empty() => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => "-".to_string(),
    };
    let event = field("event");
    let dest = match record["port"].as_u64() {
        Some(port) if record["host"].as_str().is_some_and(|h| h.contains(':')) => {
            format!("[{}]:{port}", field("host"))
        }
        Some(port) => format!("{}:{port}", field("host")),
        None => field("host"),
    };
    let shown_event = match (colour, event.as_str()) {
        (true, "egress.denied") => format!("\x1b[31m{event:<17}\x1b[0m"),
        (true, "egress.allowed") => format!("\x1b[32m{event:<17}\x1b[0m"),
        (true, "egress.would_deny") => format!("\x1b[33m{event:<17}\x1b[0m"),
        _ => format!("{event:<17}"),
    };
    format!(
        "{} {shown_event} {dest} {} rule={} session={}",
        field("ts"),
        field("reason"),
        field("rule"),
        field("session")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_one_line_with_its_destination_reason_rule_and_session() {
        let record = serde_json::json!({"ts": "2026-12-02T02:31:07.412Z",
            "event": "egress.denied", "host": "evil.test", "port": 443,
            "reason": "not_in_org_allowlist", "rule": null, "session": "s1"});
        assert_eq!(
            text_line(&record, false),
            "2026-12-02T02:31:07.412Z egress.denied     evil.test:443 not_in_org_allowlist rule=- session=s1"
        );
        assert!(text_line(&record, true).contains("\x1b[31megress.denied"));
        let v6 = serde_json::json!({"event": "egress.allowed", "host": "::1", "port": 80});
        assert!(text_line(&v6, false).contains(" [::1]:80 "));
    }

    #[test]
    fn comments_have_no_data() {
        assert_eq!(event_data(": keep-alive\n\n"), None);
        assert_eq!(
            event_data("event: egress.denied\ndata: {\"a\":1}\n\n"),
            Some("{\"a\":1}")
        );
    }
}
