//! `egress-proxy watch`: a running proxy's audit records as they are written, read from
//! its admin API's event stream (docs/reference/command-line.md, "watch";
//! docs/reference/control-plane.md, "Events"), one line each or their JSON lines; and
//! `egress-proxy approve` ([`approve`]), a reviewer's decision without a browser. Both
//! are clients of the admin API (`client`).

use std::io::{IsTerminal, Write};

use http_body_util::BodyExt;
use hyper::Method;
use serde_json::Value;

use crate::audit::ocsf;
use crate::config::WatchConfig;

pub mod approve;
mod client;
pub use client::ApiError;

/// Read the stream and print it until it ends; every way it ends is an error.
pub async fn run(config: &WatchConfig) -> Result<(), ApiError> {
    let url = config.api.url.clone();
    let accept = "text/event-stream";
    let resp = client::call(&config.api, Method::GET, &config.path, None, accept).await?;
    eprintln!("egress-proxy: watching {url}");
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let mut body = resp.into_body();
    // Bytes, not text, until a whole event is in: a character split across two frames
    // is decoded whole.
    let mut pending: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::Broken {
            url: url.clone(),
            why: e.to_string(),
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = pending.drain(..end + 2).collect();
            if let Some(line) = event_data(&String::from_utf8_lossy(&block)) {
                print(line, config.json, colour)?;
            }
        }
    }
    Err(ApiError::Ended { url })
}

/// The `data:` line of an event block; `None` for a comment (`: keep-alive`).
fn event_data(block: &str) -> Option<&str> {
    block
        .lines()
        .find_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
}

fn print(line: &str, json: bool, colour: bool) -> Result<(), ApiError> {
    let out = match json {
        true => line.to_string(),
        false => shown(line, colour),
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{out}")
        .and_then(|()| stdout.flush())
        .map_err(ApiError::Output)
}

/// A record's line as shown: [`text_line`] of the record, or the line as it came when it
/// is not one. An OCSF event (`--audit-format ocsf`) is shown as the record it holds.
fn shown(line: &str, colour: bool) -> String {
    let bytes = line.as_bytes();
    let native = ocsf::is_ocsf(bytes)
        .then(|| ocsf::to_native(bytes))
        .flatten();
    let parsed = match native {
        Some(native) => serde_json::from_slice::<Value>(&native),
        None => serde_json::from_str::<Value>(line),
    };
    match parsed {
        Ok(record) => text_line(&record, colour),
        Err(_) => line.to_string(),
    }
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
    // A canary or secret found (docs/reference/dlp.md) stands out: white on red.
    let dlp = record.get("dlp").filter(|d| d.is_object());
    let shown_event = match (colour, event.as_str()) {
        (true, _) if dlp.is_some() => format!("\x1b[1;37;41m{event:<17}\x1b[0m"),
        (true, "egress.denied") => format!("\x1b[31m{event:<17}\x1b[0m"),
        (true, "egress.allowed") => format!("\x1b[32m{event:<17}\x1b[0m"),
        (true, "egress.would_deny" | "approval.expired") => {
            format!("\x1b[33m{event:<17}\x1b[0m")
        }
        (true, "approval.allowed") => format!("\x1b[32m{event:<17}\x1b[0m"),
        (true, "approval.denied") => format!("\x1b[31m{event:<17}\x1b[0m"),
        _ => format!("{event:<17}"),
    };
    let line = format!(
        "{} {shown_event} {dest} {} rule={} session={}",
        field("ts"),
        field("reason"),
        field("rule"),
        field("session")
    );
    match dlp {
        Some(dlp) => format!("{line} {}", dlp_fields(dlp)),
        None => line,
    }
}

/// What a record's `dlp` says, as the line ends with it: which canary or detector, its
/// kind, where and in what encoding it was found. The record never holds the value.
fn dlp_fields(dlp: &Value) -> String {
    let part = |name: &str| dlp[name].as_str().unwrap_or("-").to_string();
    format!(
        "dlp={} kind={} found_in={} encoding={}",
        part("id"),
        part("kind"),
        part("found_in"),
        part("encoding")
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
    fn a_canary_or_secret_found_stands_out_and_says_which_where() {
        let record = serde_json::json!({"ts": "2026-12-02T02:31:07.412Z",
            "event": "egress.denied", "host": "[redacted]", "port": 443,
            "reason": "exfiltration_detected", "rule": null, "session": "s1",
            "dlp": {"id": "c1", "kind": "github_token", "encoding": "hex", "found_in": "target"}});
        assert_eq!(
            text_line(&record, false),
            "2026-12-02T02:31:07.412Z egress.denied     [redacted]:443 exfiltration_detected rule=- session=s1 dlp=c1 kind=github_token found_in=target encoding=hex"
        );
        assert!(text_line(&record, true).contains("\x1b[1;37;41megress.denied"));
        let mut flagged = record.clone();
        flagged["event"] = "egress.flagged".into();
        assert!(text_line(&flagged, true).contains("\x1b[1;37;41megress.flagged"));
    }

    #[test]
    fn an_ocsf_event_is_shown_as_the_record_it_holds() {
        let line = r#"{"category_uid":4,"category_name":"Network Activity","class_uid":4001,"class_name":"Network Activity","activity_id":5,"activity_name":"Refuse","type_uid":400105,"type_name":"Network Activity: Refuse","time":1795946462345,"severity_id":3,"severity":"Medium","status_id":2,"status":"Failure","status_detail":"not_in_org_allowlist","action_id":2,"action":"Denied","disposition_id":2,"disposition":"Blocked","dst_endpoint":{"hostname":"evil.test","port":443},"actor":{"session":{"uid":"s1"}},"unmapped":{"event":"egress.denied","request_id":"1","method":"CONNECT","shared_hosting":false,"via":"proxy","prev":"00"},"metadata":{"version":"1.5.0","sequence":1}}"#;
        assert_eq!(
            shown(line, false),
            "2026-11-29T10:01:02.345Z egress.denied     evil.test:443 not_in_org_allowlist rule=- session=s1"
        );
        assert_eq!(shown("not json", false), "not json");
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
