//! Real tools in the jail (docs/guides/confinement.md): curl, Python's `urllib` and
//! sockets, `pip download` and `git clone`, each once as it comes (the proxy variables
//! `run` sets) and once with the proxy ignored (caught by the DNS and transparent
//! listeners). Every origin is on the host's loopback and pinned with `--resolve`; each
//! denied name is shown reachable from outside the jail first, so a broken probe cannot
//! pass.

use std::process::{Command, Output};

use serde_json::Value;

use super::tls_origin::TlsOrigin;
use super::{python, require_jail, Jailed, Outcome};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;

/// Prefix for a command in the jail's script that must ignore the proxy.
pub(super) const NO_PROXY_ENV: &str =
    "env -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY -u http_proxy -u https_proxy -u all_proxy";

/// A jail where `allowed` (and nothing else) may be reached on `ports`, each name pinned
/// to 127.0.0.1, every allowed connection audited.
pub(super) fn jail_allowing(allowed: &[&str], ports: &[u16]) -> Jailed {
    let org = allowed
        .iter()
        .fold(Org::new().ports(ports).loopback(), |org, name| {
            org.allow(name)
        });
    let mut jailed = Jailed::new(org.to_toml())
        .policy(allowlist_json(allowed))
        .arg("--audit-allowed");
    for name in allowed {
        jailed = jailed.arg("--resolve").arg(format!("{name}=127.0.0.1"));
    }
    jailed
}

/// `script` run by `sh` on the host, outside any jail, with no proxy in its environment
/// (on a blocking thread: the test's own origins run on its runtime meanwhile).
pub(super) async fn outside(script: String) -> Output {
    let mut sh = Command::new("sh");
    sh.args(["-c", &script])
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("all_proxy");
    tokio::task::spawn_blocking(move || sh.output().expect("run sh"))
        .await
        .unwrap()
}

pub(super) fn assert_ok(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} (outside the jail): {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The audit records of `host` written by listener `via` (`proxy`, `transparent`, `dns`).
pub(super) fn records<'a>(out: &'a Outcome, host: &str, via: &str) -> Vec<&'a Value> {
    out.audit
        .iter()
        .filter(|r| r["host"] == host && r["via"] == via)
        .collect()
}

pub(super) fn tool_missing(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: `{tool}` is not installed");
    }
    !found
}

#[tokio::test]
async fn curl_ignoring_the_proxy_reaches_an_allowed_name_over_http_and_https_not_a_denied_one() {
    require_jail!();
    if tool_missing("curl") {
        return;
    }
    let origin = Origin::start().await;
    let tls = TlsOrigin::start(&["allowed.test", "denied.test"]);
    let (port, tls_port, ca) = (origin.port(), tls.port(), tls.ca());
    let ca = ca.display();
    // From outside, denied.test reaches both origins: only the jail stops it.
    let seen = assert_ok(
        "curl denied.test",
        &outside(format!(
            "curl -sS --resolve denied.test:{port}:127.0.0.1 http://denied.test:{port}/ && \
             curl -sS --cacert {ca} --resolve denied.test:{tls_port}:127.0.0.1 \
             https://denied.test:{tls_port}/hello"
        ))
        .await,
    );
    assert!(seen.contains(&origin.body()) && seen.contains("hello from tls origin"));
    let script = format!(
        "curl -sS --noproxy '*' http://allowed.test:{port}/plain; echo \" http=$?\"
         curl -sS --noproxy '*' --cacert {ca} https://allowed.test:{tls_port}/hello; echo \"https=$?\"
         curl -sS --noproxy '*' http://denied.test:{port}/; echo \"denied-http=$?\"
         curl -sS --noproxy '*' --cacert {ca} https://denied.test:{tls_port}/hello; echo \"denied-https=$?\""
    );
    let out = jail_allowing(&["allowed.test"], &[port, tls_port])
        .sh(&script)
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(
        out.stdout.contains(&format!("{} http=0", origin.body())),
        "{out}"
    );
    assert!(
        out.stdout.contains("hello from tls origin\nhttps=0"),
        "{out}"
    );
    // curl's "Could not resolve host": the jail's DNS said NXDOMAIN.
    assert!(out.stdout.contains("denied-http=6"), "{out}");
    assert!(out.stdout.contains("denied-https=6"), "{out}");
    assert_eq!(
        origin.hits(),
        2,
        "one from outside, one from the jail: {out}"
    );
    assert_eq!(origin.requests()[1].target, "/plain", "{out}");
    assert_eq!(tls.requests_for("allowed.test").len(), 1, "{out}");
    assert_eq!(
        tls.requests_for("denied.test").len(),
        1,
        "only the outside one"
    );
    for method in ["GET", "CONNECT"] {
        let allowed = records(&out, "allowed.test", "transparent");
        assert!(
            allowed
                .iter()
                .any(|r| r["event"] == "egress.allowed" && r["method"] == method),
            "{method}: {out}"
        );
    }
    let denied = records(&out, "denied.test", "dns");
    assert!(!denied.is_empty(), "{out}");
    assert!(
        denied
            .iter()
            .all(|r| r["event"] == "egress.denied" && r["reason"] == "not_in_org_allowlist"),
        "{out}"
    );
    assert!(
        records(&out, "denied.test", "transparent").is_empty(),
        "{out}"
    );
}

