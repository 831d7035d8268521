//! `wss://` over HTTP/2 inside an intercepted tunnel, by RFC 8441's extended `CONNECT`:
//! the proxy advertises it, judges the stream as the HTTP/1.1 handshake it stands for,
//! opens the origin's WebSocket over HTTP/1.1 and relays the stream's bytes, budgeted
//! and audited as an HTTP/1.1 WebSocket's. The client is Python's `h2` driven by hand,
//! its frames made by `wsproto`; the origin the echo of [`WsOrigin`].
//!
//! [`WsOrigin`]: crate::support::ws_origin::WsOrigin

use std::process::Output;
use std::time::Duration;

use super::{said, Setup};
use crate::support::proxy::AUDIT_TIMEOUT;
use crate::support::ws_origin::require_websockets;

/// Open a tunnel to AUTHORITY through PROXY, TLS with ALPN h2 trusting CA, print
/// `connect-protocol N` (the proxy's SETTINGS_ENABLE_CONNECT_PROTOCOL), then run each
/// STEP on one stream of that one connection, printing a line for each:
/// - `ws PATH N SIZE`: an extended CONNECT for `websocket`; once answered 200, N
///   messages of SIZE bytes, each read back, then the closing handshake and the end of
///   the stream. Prints `echoed N ACCEPT` (ACCEPT: `accept` when the 200 carried a
///   Sec-WebSocket-Accept, else `-`), `refused STATUS REASON` for another answer, or
///   `ended AFTER HOW` when the stream ended after AFTER echoes.
/// - `ws+ PATH N SIZE TEXT`: as `ws`, with one more message, TEXT, after the N.
/// - `proto PATH NAME`: an extended CONNECT for `:protocol NAME`; `refused STATUS REASON`.
/// - `connect`: a plain CONNECT stream; `refused STATUS REASON`.
const CLIENT: &str = r#"
import socket, ssl, sys
import h2.config, h2.connection, h2.events
from wsproto.connection import Connection, ConnectionType
from wsproto.events import CloseConnection, TextMessage
proxy, ca, authority, steps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
host, port = proxy.rsplit(":", 1)
raw = socket.create_connection((host, int(port)), timeout=10)
raw.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
head = b""
while b"\r\n\r\n" not in head:
    head += raw.recv(1)
assert head.startswith(b"HTTP/1.1 200"), head
ctx = ssl.create_default_context(cafile=ca)
ctx.set_alpn_protocols(["h2"])
sock = ctx.wrap_socket(raw, server_hostname=authority.rsplit(":", 1)[0])
assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()
# Unvalidated: h2 would not send a plain CONNECT (no :path) of its own accord.
config = h2.config.H2Configuration(client_side=True, validate_outbound_headers=False)
conn = h2.connection.H2Connection(config)
conn.initiate_connection()
sock.sendall(conn.data_to_send())
queue = []

class Ended(Exception):
    pass

def pump():
    data = sock.recv(65536)
    if not data:
        raise Ended("closed")
    for event in conn.receive_data(data):
        if isinstance(event, h2.events.DataReceived):
            conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        queue.append(event)
    sock.sendall(conn.data_to_send())

def next_event(stream, kinds):
    while True:
        for i, event in enumerate(queue):
            if isinstance(event, kinds) and getattr(event, "stream_id", stream) == stream:
                return queue.pop(i)
        pump()

def send(stream, data):
    while data:
        room = min(conn.local_flow_control_window(stream), conn.max_outbound_frame_size)
        if room == 0:
            pump()
            continue
        conn.send_data(stream, data[:room])
        data = data[room:]
        sock.sendall(conn.data_to_send())

STREAM = (h2.events.ResponseReceived, h2.events.DataReceived, h2.events.StreamEnded, h2.events.StreamReset)

def answer(stream):
    event = next_event(stream, STREAM)
    if isinstance(event, h2.events.StreamReset):
        raise Ended("reset %d" % event.error_code)
    if not isinstance(event, h2.events.ResponseReceived):
        raise Ended(type(event).__name__)
    return {k.decode(): v.decode() for k, v in event.headers}

def refused(stream, headers):
    print("refused", headers[":status"], headers.get("x-egress-denied", "-"), flush=True)
    while not isinstance(next_event(stream, STREAM), (h2.events.StreamEnded, h2.events.StreamReset)):
        pass

def open_stream(headers):
    stream = conn.get_next_available_stream_id()
    conn.send_headers(stream, headers)
    sock.sendall(conn.data_to_send())
    return stream

def extended(path, protocol):
    return open_stream([(":method", "CONNECT"), (":protocol", protocol), (":scheme", "https"),
        (":path", path), (":authority", authority), ("sec-websocket-version", "13")])

