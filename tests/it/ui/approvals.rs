//! The console's approvals step (docs/reference/approvals.md): requests held for a
//! reviewer, shown pending on the page, decided there with its buttons, and answered
//! accordingly: the allowed one by the real origin, the denied one with its 403.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use super::browser::Browser;
use super::url;
use crate::support::admin::basic;
use crate::support::client::request_bytes;
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};

/// How long a held request may wait for its answer: the page's poll, the click and the
/// browser's own pace on a busy machine, well inside the ask timeouts (60 s).
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// The proxy of the console's test, holding requests without a session too.
pub(super) fn serve_with_approvals(builder: ProxyBuilder) -> ProxyBuilder {
    builder
        .arg("--approval")
        .arg("ask")
        .arg("--ask-timeout")
        .arg("60")
}

/// A session body that asks instead of refusing `not_in_request_policy`.
pub(super) fn ask_session(mut body: Value) -> Value {
    body["on_deny"] = json!("ask");
    body["ask_timeout_seconds"] = json!(60);
    body
}

/// A GET through the proxy, answered whenever it is: its status line and body.
fn held_get(proxy: &Proxy, url: &str, auth: Option<String>) -> JoinHandle<(String, String)> {
    held_request(proxy, "GET", url, auth, b"")
}

/// A request through the proxy, answered whenever it is: its status line and body.
fn held_request(
    proxy: &Proxy,
    method: &str,
    url: &str,
    auth: Option<String>,
    body: &[u8],
) -> JoinHandle<(String, String)> {
    let headers: Vec<(String, String)> = auth
        .into_iter()
        .map(|a| ("Proxy-Authorization".to_string(), a))
        .collect();
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let bytes = request_bytes(method, url, &headers, body);
    let addr = proxy.addr;
    tokio::spawn(async move {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&bytes).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(ANSWER_WITHIN, stream.read_to_end(&mut answer))
            .await
            .expect("the held request is answered once decided")
            .unwrap();
        let text = String::from_utf8_lossy(&answer).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.lines().next().unwrap_or_default().to_string();
        (status, body.to_string())
    })
}

/// Held requests: three of `session` for `held.test` (a GET, then two POSTs with
/// bodies on the same approval), one without a session for `other.test`.
pub(super) struct Held {
    in_session: Vec<JoinHandle<(String, String)>>,
    sessionless: JoinHandle<(String, String)>,
}

/// Hold the two requests and see both pending on the page, each with the decisions it
/// can take: no "allow for session" without a session.
pub(super) async fn hold(
    browser: &mut Browser,
    proxy: &Proxy,
    origin: &Origin,
    session: &Value,
) -> Held {
    let id = session["id"].as_str().unwrap();
    let auth = basic(id, session["token"].as_str().unwrap());
    let in_session = held_get(proxy, &url("held.test", origin, "/held?x=1"), Some(auth));
    let shown = browser.call(json!({"do": "approval", "host": "held.test"}));
    let port = origin.port();
    assert_eq!(shown["target"], format!("held.test:{port}"), "{shown}");
    assert_eq!(shown["badges"], json!(["GET"]), "{shown}");
    assert_eq!(shown["fields"]["path"], "/held?x=1", "{shown}");
    assert_eq!(shown["fields"]["session"], id, "{shown}");
    assert_eq!(shown["fields"]["would add"], format!("held.test:{port}"));
    assert_eq!(shown["fields"]["held"], "1 request", "{shown}");
    assert_eq!(
        shown["buttons"],
        json!(["allow-once", "allow-session", "deny"]),
        "{shown}"
    );
    // Two POSTs queued behind it: the page shows every request a decision releases.
    let mut in_session = vec![in_session];
    for n in 1..=2 {
        let auth = basic(id, session["token"].as_str().unwrap());
        let url = url("held.test", origin, &format!("/post{n}"));
        in_session.push(held_request(proxy, "POST", &url, Some(auth), b"secret=1"));
    }
    let shown = browser.call(json!({"do": "held", "host": "held.test", "count": 3}));
    // In the order they came: the GET first, then the two POSTs, which raced.
    let mut requests: Vec<String> = shown["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["method"].as_str().unwrap(),
                r["path"].as_str().unwrap()
            )
        })
        .collect();
    requests[1..].sort();
    assert_eq!(
        requests,
        ["GET /held?x=1", "POST /post1", "POST /post2"],
        "{shown}"
    );
    assert_eq!(shown["fields"]["held"], "3 requests", "{shown}");
    let sessionless = held_get(proxy, &url("other.test", origin, "/"), None);
    let shown = browser.call(json!({"do": "approval", "host": "other.test"}));
    assert_eq!(shown["fields"]["session"], "no session", "{shown}");
    assert_eq!(shown["buttons"], json!(["allow-once", "deny"]), "{shown}");
    let count = browser.js("return document.getElementById('approvals-count').textContent");
    assert_eq!(count, "2");
    Held {
        in_session,
        sessionless,
    }
}

/// Allow the session's request once and deny the other, from the page: the first is
/// answered by the origin, the second refused, and its refusal arrives as a denial.
pub(super) async fn decide(browser: &mut Browser, origin: &Origin, held: Held) {
    let hits = origin.hits();
    let done = browser.call(json!({"do": "decide", "host": "held.test", "decision": "allow-once"}));
    let port = origin.port();
    assert_eq!(done["done"], format!("Allowed once: held.test:{port}."));
    for request in held.in_session {
        let (status, body) = request.await.unwrap();
        assert!(status.contains(" 200 "), "{status}");
        assert_eq!(body, origin.body());
    }
    assert_eq!(
        origin.hits(),
        hits + 3,
        "the three requests shown were released"
    );
    let seen = origin.requests();
    let first = seen.iter().find(|r| r.target == "/held?x=1").unwrap();
    assert_eq!(
        first.header("host"),
        Some(format!("held.test:{port}").as_str())
    );

    let done = browser.call(json!({"do": "decide", "host": "other.test", "decision": "deny"}));
    assert_eq!(done["done"], format!("Denied: other.test:{port}."));
    let (status, body) = held.sessionless.await.unwrap();
    assert!(status.contains(" 403 "), "{status}");
    assert!(body.contains("not_in_request_policy"), "{body}");
    assert_eq!(
        origin.hits(),
        hits + 3,
        "the denied request never reached it"
    );
    let denied = browser.call(json!({"do": "denial", "host": "other.test"}));
    assert_eq!(
        denied["badges"],
        json!(["not_in_request_policy"]),
        "{denied}"
    );
    let empty = browser.js("return !document.getElementById('approvals-empty').hidden");
    assert_eq!(empty, true, "nothing left pending");
}
