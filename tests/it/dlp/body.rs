//! Canaries in request bodies on the wire (docs/reference/dlp.md, "Bodies"): a body
//! that carries one, as it is or encoded, whole or split across TCP writes or chunks,
//! is abandoned upstream before the value reaches the origin (which keeps every byte it
//! receives: [`Sink`]); the client gets 403, one record says `found_in: body`, and the
//! session ends. The same body without it, or one character off, goes through whole.

use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};

use super::sink::Sink;
use super::{values_file, with_canaries, VALUE};
use crate::support::client::{get_via_proxy, Conn, Response};
use crate::support::org::{allowlist_json, Org};
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::sessions;

/// A sink for `allowed.test`, and a proxy allowing it with the canaries, `refuse`.
async fn sink_and_proxy(tag: &str) -> (Sink, Proxy) {
    let sink = Sink::start().await;
    let file = values_file(tag);
    let org = with_canaries(Org::standard(sink.port()), &file, "refuse");
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .pin("allowed.test")
        .start()
        .await;
    (sink, proxy)
}

/// `POST` a body through the proxy in `pieces`, each its own TCP write a little apart;
/// `chunked` frames each piece as one chunk. The answer (or `None`: closed unanswered).
pub(super) async fn post(
    proxy: &Proxy,
    port: u16,
    extra: &str,
    pieces: &[&[u8]],
    chunked: bool,
) -> Option<Response> {
    let mut conn = Conn::open(proxy.addr).await;
    let length: usize = pieces.iter().map(|p| p.len()).sum();
    let framing = match chunked {
        true => "Transfer-Encoding: chunked".to_string(),
        false => format!("Content-Length: {length}"),
    };
    let head = format!(
        "POST http://allowed.test:{port}/upload HTTP/1.1\r\nHost: allowed.test:{port}\r\n{extra}{framing}\r\nConnection: close\r\n\r\n"
    );
    conn.send(head.as_bytes()).await;
    for piece in pieces {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut bytes = match chunked {
            true => format!("{:x}\r\n", piece.len()).into_bytes(),
            false => Vec::new(),
        };
        bytes.extend_from_slice(piece);
        if chunked {
            bytes.extend_from_slice(b"\r\n");
        }
        if !conn.send_lossy(&bytes).await {
            break;
        }
    }
    if chunked {
        conn.send_lossy(b"0\r\n\r\n").await;
    }
    conn.next_response().await
}

/// The canary's `egress.denied` records.
fn denied(proxy: &Proxy) -> Vec<Value> {
    let lines = proxy.audit_lines();
    lines
        .into_iter()
        .filter(|r| r["event"] == "egress.denied" && r["reason"] == "exfiltration_detected")
        .collect()
}

/// Wait (bounded) for `n` canary records, then return them.
async fn wait_denied(proxy: &Proxy, n: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while denied(proxy).len() < n && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    denied(proxy)
}

