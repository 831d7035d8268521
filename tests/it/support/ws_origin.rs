//! A real WebSocket origin: Python's `websockets` (PyPI), started by the test on a
//! loopback port, echoing every message and printing the target of every handshake it
//! is sent and, for each connection that closes, its path and the payload bytes it
//! received. A handshake whose target has `decline` in it is answered 403, not
//! switched; `ok-instead`, 200; `bad-accept` is switched with a `Sec-WebSocket-Accept`
//! that answers no key. Over TLS with a certificate the test makes, or plain. Tests
//! skip, saying why, when `python3` cannot import `websockets` (`.ci/run` installs it).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SERVER: &str = r#"
import asyncio, ssl, sys
from http import HTTPStatus
from websockets.asyncio.server import serve

def seen(connection, request):
    print("request", request.path, flush=True)
    if "decline" in request.path:
        return connection.respond(HTTPStatus.FORBIDDEN, "declined\n")
    if "ok-instead" in request.path:
        return connection.respond(HTTPStatus.OK, "not a websocket\n")

def answered(connection, request, response):
    if "bad-accept" in request.path:
        del response.headers["Sec-WebSocket-Accept"]
        response.headers["Sec-WebSocket-Accept"] = "c29tZXRoaW5nIGVsc2U="

async def echo(ws):
    got = 0
    try:
        async for message in ws:
            got += len(message)
            await ws.send(message)
    except Exception:
        pass
    finally:
        print("closed", ws.request.path, got, flush=True)

async def main():
    ctx = None
    if len(sys.argv) > 2:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[1], sys.argv[2])
    async with serve(echo, "127.0.0.1", 0, ssl=ctx, process_request=seen, process_response=answered) as server:
        print("listening", server.sockets[0].getsockname()[1], flush=True)
        await asyncio.get_running_loop().create_future()

asyncio.run(main())
"#;

/// Why the WebSocket tests cannot run here, if they cannot.
pub(crate) fn skip_reason() -> Option<String> {
    let found = Command::new("python3")
        .args([
            "-c",
            "import websockets.asyncio.server, websockets.sync.client",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    (!found).then(|| "python3 cannot import websockets 15 (pip install websockets)".to_string())
}

/// Return from the test, saying why, when the origin cannot run.
macro_rules! require_websockets {
    () => {
        if let Some(reason) = crate::support::ws_origin::skip_reason() {
            eprintln!("skipped: {reason}");
            return;
        }
    };
}
pub(crate) use require_websockets;

/// The running origin; killed (by its PID) when dropped.
pub(crate) struct WsOrigin {
    child: Child,
    pub port: u16,
    seen: Arc<Mutex<Seen>>,
}

/// What the origin said: the handshakes' targets, the closed connections.
#[derive(Default)]
struct Seen {
    requests: Vec<String>,
    closed: Vec<(String, usize)>,
}

impl WsOrigin {
    /// A plain (`ws://`) origin.
    pub(crate) fn plain() -> WsOrigin {
        WsOrigin::start(&[])
    }

    /// A `wss://` origin with the certificate and key in these PEM files.
    pub(crate) fn tls(cert: &Path, key: &Path) -> WsOrigin {
        WsOrigin::start(&[cert.to_path_buf(), key.to_path_buf()])
    }

    fn start(args: &[PathBuf]) -> WsOrigin {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(SERVER)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the WebSocket origin");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let port = first
            .strip_prefix("listening ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("the WebSocket origin said {first:?}"));
        let seen = Arc::new(Mutex::new(Seen::default()));
        read_seen(lines, seen.clone());
        WsOrigin { child, port, seen }
    }

    /// The target of every handshake the origin was sent, so far.
    pub(crate) fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().requests.clone()
    }

    /// Each closed connection's path and payload bytes received, waiting up to
    /// `within` for at least `n`.
    pub(crate) fn closed(&self, n: usize, within: Duration) -> Vec<(String, usize)> {
        let started = Instant::now();
        loop {
            let closed = self.seen.lock().unwrap().closed.clone();
            if closed.len() >= n || started.elapsed() > within {
                return closed;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn read_seen(lines: std::io::Lines<BufReader<ChildStdout>>, into: Arc<Mutex<Seen>>) {
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some("request"), Some(target), None) => {
                    into.lock().unwrap().requests.push(target.to_string());
                }
                (Some("closed"), Some(path), Some(bytes)) => {
                    let bytes = bytes.parse().unwrap_or(0);
                    into.lock().unwrap().closed.push((path.to_string(), bytes));
                }
                _ => {}
            }
        }
    });
}

impl Drop for WsOrigin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