#[tokio::test]
async fn python_urllib_and_sockets_ignoring_the_proxy_reach_an_allowed_name_over_https() {
    require_jail!();
    let tls = TlsOrigin::start(&["allowed.test", "denied.test"]);
    let (port, ca) = (tls.port(), tls.ca());
    let seen = assert_ok(
        "curl denied.test",
        &outside(format!(
            "curl -sS --cacert {} --resolve denied.test:{port}:127.0.0.1 \
             https://denied.test:{port}/hello",
            ca.display()
        ))
        .await,
    );
    assert!(seen.contains("hello from tls origin"));
    let script = format!(
        r#"
import socket, ssl, urllib.request, urllib.error
ctx = ssl.create_default_context(cafile={ca:?})
direct = urllib.request.build_opener(urllib.request.ProxyHandler({{}}), urllib.request.HTTPSHandler(context=ctx))
print("urllib", direct.open("https://allowed.test:{port}/hello", timeout=10).read().decode().strip())
with socket.create_connection(("allowed.test", {port}), timeout=10) as raw:
    with ctx.wrap_socket(raw, server_hostname="allowed.test") as s:
        s.sendall(b"GET /hello HTTP/1.0\r\nHost: allowed.test\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
print("socket", data.split(b"\r\n")[0].decode(), data.split(b"\r\n\r\n", 1)[1].decode().strip())
try:
    direct.open("https://denied.test:{port}/hello", timeout=10)
    print("denied reached")
except urllib.error.URLError as e:
    print("denied", type(e.reason).__name__)
"#,
        ca = ca.display().to_string()
    );
    let out = jail_allowing(&["allowed.test"], &[port])
        .python(&script)
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("urllib hello from tls origin"), "{out}");
    assert!(
        out.stdout
            .contains("socket HTTP/1.0 200 OK hello from tls origin"),
        "{out}"
    );
    assert!(out.stdout.contains("denied gaierror"), "{out}");
    assert_eq!(tls.requests_for("allowed.test").len(), 2, "{out}");
    assert_eq!(
        tls.requests_for("denied.test").len(),
        1,
        "only the outside one"
    );
    assert_eq!(
        records(&out, "allowed.test", "transparent").len(),
        2,
        "{out}"
    );
    assert!(!records(&out, "denied.test", "dns").is_empty(), "{out}");
}

/// Write a PEP 503 simple index for one tiny wheel (`tinypkg 0.1`) under `root`, with
/// Python's zipfile; returns the wheel's file name.
fn write_index(root: &std::path::Path) -> &'static str {
    let script = r#"
