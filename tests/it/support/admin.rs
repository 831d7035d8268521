//! A client for the admin API (docs/reference/control-plane.md) over raw TCP, and Prometheus text helpers.

use std::net::SocketAddr;

use base64::Engine;
use serde_json::Value;

use super::client::{send_raw, Response};

/// The admin API of one proxy.
#[derive(Clone, Debug)]
pub(crate) struct AdminClient {
    pub addr: SocketAddr,
    /// The bearer token; `None` when started without a token file.
    pub token: Option<String>,
}

/// A created session's credentials.
#[derive(Clone, Debug)]
pub(crate) struct Created {
    pub id: String,
    pub token: String,
    pub body: Value,
}

impl Created {
    /// The `Proxy-Authorization` value of this session.
    pub(crate) fn proxy_auth(&self) -> String {
        basic(&self.id, &self.token)
    }
}

/// `Basic base64(id:token)`.
pub(crate) fn basic(id: &str, token: &str) -> String {
    let enc = base64::engine::general_purpose::STANDARD.encode(format!("{id}:{token}"));
    format!("Basic {enc}")
}

impl AdminClient {
    /// A call with the proxy's token.
    pub(crate) async fn call(&self, method: &str, path: &str, body: Option<&str>) -> Response {
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        self.call_as(method, path, body, auth.as_deref()).await
    }

    /// A call with this `Authorization` value (or none).
    pub(crate) async fn call_as(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        authorization: Option<&str>,
    ) -> Response {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.addr);
        if let Some(auth) = authorization {
            req += &format!("Authorization: {auth}\r\n");
        }
        let body = body.unwrap_or("");
        // The API takes a change only as JSON, a DELETE without a body included.
        if !body.is_empty() || !matches!(method, "GET" | "HEAD") {
            req += &format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            );
        }
        req += "Connection: close\r\n\r\n";
        req += body;
        send_raw(self.addr, req.as_bytes()).await
    }

    /// `POST /v1/sessions`; panics unless it answers 201.
    pub(crate) async fn create_session(&self, policy: &Value, idle: Option<u64>) -> Created {
        let mut body = serde_json::json!({ "network_policy": policy, "label": "it" });
        if let Some(idle) = idle {
            body["idle_timeout_seconds"] = idle.into();
        }
        let resp = self
            .call("POST", "/v1/sessions", Some(&body.to_string()))
            .await;
        assert_eq!(resp.status, 201, "create session: {resp:?}");
        let json = resp.json();
        Created {
            id: json["id"].as_str().expect("id").to_string(),
            token: json["token"].as_str().expect("token").to_string(),
            body: json,
        }
    }

    /// `GET /metrics` text; panics unless it answers 200.
    pub(crate) async fn metrics(&self) -> String {
        let resp = self.call("GET", "/metrics", None).await;
        assert_eq!(resp.status, 200, "metrics: {resp:?}");
        resp.text()
    }
}

/// The value of the sample `series` (name with labels exactly as printed), if present.
pub(crate) fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}
