//! Exfiltration seen (docs/reference/dlp.md): the organization's canaries
//! (`[canaries] values_file`) looked for in what a client sends, on the wire. A request
//! that carries one, in any encoding, in its URL, a header field, its target's name, a
//! TLS server name or a DNS query name, is refused `exfiltration_detected` and never
//! reaches the origin (or the upstream DNS server); the same request without it does.
//! No record, answer or log line holds the value.

mod body;
mod canaries;
mod consumed;
mod detectors;
mod fleet;
mod git;
mod inspected;
mod reported;
mod requests;
mod session;
pub(crate) mod shown;
mod sink;
mod tunnel;
mod websocket;
mod websocket_detectors;

use std::path::PathBuf;

use crate::support::org::Org;

/// The canary every test here plants.
pub(crate) const VALUE: &str = "AKIAQ7EGRESSCANARY42";

/// A file holding the canaries (a blank line and a second value too), unique per test.
pub(crate) fn values_file(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("egress-dlp-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("canaries.txt");
    std::fs::write(&file, format!("another-canary-value-0001\n\n{VALUE}\n")).unwrap();
    file
}

/// `org` with `[canaries]` reading `file`, and `on_trip`.
pub(crate) fn with_canaries(org: Org, file: &std::path::Path, on_trip: &str) -> Org {
    org.raw_line(&format!(
        "[canaries]\nvalues_file = {:?}\non_trip = {on_trip:?}",
        file.to_str().unwrap()
    ))
}
