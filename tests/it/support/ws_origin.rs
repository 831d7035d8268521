//! A real WebSocket origin: Python's `websockets` (PyPI), started by the test on a
//! loopback port, echoing every message and printing, for each connection that
//! closes, its path and the payload bytes it received. Over TLS with a certificate
//! the test makes, or plain. Tests skip, saying why, when `python3` cannot import
//! `websockets` (`.ci/run` installs it).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SERVER: &str = r#"
import asyncio, ssl, sys
from websockets.asyncio.server import serve

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
    async with serve(echo, "127.0.0.1", 0, ssl=ctx) as server:
        print("listening", server.sockets[0].getsockname()[1], flush=True)
        await asyncio.get_running_loop().create_future()

asyncio.run(main())
"#;

/// Why the WebSocket tests cannot run here, if they cannot.
pub fn skip_reason() -> Option<String> {
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
pub struct WsOrigin {
    child: Child,
    pub port: u16,
    closed: Arc<Mutex<Vec<(String, usize)>>>,
}

impl WsOrigin {
    /// A plain (`ws://`) origin.
    pub fn plain() -> WsOrigin {
        WsOrigin::start(&[])
    }

    /// A `wss://` origin with the certificate and key in these PEM files.
    pub fn tls(cert: &Path, key: &Path) -> WsOrigin {
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
        let closed = Arc::new(Mutex::new(Vec::new()));
        read_closed(lines, closed.clone());
        WsOrigin {
            child,
            port,
            closed,
        }
    }

    /// Each closed connection's path and payload bytes received, waiting up to
    /// `within` for at least `n`.
    pub fn closed(&self, n: usize, within: Duration) -> Vec<(String, usize)> {
        let started = Instant::now();
        loop {
            let closed = self.closed.lock().unwrap().clone();
            if closed.len() >= n || started.elapsed() > within {
                return closed;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn read_closed(
    lines: std::io::Lines<BufReader<ChildStdout>>,
    into: Arc<Mutex<Vec<(String, usize)>>>,
) {
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let mut words = line.split_whitespace();
            if let (Some("closed"), Some(path), Some(bytes)) =
                (words.next(), words.next(), words.next())
            {
                let bytes = bytes.parse().unwrap_or(0);
                into.lock().unwrap().push((path.to_string(), bytes));
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
