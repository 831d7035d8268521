//! HTTP/2 inside intercepted tunnels (docs/reference/inspection.md, "HTTP/2"): a client
//! that offers `h2` gets it, and each stream is a request judged as an HTTP/1.1 request
//! inside would be, a refused one answered 403 on its stream while the connection goes
//! on. Real clients (curl `--http2`, Python httpx with `http2=True`) against a real TLS
//! origin; and a hostile client (Python's `h2` library) that floods resets and
//! CONTINUATION frames while another client is still served.
//!
//! - [`clients`]: curl and httpx, allowed and refused streams on one connection.
//! - [`grpc`]: a gRPC call allowed by path (trailers and all), another refused.
//! - [`abuse`]: rapid reset and CONTINUATION floods.

mod abuse;
mod clients;
mod grpc;

use std::process::{Command, Output};
use std::time::Duration;

use crate::support::org::Org;
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::tls::Testbed;

/// `secure.test` may be read (GET and HEAD), never written.
const READ_ONLY: &str = r#"{ host = "secure.test", access = "read-only" }"#;

/// An HTTPS origin for `secure.test` and a proxy inspecting it read-only.
struct Setup {
    bed: Testbed,
    proxy: Proxy,
}

impl Setup {
    async fn start() -> Setup {
        let bed = Testbed::start("inspect-h2").await;
        let org = Org::new()
            .allow_entry(READ_ONLY)
            .ports(&[443, bed.origin.port()])
            .loopback()
            .to_toml();
        let policy = r#"{"type":"allowlist","allowed_domains":[{"host":"secure.test","access":"read-only"}]}"#;
        let proxy = bed
            .proxy(ProxyBuilder::new(org).policy(policy).audit_allowed())
            .start()
            .await;
        Setup { bed, proxy }
    }

    fn url(&self, path: &str) -> String {
        format!("https://secure.test:{}{path}", self.bed.origin.port())
    }

    fn ca_pem(&self) -> String {
        self.bed.ca.join("ca.pem").display().to_string()
    }
}

/// Whether `python3` can import `modules`; says why not when it cannot.
fn python_missing(modules: &str) -> bool {
    let found = Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: python3 cannot import {modules} (pip install h2 httpx[http2])");
    }
    !found
}

/// Run `program args` on a blocking thread, within `limit`.
async fn run(program: &str, args: Vec<String>, limit: Duration) -> Output {
    let program = program.to_string();
    let spawned = tokio::task::spawn_blocking(move || Command::new(program).args(args).output());
    tokio::time::timeout(limit, spawned)
        .await
        .expect("the client ends in time")
        .expect("the client's thread")
        .expect("run the client")
}

fn show(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