def websocket(path, n, size, last=None):
    messages = ["x" * size] * n + ([last] if last is not None else [])
    stream = extended(path, "websocket")
    headers = answer(stream)
    if headers[":status"] != "200":
        return refused(stream, headers)
    ws = Connection(ConnectionType.CLIENT)
    done = 0
    def read(want):
        while True:
            for event in ws.events():
                if isinstance(event, want):
                    return event
            event = next_event(stream, STREAM)
            if isinstance(event, h2.events.DataReceived):
                ws.receive_data(event.data)
            elif isinstance(event, h2.events.StreamReset):
                raise Ended("reset %d" % event.error_code)
            else:
                raise Ended(type(event).__name__)
    try:
        for message in messages:
            send(stream, ws.send(TextMessage(data=message)))
            got = 0
            while got < len(message):
                got += len(read(TextMessage).data)
            done += 1
        send(stream, ws.send(CloseConnection(code=1000)))
        read(CloseConnection)
        conn.end_stream(stream)
        sock.sendall(conn.data_to_send())
        # Upstream closed after the closing handshake: the proxy ends the stream.
        while not isinstance(next_event(stream, STREAM), h2.events.StreamEnded):
            pass
        print("echoed", done, "accept" if "sec-websocket-accept" in headers else "-", flush=True)
    except (Ended, ConnectionError, ssl.SSLError, OSError) as e:
        print("ended", done, e, flush=True)

while not any(isinstance(e, h2.events.RemoteSettingsChanged) for e in queue):
    pump()
print("connect-protocol", conn.remote_settings.enable_connect_protocol, flush=True)
at = 0
while at < len(steps):
    kind = steps[at]
    if kind == "ws":
        websocket(steps[at + 1], int(steps[at + 2]), int(steps[at + 3]))
        at += 4
    elif kind == "ws+":
        websocket(steps[at + 1], int(steps[at + 2]), int(steps[at + 3]), steps[at + 4])
        at += 5
    elif kind == "proto":
        stream = extended(steps[at + 1], steps[at + 2])
        refused(stream, answer(stream))
        at += 3
    else:
        stream = open_stream([(":method", "CONNECT"), (":authority", authority)])
        refused(stream, answer(stream))
        at += 1
"#;

/// Run [`CLIENT`] with `steps` on a blocking thread, bounded; its lines.
async fn client(s: &Setup, steps: &[&str]) -> (Vec<String>, Output) {
    let mut args = vec![
        "-c".to_string(),
        CLIENT.to_string(),
        s.proxy.addr.to_string(),
        s.ca.display().to_string(),
        format!("secure.test:{}", s.origin.port),
    ];
    args.extend(steps.iter().map(|s| s.to_string()));
    let run = move || std::process::Command::new("python3").args(args).output();
    let out = tokio::time::timeout(Duration::from_secs(60), tokio::task::spawn_blocking(run))
        .await
        .expect("the client ends in time")
        .expect("the client's thread")
        .expect("run python3");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    (lines, out)
}

