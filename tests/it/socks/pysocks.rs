//! A real Python client: PySocks, configured from `ALL_PROXY=socks5h://...` as a tool
//! that knows only that variable would be, sending the name to the proxy (`rdns`): the
//! script never resolves a name itself.
//! Skipped, with a reason printed, when `python3` has no `socks` module (`.ci/run`
//! installs PySocks).

use std::process::Command;
use std::time::Duration;

use super::{assert_socks_record, Setup};

/// Read `ALL_PROXY`, send every socket through it, then GET `allowed.test` and
/// `evil.test` on PORT: one line for each, what happened.
const SCRIPT: &str = r#"
import os, sys, urllib.parse
import socks
proxy = urllib.parse.urlparse(os.environ["ALL_PROXY"])
assert proxy.scheme == "socks5h", proxy
port = int(sys.argv[1])
for host in ["allowed.test", "evil.test"]:
    # A socksocket connects by name through the proxy (rdns): nothing is resolved
    # here. (http.client would look the name up itself first.)
    sock = socks.socksocket()
    sock.set_proxy(socks.SOCKS5, proxy.hostname, proxy.port, rdns=True)
    sock.settimeout(10)
    try:
        sock.connect((host, port))
        sock.sendall(f"GET /pysocks HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        status = answer.split(b"\r\n", 1)[0].decode()
        body = answer.split(b"\r\n\r\n", 1)[1].decode()
        print(host, "answered", status, body)
    except socks.ProxyError as e:
        print(host, "refused", type(e).__name__, e)
    finally:
        sock.close()
"#;

/// Whether `python3` can import PySocks; says why not when it cannot.
fn pysocks_missing() -> bool {
    let found = Command::new("python3")
        .args(["-c", "import socks"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: python3 has no `socks` module (pip install PySocks)");
    }
    !found
}

#[tokio::test]
async fn python_with_pysocks_from_all_proxy_reaches_an_allowed_name_and_not_a_denied_one() {
    if pysocks_missing() {
        return;
    }
    let s = Setup::start(&[]).await;
    let port = s.origin.port().to_string();
    let all_proxy = format!("socks5h://{}", s.socks);
    let run = move || {
        Command::new("python3")
            .args(["-c", SCRIPT, &port])
            .env("ALL_PROXY", all_proxy)
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .output()
    };
    let out = tokio::time::timeout(Duration::from_secs(30), tokio::task::spawn_blocking(run))
        .await
        .expect("python ends in time")
        .expect("python's thread")
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "allowed.test answered HTTP/1.1 200 OK {}",
            s.origin.body()
        )),
        "{stdout}"
    );
    // Reply 0x02, which PySocks reports as "Connection not allowed by ruleset".
    assert!(stdout.contains("evil.test refused"), "{stdout}");
    assert!(stdout.contains("not allowed by ruleset"), "{stdout}");
    assert_eq!(
        s.origin.hits(),
        1,
        "only the allowed request reached the origin"
    );
    assert_eq!(
        s.dns.queries_for("evil.test"),
        0,
        "the denied name was looked up"
    );
    let allowed = s.proxy.allowed_record().await;
    assert_socks_record(&allowed, "egress.allowed", None);
    assert_eq!(allowed["host"], "allowed.test");
    let denied = s
        .proxy
        .wait_audit(
            |r| r["host"] == "evil.test",
            crate::support::proxy::AUDIT_TIMEOUT,
        )
        .await;
    assert_socks_record(&denied, "egress.denied", Some("not_in_org_allowlist"));
}
