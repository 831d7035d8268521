//! The fuzz corpus, replayed: every committed input of every target in `fuzz/corpus/`
//! (seeds, and inputs that once crashed) goes through the same entry point the fuzzer
//! calls, so `cargo test` keeps them passing without running the fuzzer.

use std::path::Path;

use egress_proxy::fuzzing::TARGETS;

#[test]
fn every_corpus_input_runs_without_panicking() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut replayed = 0;
    for (name, target) in TARGETS {
        let dir = root.join(name);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
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

#[test]
fn a_real_client_hello_seed_names_its_server() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/client_hello");
    let hello = std::fs::read(root.join("hello-secure.test")).unwrap();
    let seen = egress_proxy::proxy::inspect::read_hello(&hello);
    assert_eq!(
        seen,
        Some(egress_proxy::policy::tls::FirstBytes::Tls {
            server_name: Some("secure.test".into())
        }),
        "the seed is a real ClientHello, so the fuzzer starts from the parser's deep paths"
    );
}
