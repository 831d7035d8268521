//! Helpers for the integration tests: real sockets on loopback, built from builders.
//!
//! - [`origin`]: plain and TLS HTTP/1.1 origins that record every request.
//! - [`dns`]: a UDP DNS server answering A records for configured names.
//! - [`dns_client`]: a UDP and TCP client for the proxy's DNS listener.
//! - [`org`]: a builder for organization policy TOML.
//! - [`proxy`]: starts the `egress-proxy` binary and reads its audit log.
//! - [`admin`]: a client for the admin API and Prometheus text helpers.
//! - [`client`]: raw HTTP over TCP so tests control the exact bytes.
//! - [`sessions`]: the control-plane proxy of the session tests, and their checks.
//! - [`redis`]: a real `redis-server` on loopback, for the shared session store.
//! - [`squid`]: a real parent proxy (squid) on loopback, and its access log.
//! - [`ws_origin`]: a real WebSocket echo origin (Python's websockets) on loopback.
//! - [`sshd`]: a real OpenSSH server on loopback, and ssh through SOCKS5 with `nc -X 5`.

// Each test module uses a different subset of the helpers.
#![allow(dead_code)]

pub(crate) mod admin;
pub(crate) mod client;
pub(crate) mod dns;
pub(crate) mod dns_client;
pub(crate) mod expect;
pub(crate) mod http;
pub(crate) mod org;
pub(crate) mod origin;
pub(crate) mod proxy;
pub(crate) mod redis;
pub(crate) mod sessions;
pub(crate) mod squid;
pub(crate) mod sshd;
pub(crate) mod tls;
pub(crate) mod ws_origin;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How long any single network step may take before the test fails.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A fresh directory for one test's files (org file, audit log).
pub(crate) fn unique_temp_dir(tag: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!(
        "egress-proxy-it-{}-{}-{}",
        std::process::id(),
        n,
        tag
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Find `needle` in `haystack`.
pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Each whole line of the JSON Lines file at `path`, parsed (none when the file is
/// missing; a last line not yet ended by its newline is left for a later read).
pub(crate) fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    whole
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| {
                panic!(
                    "{} holds a line that is not JSON ({e}): {l:?}",
                    path.display()
                )
            })
        })
        .collect()
}