/// Whether `python3` can import the client's `h2` and `wsproto`; says why not when not.
fn client_missing() -> bool {
    let found = std::process::Command::new("python3")
        .args(["-c", "import h2, wsproto"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: python3 cannot import h2 and wsproto (pip install h2 wsproto)");
    }
    !found
}

#[tokio::test]
async fn an_h2_websocket_is_advertised_relayed_and_audited_when_it_opens_and_closes() {
    require_websockets!();
    if client_missing() {
        return;
    }
    let s = Setup::start(None).await;
    let (lines, out) = client(&s, &["ws", "/echo", "3", "1000"]).await;
    // Advertised; echoed; the 200 carries no accept value (RFC 8441 5).
    assert_eq!(
        lines,
        ["connect-protocol 1", "echoed 3 -"],
        "{}",
        said(&out)
    );
    assert_eq!(
        s.origin.closed(1, Duration::from_secs(15)),
        [("/echo".to_string(), 3000)]
    );
    assert_eq!(s.origin.requests(), ["/echo"]);
    // Judged and recorded as the handshake it stands for: a GET of its path.
    s.assert_echo_records().await;
}

#[tokio::test]
async fn an_h2_websocket_to_a_refused_path_is_403_on_its_stream_and_the_connection_goes_on() {
    require_websockets!();
    if client_missing() {
        return;
    }
    let s = Setup::start(None).await;
    let steps = ["ws", "/admin", "1", "10", "ws", "/echo", "1", "10"];
    let (lines, out) = client(&s, &steps).await;
    assert_eq!(
        lines,
        [
            "connect-protocol 1",
            "refused 403 path_not_allowed",
            "echoed 1 -"
        ],
        "{}",
        said(&out)
    );
    let denied = s
        .proxy
        .wait_audit(|r| r["event"] == "egress.denied", AUDIT_TIMEOUT)
        .await;
    assert_eq!(denied["reason"], "path_not_allowed");
    assert_eq!(denied["method"], "GET");
    assert_eq!(
        denied["url"],
        format!("https://secure.test:{}/admin", s.origin.port)
    );
    assert_eq!(
        s.origin.closed(1, Duration::from_secs(15)),
        [("/echo".to_string(), 10)]
    );
    assert_eq!(
        s.origin.requests(),
        ["/echo"],
        "the refused path reached the origin"
    );
}

#[tokio::test]
async fn the_upload_budget_closes_an_h2_websocket_and_the_origin_gets_no_more_than_it() {
    require_websockets!();
    if client_missing() {
        return;
    }
    const BUDGET: u64 = 20_000;
    let s = Setup::start(Some(BUDGET)).await;
    let (lines, out) = client(&s, &["ws", "/echo", "10", "4000"]).await;
    assert!(
        lines.get(1).is_some_and(|l| l.starts_with("ended")),
        "the budget did not end it: {}",
        said(&out)
    );
    s.assert_cut_at(BUDGET).await;
}

#[tokio::test]
async fn other_extended_connects_are_refused_and_only_a_proper_switch_opens() {
    require_websockets!();
    if client_missing() {
        return;
    }
    let s = Setup::start(None).await;
    let steps = [
        "proto",
        "/echo",
        "connect-udp",
        "connect",
        "ws",
        "/echo?decline",
        "1",
        "10",
        "ws",
        "/echo?ok-instead",
        "1",
        "10",
        "ws",
        "/echo?bad-accept",
        "1",
        "10",
        "ws",
        "/echo",
        "1",
        "10",
    ];
    let (lines, out) = client(&s, &steps).await;
    assert_eq!(
        lines,
        [
            "connect-protocol 1",
            // Another upgrade than a WebSocket's, as over HTTP/1.1.
            "refused 400 invalid_request",
            // A CONNECT stream, as before.
            "refused 403 method_not_allowed",
            // The origin's own answer, with no tunnel.
            "refused 403 -",
            // A 200 that is not a switch, and a switch whose accept value answers
            // another key: upstream failed the handshake, and no stream opens.
            "refused 502 -",
            "refused 502 -",
            "echoed 1 -",
        ],
        "{}",
        said(&out)
    );
    let seen = [
        "/echo?decline",
        "/echo?ok-instead",
        "/echo?bad-accept",
        "/echo",
    ];
    assert_eq!(s.origin.requests(), seen);
    s.proxy
        .wait_audit(|r| r["event"] == "websocket.closed", AUDIT_TIMEOUT)
        .await;
    let opened: Vec<String> = s
        .proxy
        .audit_lines()
        .iter()
        .filter(|r| r["event"] == "websocket.opened")
        .map(|r| r["url"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        opened,
        [format!("https://secure.test:{}/echo", s.origin.port)],
        "only the accepted handshake opened"
    );
}

/// A value the `github_token` detector finds (docs/reference/dlp.md).
const GITHUB: &str = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789";

/// A secret in a message of a WebSocket over h2 (docs/reference/dlp.md, "WebSocket
/// messages") is refused as over HTTP/1.1: the messages before it are echoed, the stream
/// ends before the secret reaches the origin, and the record names the detector, found
/// in `websocket`, never the value. Without the detector, the same message is echoed.
#[tokio::test]
async fn a_secret_in_an_h2_websocket_message_ends_the_stream_before_the_origin_gets_it() {
    require_websockets!();
    if client_missing() {
        return;
    }
    let message = format!("token={GITHUB}");
    let steps = ["ws+", "/echo", "2", "10", message.as_str()];
    // The control: no detector, so the message goes through.
    let open = Setup::start(None).await;
    let (lines, out) = client(&open, &steps).await;
    assert_eq!(
        lines,
        ["connect-protocol 1", "echoed 3 -"],
        "{}",
        said(&out)
    );
    assert_eq!(
        open.origin.closed(1, Duration::from_secs(15)),
        [("/echo".to_string(), 20 + message.len())]
    );

    let s = Setup::start_with(None, Some("[dlp]\ndetectors = [\"github_token\"]")).await;
    let (lines, out) = client(&s, &steps).await;
    assert_eq!(lines.len(), 2, "{}", said(&out));
    assert!(
        lines[1].starts_with("ended 2 "),
        "the two clean messages echoed, then the stream ended: {}",
        said(&out)
    );
    assert_eq!(
        s.origin.closed(1, Duration::from_secs(15)),
        [("/echo".to_string(), 20)],
        "the origin had the two clean messages and no third"
    );
    let denied = s
        .proxy
        .wait_audit(|r| r["event"] == "egress.denied", AUDIT_TIMEOUT)
        .await;
    assert_eq!(denied["reason"], "secret_detected", "{denied}");
    assert_eq!(denied["policy_level"], "dlp", "{denied}");
    assert_eq!(
        denied["dlp"],
        serde_json::json!({"id": "github_token", "kind": "detector",
            "encoding": "plain", "found_in": "websocket"}),
        "{denied}"
    );
    let log = s.proxy.audit_text();
    assert!(!log.contains(GITHUB), "the value is in the audit log");
}