import base64, hashlib, os, sys, zipfile
root = sys.argv[1]
name = "tinypkg-0.1-py3-none-any.whl"
files = {
    "tinypkg/__init__.py": b"VALUE = 42\n",
    "tinypkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
    "tinypkg-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: egress-proxy-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = ""
for path, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record += f"{path},sha256={digest},{len(data)}\n"
files["tinypkg-0.1.dist-info/RECORD"] = (record + "tinypkg-0.1.dist-info/RECORD,,\n").encode()
os.makedirs(f"{root}/files"); os.makedirs(f"{root}/simple/tinypkg")
with zipfile.ZipFile(f"{root}/files/{name}", "w") as z:
    for path, data in files.items():
        z.writestr(path, data)
sha = hashlib.sha256(open(f"{root}/files/{name}", "rb").read()).hexdigest()
open(f"{root}/simple/index.html", "w").write('<a href="tinypkg/">tinypkg</a>\n')
open(f"{root}/simple/tinypkg/index.html", "w").write(f'<a href="/files/{name}#sha256={sha}">{name}</a>\n')
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    "tinypkg-0.1-py3-none-any.whl"
}

#[tokio::test]
async fn pip_download_from_a_local_https_index_works_in_the_jail_with_and_without_the_proxy() {
    require_jail!();
    let has_pip = Command::new(python())
        .args(["-m", "pip", "--version"])
        .output();
    if !has_pip.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: pip is not installed for {}", python());
        return;
    }
    let tls = TlsOrigin::start(&["pypi.test", "evil.test"]);
    let wheel = write_index(&tls.root());
    let (port, ca) = (tls.port(), tls.ca().display().to_string());
    let work = super::shared_dir("pip");
    let pip = |index: &str, dest: &str| {
        format!(
            "env -u REQUESTS_CA_BUNDLE -u CURL_CA_BUNDLE -u PIP_FIND_LINKS \
             PIP_CERT={ca} PIP_CONFIG_FILE=/dev/null {python} -m pip download --no-deps \
             --no-cache-dir --disable-pip-version-check --retries 0 --timeout 10 \
             --index-url https://{index}:{port}/simple/ -d {dest} tinypkg",
            python = python(),
            dest = work.join(dest).display()
        )
    };
    // From outside, evil.test serves the index too (pinned with pip's own resolver off:
    // curl fetches the same page the jail will not).
    let seen = assert_ok(
        "curl evil.test",
        &outside(format!(
            "curl -sS --cacert {ca} --resolve evil.test:{port}:127.0.0.1 \
             https://evil.test:{port}/simple/tinypkg/"
        ))
        .await,
    );
    assert!(seen.contains(wheel));
    let script = format!(
        "{}; echo \"proxied=$?\"\n{NO_PROXY_ENV} {}; echo \"direct=$?\"\n{} 2>&1; echo \"evil-proxied=$?\"\n{NO_PROXY_ENV} {} 2>&1; echo \"evil-direct=$?\"",
        pip("pypi.test", "proxied"),
        pip("pypi.test", "direct"),
        pip("evil.test", "evil1"),
        pip("evil.test", "evil2"),
    );
    let out = jail_allowing(&["pypi.test"], &[port]).sh(&script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    for (result, code) in [("proxied", "0"), ("direct", "0")] {
        assert!(
            out.stdout.contains(&format!("{result}={code}")),
            "{result}: {out}"
        );
        let got = std::fs::read(work.join(result).join(wheel)).expect("the wheel downloaded");
        assert_eq!(
            got,
            std::fs::read(tls.root().join("files").join(wheel)).unwrap()
        );
    }
    assert!(!out.stdout.contains("evil-proxied=0"), "{out}");
    assert!(!out.stdout.contains("evil-direct=0"), "{out}");
    let fetched = tls.requests_for("pypi.test");
    assert_eq!(
        fetched.len(),
        4,
        "index and wheel, twice: {fetched:?}\n{out}"
    );
    assert_eq!(
        tls.requests_for("evil.test").len(),
        1,
        "only the outside one"
    );
    let allowed = |via| {
        records(&out, "pypi.test", via)
            .iter()
            .filter(|r| r["event"] == "egress.allowed")
            .count()
    };
    assert!(
        allowed("proxy") >= 1 && allowed("transparent") >= 1,
        "{out}"
    );
    let denied = |via| !records(&out, "evil.test", via).is_empty();
    assert!(denied("proxy") && denied("dns"), "{out}");
}
