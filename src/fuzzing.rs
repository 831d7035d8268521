//! Entry points shared by the `cargo fuzz` targets in `fuzz/` and the corpus replay in
//! `cargo test` (the tests below): each takes arbitrary bytes and must never panic, and
//! checks the invariants that hold for any input.
//!
//! Compiled only with the `fuzzing` feature (which `fuzz/Cargo.toml` turns on) and in the
//! library's own tests: the product does not carry them.

use crate::judgement::{client_hello, request};
use crate::policy::{
    normalize_path, DomainEntry, Host, HostName, OrgPolicy, PathRule, RequestPolicy,
};
use crate::proxy::preflight;
use crate::transparent::opening::{self, Opening};

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

/// Path normalisation (docs/reference/policy-files.md, "Paths"): a path that normalises
/// is a fixed point, starts with `/`, holds no dot or empty segment and none of the
/// escapes that are refused, and a path rule judges it the same before and after.
pub fn request_path(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(path) = normalize_path(text) else {
        return;
    };
    let p = path.as_str();
    assert!(p.starts_with('/'), "{p:?}");
    let again = normalize_path(p).expect("a normal path normalises again");
    assert_eq!(again, path, "normalisation is idempotent");
    let segments: Vec<&str> = p[1..].split('/').collect();
    for (i, seg) in segments.iter().enumerate() {
        assert!(*seg != "." && *seg != "..", "dot segment in {p:?}");
        assert!(
            !seg.is_empty() || i + 1 == segments.len(),
            "empty segment in {p:?}"
        );
    }
    let upper = p.to_ascii_uppercase();
    for refused in ["%2F", "%5C", "%00", "%3B", ";", "\\", "?", "#"] {
        assert!(!upper.contains(refused), "{refused} in {p:?}");
    }
    // A prefix rule of the path's first segment (rules cannot write a `*` there) holds it.
    if let Some(end) = p[1..].find('/').filter(|&end| !p[..end + 1].contains('*')) {
        let rule = PathRule::parse(&format!("{}/*", &p[..end + 1])).expect("a normal prefix");
        assert!(rule.matches(&path), "{rule} does not match {p:?}");
    }
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

/// The ClientHello reader, and the transparent listener's first-bytes classifier: what
/// it decided on a prefix is what it decides on the whole, however the bytes are split.
pub fn client_hello(data: &[u8]) {
    let _ = client_hello::read_hello(data);
    let early = opening::classify(&data[..data.len() / 2]);
    if early != Opening::Undecided {
        assert_eq!(opening::classify(data), early, "{data:?}");
    }
}

/// The DNS listener's answer (docs/reference/confinement.md, "DNS listener"): any bytes
/// get an answer or none, never a panic; an answer is a response to the same message
/// id, and an address in it is a synthetic one.
pub fn dns_answer(data: &[u8]) {
    use std::sync::OnceLock;

    use hickory_proto::op::{Message, MessageType};
    use hickory_proto::rr::RData;

    use crate::dns::answer::{answer, Given};
    use crate::judgement::Policies;
    use crate::net::synthetic::{SyntheticNames, RANGE};

    static POLICIES: OnceLock<Policies> = OnceLock::new();
    let policies = POLICIES.get_or_init(|| {
        let org = "version = 1\nallowed_domains = [\"allowed.test\", \"*.example.test\"]\n\
                   denied_domains = [\"bad.example.test\"]\n";
        let org = OrgPolicy::from_toml(org, "fuzz.toml").expect("the fuzz policy loads");
        Policies::new(org, None)
    });
    let synthetic = SyntheticNames::new();
    for audit_refusing in [false, true] {
        let ask = Given {
            policies,
            synthetic: &synthetic,
            audit_refusing,
        };
        let Some(reply) = answer(data, &ask).message else {
            continue;
        };
        let reply = Message::from_vec(&reply).expect("an answer is a DNS message");
        assert_eq!(reply.message_type(), MessageType::Response);
        assert_eq!(
            Some(reply.id()),
            data.get(..2).map(|id| u16::from_be_bytes([id[0], id[1]]))
        );
        for record in reply.answers() {
            if let RData::A(a) = record.data() {
                assert!(RANGE.contains(&a.0), "only synthetic addresses: {a}");
            }
        }
    }
}

/// The SOCKS5 handshake parsers (docs/reference/socks5.md): the greeting, the
/// username/password message and the request, each on the bytes the last one left, as
/// the listener reads them. A parser never asks for bytes it has, never takes more than
/// it was given, decides the same on every prefix it needs more of, and a name it
/// accepts holds only host bytes.
pub fn socks_handshake(data: &[u8]) {
    use crate::socks::wire::{self, Dest, Progress};

    fn step<T>(data: &[u8], parse: fn(&[u8]) -> Progress<T>) -> Option<(T, &[u8])> {
        match parse(data) {
            Progress::Need(total) => {
                assert!(total > data.len(), "asks for bytes it has");
                None
            }
            Progress::Bad(_) => None,
            Progress::Done(message, used) => {
                assert!(used <= data.len());
                for cut in 0..used {
                    assert!(
                        matches!(parse(&data[..cut]), Progress::Need(n) if n > cut && n <= used),
                        "a prefix of {cut} bytes is decided before the message is whole"
                    );
                }
                Some((message, &data[used..]))
            }
        }
    }
    let Some((greeting, rest)) = step(data, wire::parse_greeting) else {
        let _ = step(data, wire::parse_request);
        return;
    };
    let rest = match wire::choose_method(&greeting.methods, true, false) {
        wire::METHOD_USER_PASS => match step(rest, wire::parse_user_pass) {
            Some((_, rest)) => rest,
            None => return,
        },
        _ => rest,
    };
    if let Some((request, _)) = step(rest, wire::parse_request) {
        if let Dest::Name(name) = &request.dest {
            assert!(
                !name.is_empty() && name.bytes().all(wire::is_host_byte),
                "{name:?}"
            );
        }
        let _ = request.dest.host_text();
        assert_eq!(wire::reply(wire::Reply::NotAllowed, None).len(), 10);
    }
}

/// A fuzz entry point.
pub type Target = fn(&[u8]);

/// Every target, by the name of its corpus directory.
pub const TARGETS: &[(&str, Target)] = &[
    ("org_policy", org_policy),
    ("request_policy", request_policy),
    ("host", host),
    ("request_target", request_target),
    ("request_path", request_path),
    ("client_hello", client_hello),
    ("dns_answer", dns_answer),
    ("socks_handshake", socks_handshake),
];

/// The fuzz corpus, replayed: every committed input of every target in `fuzz/corpus/`
/// (seeds, and inputs that once crashed) goes through the same entry point the fuzzer
/// calls, so `cargo test` keeps them passing without running the fuzzer.
/// A request body's scan, for `benches/dlp_scan.rs`: `values` as a session's canaries
/// (the compact index), and every built-in detector when `detectors` is set, looked for
/// as a body relayed upstream is (docs/reference/dlp.md, "Bodies").
pub struct BodyScan {
    lookout: crate::dlp::Lookout,
    flagged: std::sync::OnceLock<crate::dlp::Hit>,
}

impl BodyScan {
    /// The lookout of `values` and, with `detectors`, the built-in detectors.
    pub fn new(values: &[Vec<u8>], detectors: bool) -> BodyScan {
        use crate::dlp::{Canary, Detectors, Lookout, Rule, Scanner};
        let canaries: Vec<Canary> = (values.iter().enumerate())
            .map(|(i, v)| Canary::new(&format!("c{}", i + 1), "generic", v.clone()))
            .collect();
        let rules = (crate::policy::Builtin::ALL.iter().filter(|_| detectors))
            .map(|b| b.detector())
            .map(|d| Rule {
                id: d.name,
                kind: d.kind,
                bytes: d.bytes,
                names: d.names,
                longest: d.longest,
            })
            .collect();
        let detectors = std::sync::Arc::new(Detectors::new(rules, false, Vec::new()));
        let scanner = std::sync::Arc::new(Scanner::compact(&canaries));
        let lookout = Lookout::new([scanner], &detectors).expect("something to look for");
        BodyScan {
            lookout,
            flagged: std::sync::OnceLock::new(),
        }
    }

    /// Whether `bytes` carry a canary or a secret.
    pub fn scan(&self, bytes: &[u8]) -> bool {
        let found_in = crate::dlp::FoundIn::Body;
        self.lookout.scan(bytes, found_in, &self.flagged).is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::TARGETS;

    #[test]
    fn every_corpus_input_runs_without_panicking() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
        let mut replayed = 0;
        for (name, target) in TARGETS {
            let dir = root.join(name);
            let entries =
                std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            let mut count = 0;
            for entry in entries {
                let path = entry.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                let outcome = std::panic::catch_unwind(|| target(&data));
                assert!(outcome.is_ok(), "{name}: {} panics", path.display());
                count += 1;
            }
            assert!(count > 0, "the corpus of {name} is empty");
            replayed += count;
        }
        assert!(replayed >= TARGETS.len());
    }

    proptest::proptest! {
        /// The path target's invariants on generated paths built from the tricks'
        /// alphabet, between fuzzing runs.
        #[test]
        fn request_path_invariants_hold(s in "(/|[a-c*.;~%]|%2[eEfF5]|%5[cC]|%00|%3[bB]|%61|%C3%A9|%FF|\\?){0,24}") {
            super::request_path(s.as_bytes());
        }
    }

    proptest::proptest! {
        /// The SOCKS5 target's invariants between fuzzing runs: arbitrary bytes, and a
        /// greeting and request around an arbitrary name (NULs, `:`, bytes over 127).
        #[test]
        fn socks_handshake_invariants_hold(
            any in proptest::collection::vec(proptest::num::u8::ANY, 0..48),
            name in proptest::collection::vec(proptest::num::u8::ANY, 0..24),
        ) {
            super::socks_handshake(&any);
            let mut req = vec![5, 1, 0, 5, 1, 0, 3, name.len() as u8];
            req.extend_from_slice(&name);
            req.extend_from_slice(&[1, 187]);
            super::socks_handshake(&req);
        }
    }

    #[test]
    fn a_real_client_hello_seed_names_its_server() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/client_hello");
        let hello = std::fs::read(root.join("hello-secure.test")).unwrap();
        let seen = crate::judgement::client_hello::read_hello(&hello);
        assert_eq!(
            seen,
            Some(crate::policy::FirstBytes::Tls {
                server_name: Some("secure.test".into())
            }),
            "the seed is a real ClientHello, so the fuzzer starts from the parser's deep paths"
        );
    }
}