#[tokio::test]
async fn a_canary_in_a_body_split_across_writes_or_chunks_never_reaches_the_origin() {
    let (sink, proxy) = sink_and_proxy("body").await;
    let port = sink.port();
    let body = format!(
        "{{\"title\": \"notes\", \"text\": \"{VALUE}\", \"more\": \"{}\"}}",
        "x".repeat(100)
    );
    let at = body.find(VALUE).unwrap() + 8;
    let (a, b) = body.as_bytes().split_at(at);
    // The probe: a body of the same shape without the canary goes through whole.
    let clean = body.replace(VALUE, "nothing-secret-here!");
    let (ca, cb) = clean.as_bytes().split_at(at);
    for chunked in [false, true] {
        let answer = post(&proxy, port, "", &[ca, cb], chunked).await.unwrap();
        assert_eq!(answer.status, 200, "{}", proxy.diagnostics());
        assert!(
            sink.holds(clean.as_bytes()) || chunked,
            "the clean body arrived whole"
        );
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{{\"key\": \"{VALUE}\"}}"));
    let encoded = json!({"payload": b64}).to_string();
    let (ea, eb) = encoded.as_bytes().split_at(20);
    let cases: [(&[&[u8]], bool, &str); 3] = [
        (&[a, b], false, "plain"),
        (&[a, b], true, "plain"),
        (&[ea, eb], false, "base64"),
    ];
    for (i, (pieces, chunked, encoding)) in cases.iter().enumerate() {
        let answer = post(&proxy, port, "", pieces, *chunked).await;
        let answer = answer.expect("the client hears of it");
        assert_eq!(answer.status, 403, "{encoding}: {}", answer.text());
        assert_eq!(answer.json()["error"]["reason"], "exfiltration_detected");
        assert!(!answer.text().contains(VALUE));
        let records = wait_denied(&proxy, i + 1).await;
        assert_eq!(
            records.len(),
            i + 1,
            "one record each: {}",
            proxy.diagnostics()
        );
        let record = &records[i];
        assert_eq!(record["dlp"]["found_in"], "body", "{record}");
        assert_eq!(record["dlp"]["encoding"], *encoding, "{record}");
        assert_eq!(record["policy_level"], "dlp");
        assert!(record.get("url").is_none(), "{record}");
    }
    // Not the value, nor its first half (the held-back tail covers it), nor its base64.
    assert!(!sink.holds(VALUE.as_bytes()));
    assert!(!sink.holds(&VALUE.as_bytes()[..8]));
    assert!(!sink.holds(&b64.as_bytes()[8..30]));
    let shown = format!("{}{}", proxy.audit_text(), proxy.stderr());
    assert!(
        !shown.contains(VALUE) && !shown.contains(&b64[8..30]),
        "{shown}"
    );
}

#[tokio::test]
async fn a_near_miss_in_a_body_goes_through_whole() {
    let (sink, proxy) = sink_and_proxy("near").await;
    // One character off: the last.
    let near = format!("{}3", &VALUE[..VALUE.len() - 1]);
    let body = format!("k={near}&z={}", "y".repeat(5000));
    let (a, b) = body.as_bytes().split_at(10);
    let answer = post(&proxy, sink.port(), "", &[a, b], false).await.unwrap();
    assert_eq!(answer.status, 200, "{}", proxy.diagnostics());
    assert!(sink.holds(body.as_bytes()), "the body arrived whole");
    assert!(denied(&proxy).is_empty());
}

/// Run curl through the proxy with `args` (on a blocking thread: the sink answers on
/// this runtime); its status code.
async fn curl(proxy: &Proxy, url: &str, args: &[&str]) -> String {
    let mut command = std::process::Command::new("curl");
    command
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .args(["-x", &format!("http://{}", proxy.addr)])
        .args(args)
        .arg(url)
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY");
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[tokio::test]
async fn curl_data_and_data_urlencode_carrying_a_canary_are_refused() {
    let (sink, proxy) = sink_and_proxy("curl").await;
    let url = format!("http://allowed.test:{}/issues", sink.port());
    let proxy2 = &proxy;
    let run = |args: Vec<String>| {
        let url = url.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            curl(proxy2, &url, &args).await
        }
    };
    assert_eq!(run(vec!["--data".into(), "body=hello".into()]).await, "200");
    let hex = data_encoding::HEXLOWER.encode(VALUE.as_bytes());
    let carrying = [
        vec!["--data".to_string(), format!("body=leaked {VALUE} here")],
        vec![
            "--data-urlencode".to_string(),
            format!("body=leaked {VALUE} here"),
        ],
        vec![
            "--data-binary".to_string(),
            format!("{{\"blob\": \"{hex}\"}}"),
        ],
    ];
    for args in carrying {
        assert_eq!(run(args.clone()).await, "403", "{args:?}");
    }
    assert_eq!(wait_denied(&proxy, 3).await.len(), 3);
    assert!(!sink.holds(VALUE.as_bytes()) && !sink.holds(hex.as_bytes()));
}

#[tokio::test]
async fn a_sessions_canary_in_a_body_ends_the_session() {
    let sink = Sink::start().await;
    let proxy = sessions::proxy_with(&sessions::org(sink.port()), &[]).await;
    let body = json!({
        "network_policy": sessions::allowlist(&["allowed.test"]),
        "canaries": [{"kind": "openai_api_key"}],
    });
    let created = proxy
        .admin()
        .call("POST", "/v1/sessions", Some(&body.to_string()))
        .await;
    assert_eq!(created.status, 201);
    let created = created.json();
    let value = created["canaries"][0]["value"]
        .as_str()
        .unwrap()
        .to_string();
    let auth = crate::support::admin::basic(
        created["id"].as_str().unwrap(),
        created["token"].as_str().unwrap(),
    );
    let extra = format!("Proxy-Authorization: {auth}\r\n");
    let payload = format!("{{\"prompt\": \"{value}\"}}");
    let (a, b) = payload.as_bytes().split_at(20);
    let answer = post(&proxy, sink.port(), &extra, &[a, b], true)
        .await
        .unwrap();
    assert_eq!(answer.status, 403, "{}", answer.text());
    let url = format!("http://allowed.test:{}/", sink.port());
    let after = get_via_proxy(proxy.addr, &url, &[("proxy-authorization", &auth)]).await;
    assert_eq!(after.status, 407, "the session ended: {}", after.text());
    let ended = proxy
        .wait_audit(|r| r["event"] == "session.ended", Duration::from_secs(5))
        .await;
    assert_eq!(ended["cause"], "canary");
    assert_eq!(ended["dlp"]["found_in"], "body");
    assert_eq!(wait_denied(&proxy, 1).await.len(), 1);
    assert!(!sink.holds(value.as_bytes()));
    assert!(!proxy.audit_text().contains(&value) && !proxy.stderr().contains(&value));
}
