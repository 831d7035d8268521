//! Criterion bench of a request body's scan (docs/reference/dlp.md, "Bodies"): 16
//! canaries of a session (its compact index) and every built-in detector, alone and
//! together, over 4 MiB of an issue tracker's JSON and of random base64 text (the scan's
//! worst case), in 64 KiB pieces as a body is relayed. Inputs are built outside the timed
//! loops. Run with `cargo bench --features fuzzing --bench dlp_scan`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use egress_proxy::fuzzing::BodyScan;

const SIZE: usize = 4 << 20;
const PIECE: usize = 64 << 10;

/// A small deterministic generator: the same bytes every run.
fn random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn base64_text(n: usize, state: &mut u64) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (0..n)
        .map(|_| ALPHABET[(random(state) % 64) as usize])
        .collect()
}

fn json_text(n: usize) -> Vec<u8> {
    let unit: &[u8] = b"{\"id\": 12345, \"title\": \"Fix the flaky test in the parser\", \"body\": \"When the input ends with a newline the parser returns an error.\", \"labels\": [\"bug\"]}, ";
    unit.iter().copied().cycle().take(n).collect()
}

fn scan(c: &mut Criterion) {
    let mut state = 0x9e37_79b9_7f4a_7c15;
    let values: Vec<Vec<u8>> = (0..16)
        .map(|_| {
            let v = base64_text(40, &mut state);
            v.into_iter()
                .map(|b| if b.is_ascii_alphanumeric() { b } else { b'a' })
                .collect()
        })
        .collect();
    let bodies = [
        ("json", json_text(SIZE)),
        ("base64", base64_text(SIZE, &mut state)),
    ];
    let scans = [
        ("canaries", BodyScan::new(&values, false)),
        ("detectors", BodyScan::new(&[], true)),
        ("both", BodyScan::new(&values, true)),
    ];
    let mut group = c.benchmark_group("body_scan");
    group.throughput(Throughput::Bytes(SIZE as u64));
    group.sample_size(20);
    for (body, bytes) in &bodies {
        for (what, scan) in &scans {
            group.bench_with_input(BenchmarkId::new(*what, body), bytes, |b, bytes| {
                b.iter(|| {
                    for piece in bytes.chunks(PIECE) {
                        assert!(!scan.scan(black_box(piece)));
                    }
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, scan);
criterion_main!(benches);
