//! `egress-proxy approve`: the pending approvals of a running proxy, one line each, or a
//! reviewer's decision on one (docs/reference/approvals.md), through its admin API.

use std::io::Write;

use hyper::Method;
use serde_json::{json, Value};

use super::client::{self, ApiError};
use crate::config::ApproveConfig;

/// List the pending approvals, or decide one and say what became of it.
pub async fn run(config: &ApproveConfig) -> Result<(), ApiError> {
    let api = &config.api;
    let out = match &config.decide {
        None => {
            let resp = client::call(api, Method::GET, "/v1/approvals", None, "application/json");
            let listed = client::json(api, resp.await?).await?;
            let all = listed["approvals"].as_array().cloned().unwrap_or_default();
            if all.is_empty() {
                "no request is waiting for approval".to_string()
            } else {
                all.iter().map(line).collect::<Vec<_>>().join("\n")
            }
        }
        Some((id, decision)) => {
            let body = json!({ "decision": decision });
            let path = format!("/v1/approvals/{id}");
            let resp = client::call(api, Method::POST, &path, Some(&body), "application/json");
            let done = client::json(api, resp.await?).await?;
            let waiting = done["waiting"].as_u64().unwrap_or(0);
            format!("{id}: {decision} ({waiting} waiting request(s) go on)")
        }
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{out}")
        .and_then(|()| stdout.flush())
        .map_err(ApiError::Output)
}

/// One pending approval: id, since, who, what, the entry that would allow it; then each
/// request held on it, one indented line each (method, path, since), so a reviewer sees
/// everything a decision releases.
pub fn line(a: &Value) -> String {
    let text = |name: &str| a[name].as_str().unwrap_or("-").to_string();
    let what = match a["path"].as_str() {
        Some(path) => format!("{} {}", text("method"), path),
        None => text("method"),
    };
    let mut out = format!(
        "{} {} session={} {} entry={} waiting={} expires={}",
        text("id"),
        text("since"),
        text("session"),
        what,
        text("entry"),
        a["waiting"].as_u64().unwrap_or(0),
        text("expires_at"),
    );
    for r in a["requests"].as_array().into_iter().flatten() {
        let field = |name: &str| r[name].as_str().unwrap_or("-");
        let path = r["path"]
            .as_str()
            .map(|p| format!(" {p}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "\n  held {}{} since={}",
            field("method"),
            path,
            field("since")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pending_approval_is_one_line_then_one_per_held_request() {
        let a = serde_json::json!({"id": "ab", "since": "2026-12-02T07:00:00.000Z",
            "session": null, "method": "GET", "path": "/x", "entry": "a.test:80",
            "waiting": 2, "expires_at": "2026-12-02T07:00:30.000Z",
            "requests": [{"method": "GET", "path": "/x", "since": "2026-12-02T07:00:00.000Z"},
                {"method": "POST", "path": "/y", "since": "2026-12-02T07:00:01.000Z"}]});
        assert_eq!(
            super::line(&a),
            "ab 2026-12-02T07:00:00.000Z session=- GET /x entry=a.test:80 waiting=2 expires=2026-12-02T07:00:30.000Z\n  held GET /x since=2026-12-02T07:00:00.000Z\n  held POST /y since=2026-12-02T07:00:01.000Z"
        );
    }
}
