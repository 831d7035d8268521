//! Entry points shared by the `cargo fuzz` targets in `fuzz/` and the corpus replay in
//! `cargo test` (`tests/it/fuzz_corpus.rs`): each takes arbitrary bytes and must never
//! panic, and checks the invariants that hold for any input.

use crate::policy::{DomainEntry, Host, HostName, OrgPolicy, RequestPolicy};
use crate::proxy::{inspect, preflight, request};

/// The organization policy parser and compiler.
pub fn org_policy(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = OrgPolicy::from_toml(text, "fuzz.toml");
    }
}

/// The request policy parser.
pub fn request_policy(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = RequestPolicy::from_json(text, "fuzz.json");
    }
}

/// Host normalisation: a name that parses is a fixed point of parsing.
pub fn host(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(name) = HostName::parse(text) {
        let again = HostName::parse(name.as_str()).expect("a normalised name parses again");
        assert_eq!(again, name, "normalisation is idempotent");
        assert!(name.as_str().is_ascii() && name.as_str().len() <= 253);
    }
    let _ = Host::parse(text);
    let _ = DomainEntry::parse(text);
}

/// The request-target reader: the first-head check and the authority splitter.
pub fn request_target(data: &[u8]) {
    let _ = preflight::check(data);
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some((host, _port)) = request::split_host_port(text) {
            assert!(text.starts_with(host) || text.starts_with('['));
            let _ = Host::parse(host);
        }
    }
}

/// The ClientHello reader.
pub fn client_hello(data: &[u8]) {
    let _ = inspect::read_hello(data);
}

/// A fuzz entry point.
pub type Target = fn(&[u8]);

/// Every target, by the name of its corpus directory.
pub const TARGETS: &[(&str, Target)] = &[
    ("org_policy", org_policy),
    ("request_policy", request_policy),
    ("host", host),
    ("request_target", request_target),
    ("client_hello", client_hello),
];
