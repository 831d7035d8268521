//! A hostile h2 client inside an intercepted tunnel: a rapid-reset flood (streams opened
//! and reset at once), a SETTINGS flood (each frame asking for an ACK the client never
//! reads) and a CONTINUATION flood (a header block that never ends). Each
//! runs, bounded, while another client's requests through the same proxy keep being
//! answered, and the flooding connection is ended by the proxy.

use std::time::Duration;

use super::{python_missing, run, show, Setup};
use crate::support::client::Conn;
use crate::support::tls::{ca_cert, Inner};

/// Open a tunnel to AUTHORITY through PROXY, TLS with ALPN h2 trusting CA, then flood
/// (`reset` or `continuation`) up to N times; print how it ended: `goaway CODE` when the
/// proxy sent GOAWAY, `closed` when it closed, `sent` when everything went.
const FLOOD: &str = r#"
import socket, ssl, struct, sys, time
import h2.config, h2.connection, h2.events, h2.exceptions
proxy, ca, authority, kind, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
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
conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
conn.initiate_connection()
sock.sendall(conn.data_to_send())
headers = [(":method", "GET"), (":path", "/flood"), (":scheme", "https"), (":authority", authority)]

def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload

def outcome():
    sock.settimeout(5)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return "closed"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ConnectionTerminated):
                    return "goaway %d" % event.error_code
            sock.sendall(conn.data_to_send())
    except (ConnectionError, ssl.SSLError, OSError, h2.exceptions.ProtocolError) as e:
        return "closed"

try:
    if kind == "reset":
        for i in range(n):
            stream = conn.get_next_available_stream_id()
            conn.send_headers(stream, headers, end_stream=True)
            conn.reset_stream(stream)
            sock.sendall(conn.data_to_send())
    elif kind == "settings":
        # SETTINGS frames, each asking for an ACK, never reading the ACKs.
        settings = frame(0x4, 0x0, 0, struct.pack(">HI", 0x3, 100))
        for i in range(n):
            sock.sendall(settings * 64)
    else:
        # One HEADERS without END_HEADERS, then CONTINUATIONs of 16 KiB each, never
        # ending the block: literal headers the server must buffer to decode.
        block = b"".join(b"\x00\x01x\x7f\x81\x7f" + b"v" * 16 for _ in range(900))[:16384]
        sock.sendall(frame(0x1, 0x1, 1, block))
        for i in range(n):
            sock.sendall(frame(0x9, 0x0, 1, block))
    print("sent", outcome())
except (ConnectionError, ssl.SSLError, OSError, h2.exceptions.ProtocolError) as e:
    print("stopped", outcome())
"#;

/// Flood with `kind` while another client sends GETs through the proxy in its own
/// tunnel; every one of them is answered, and the flood ends with the proxy ending it.
async fn flood_while_serving(kind: &str, n: u32) {
    if python_missing("h2") {
        return;
    }
    let s = Setup::start().await;
    let authority = format!("secure.test:{}", s.bed.origin.port());
    let args = vec![
        "-c".to_string(),
        FLOOD.to_string(),
        s.proxy.addr.to_string(),
        s.ca_pem(),
        authority.clone(),
        kind.to_string(),
        n.to_string(),
    ];
    let flood = tokio::spawn(run("python3", args, Duration::from_secs(60)));
    // Meanwhile, another client: a GET every 20 ms in a tunnel of its own.
    let mut served = 0;
    while !flood.is_finished() && served < 500 {
        let (answer, conn) =
            crate::support::client::connect_via_proxy(s.proxy.addr, &authority, &[]).await;
        assert_eq!(answer.status, 200);
        let mut inner = Inner::handshake(
            Conn::from_stream(conn.into_stream()),
            "secure.test",
            ca_cert(&s.bed.ca),
        )
        .await;
        let got = inner.request("GET", "/other", &[], b"").await;
        assert_eq!(
            got.status, 200,
            "another client was not served during the {kind} flood"
        );
        served += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = flood.await.expect("the flood's task");
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        said.contains("goaway") || said.contains("closed"),
        "the proxy let the {kind} flood run to its end: {}",
        show(&out)
    );
    eprintln!("{kind} flood: {said} while {served} other requests were served");
    // And after it, a request is still answered.
    let mut inner = Inner::open(
        s.proxy.addr,
        "secure.test",
        s.bed.origin.port(),
        ca_cert(&s.bed.ca),
        &[],
    )
    .await;
    assert_eq!(inner.request("GET", "/after", &[], b"").await.status, 200);
}

#[tokio::test]
async fn a_rapid_reset_flood_is_ended_and_other_clients_are_still_served() {
    flood_while_serving("reset", 20_000).await;
}

#[tokio::test]
async fn a_settings_flood_is_ended_and_other_clients_are_still_served() {
    flood_while_serving("settings", 2_000).await;
}

#[tokio::test]
async fn a_continuation_flood_is_ended_and_other_clients_are_still_served() {
    flood_while_serving("continuation", 2_000).await;
}
