//! WebSocket through the proxy (docs/reference/inspection.md, "WebSocket"): an allowed
//! `Upgrade: websocket` is forwarded with its upgrade and relayed after the `101`, its
//! bytes up paid from the upload budget, audited when it opens and when it closes; a
//! refused path never reaches the origin; every other upgrade is `invalid_request`. The
//! origin is a real one (Python's websockets); so is the client inside TLS.
//!
//! - [`inspected`]: `wss://` inside an intercepted tunnel: echo, a refused path, the
//!   budget.
//! - [`plain`]: an absolute-form `ws://` request, and an `h2c` upgrade refused.
//! - [`over_h2`]: `wss://` over HTTP/2 by RFC 8441's extended `CONNECT`: echo, a refused
//!   path, the budget, a secret in a message, other `:protocol` values and a declined
//!   handshake.

mod inspected;
mod over_h2;
mod plain;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use crate::support::org::Org;
use crate::support::proxy::{Proxy, ProxyBuilder, AUDIT_TIMEOUT};
use crate::support::tls::ca_init;
use crate::support::unique_temp_dir;
use crate::support::ws_origin::WsOrigin;

/// The entry that allows the echo path (and nothing else) on `secure.test`: a path rule,
/// so its tunnels are intercepted.
const ECHO_ONLY: &str = r#"{ host = "secure.test", paths = ["/echo"] }"#;

/// A `wss://` origin for `secure.test` with a certificate of the test's own, and a
/// proxy inspecting it under [`ECHO_ONLY`] (with `budget`, the request policy's
/// `max_upload_bytes`).
struct Setup {
    origin: WsOrigin,
    proxy: Proxy,
    ca: PathBuf,
}

impl Setup {
    async fn start(budget: Option<u64>) -> Setup {
        Setup::start_with(budget, None).await
    }

    /// [`Setup::start`] with `dlp` as the organization's `[dlp]` table.
    async fn start_with(budget: Option<u64>, dlp: Option<&str>) -> Setup {
        let dir = unique_temp_dir("websocket");
        let certified = rcgen::generate_simple_self_signed(vec!["secure.test".into()]).unwrap();
        let (cert, key) = (dir.join("origin.pem"), dir.join("origin-key.pem"));
        std::fs::write(&cert, certified.cert.pem()).unwrap();
        std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
        let origin = WsOrigin::tls(&cert, &key);
        let ca_dir = ca_init(&dir);
        let mut org = Org::new()
            .allow_entry(ECHO_ONLY)
            .ports(&[origin.port])
            .loopback();
        if let Some(dlp) = dlp {
            org = org.raw_line(dlp);
        }
        let org = org.to_toml();
        let mut policy = serde_json::json!({"type": "allowlist",
            "allowed_domains": [{"host": "secure.test", "paths": ["/echo"]}]});
        if let Some(bytes) = budget {
            policy["max_upload_bytes"] = bytes.into();
        }
        let proxy = ProxyBuilder::new(org)
            .policy(policy.to_string())
            .pin("secure.test")
            .arg("--ca")
            .arg(ca_dir.to_str().unwrap())
            .arg("--upstream-ca")
            .arg(cert.to_str().unwrap())
            .start()
            .await;
        Setup {
            origin,
            proxy,
            ca: ca_dir.join("ca.pem"),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("wss://secure.test:{}{path}", self.origin.port)
    }

    /// The records of one echo of 3,000 bytes up on `/echo`: `websocket.opened` as a
    /// `GET` of its URL, then `websocket.closed` with more than that each way and the
    /// same request id.
    /// What a WebSocket on `/echo` cut by a `budget` of at least 8,000 bytes leaves: the
    /// origin got less than the budget (and not far less), and the record is the
    /// budget's `egress.denied` with no more than it up.
    async fn assert_cut_at(&self, budget: u64) {
        let closed = self.origin.closed(1, Duration::from_secs(15));
        assert_eq!(closed.len(), 1, "{closed:?}");
        let (path, got) = &closed[0];
        assert_eq!(path, "/echo");
        let got = *got as u64;
        assert!(
            got < budget,
            "the origin got {got} payload bytes of a {budget} budget"
        );
        assert!(got >= 8000, "the budget ended it too early: {got}");
        let cut = self
            .proxy
            .wait_audit(|r| r["reason"] == "upload_budget_exceeded", AUDIT_TIMEOUT)
            .await;
        assert_eq!(cut["event"], "egress.denied");
        assert!(cut["bytes_up"].as_u64().unwrap() <= budget, "{cut}");
    }

    async fn assert_echo_records(&self) {
        let opened = self
            .proxy
            .wait_audit(|r| r["event"] == "websocket.opened", AUDIT_TIMEOUT)
            .await;
        assert_eq!(opened["host"], "secure.test");
        assert_eq!(opened["method"], "GET");
        let url = format!("https://secure.test:{}/echo", self.origin.port);
        assert_eq!(opened["url"], url);
        let closed = self
            .proxy
            .wait_audit(|r| r["event"] == "websocket.closed", AUDIT_TIMEOUT)
            .await;
        let up = closed["bytes_up"].as_u64().unwrap();
        let down = closed["bytes_down"].as_u64().unwrap();
        let diagnostics = self.proxy.diagnostics();
        assert!(up > 3000 && down > 3000, "{closed}\n{diagnostics}");
        assert_eq!(closed["request_id"], opened["request_id"]);
    }
}

/// Connect to URL through PROXY trusting CA, send N messages of SIZE bytes, each read
/// back; print `echoed N`, `refused STATUS REASON`, or `ended AFTER ERROR` when the
/// connection ended after AFTER echoes.
const CLIENT: &str = r#"
import ssl, sys
from websockets.sync.client import connect
from websockets.exceptions import InvalidStatus
proxy, ca, url, n, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
ctx = ssl.create_default_context(cafile=ca)
done = 0
try:
    # No compression: the bytes on the wire are the bytes sent, for the budget.
    with connect(url, proxy=proxy, ssl=ctx, open_timeout=10, close_timeout=2, compression=None) as ws:
        for i in range(n):
            ws.send("x" * size)
            assert len(ws.recv(timeout=10)) == size
            done += 1
    print("echoed", done)
except InvalidStatus as e:
    print("refused", e.response.status_code, e.response.headers.get("x-egress-denied"))
except Exception as e:
    print("ended", done, type(e).__name__)
"#;

/// Run [`CLIENT`] on a blocking thread, bounded.
async fn client(s: &Setup, path: &str, n: usize, size: usize) -> Output {
    let args = vec![
        "-c".to_string(),
        CLIENT.to_string(),
        format!("http://{}", s.proxy.addr),
        s.ca.display().to_string(),
        s.url(path),
        n.to_string(),
        size.to_string(),
    ];
    let run = move || std::process::Command::new("python3").args(args).output();
    tokio::time::timeout(Duration::from_secs(60), tokio::task::spawn_blocking(run))
        .await
        .expect("the client ends in time")
        .expect("the client's thread")
        .expect("run python3")
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
