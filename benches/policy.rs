//! Criterion benches of the pure policy core: one decision against organization policies
//! of 10, 1,000 and 100,000 entries, compiling the largest, and the narrowing check of a
//! 100-entry request policy (an `X-Network-Policy` header) against it, and a request
//! judged by entries with rules (method, path, the path's normalisation). Inputs are built
//! outside the timed loops. Run with `cargo bench --bench policy`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use egress_proxy::policy::{
    check_narrowing, decide, decide_request, normalize_path, Effective, Host, Http, OrgPolicy,
    RequestPolicy, Target,
};

/// An organization policy of `n` entries: half exact names, half subtrees, spread over
/// many registrable domains the way a large real allowlist is.
fn org_toml(n: usize) -> String {
    let mut entries = Vec::with_capacity(n);
    for i in 0..n {
        if i % 2 == 0 {
            entries.push(format!("\"api{i}.service{}.example.com\"", i % 997));
        } else {
            entries.push(format!("\"*.tenant{i}.example.net\""));
        }
    }
    format!(
        "version = 1\nallowed_domains = [{}]\ndefault_network_policy = {{ type = \"allowlist\", allowed_domains = [\"*.tenant1.example.net\"] }}\n",
        entries.join(",")
    )
}

fn bench_decide(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide");
    for n in [10usize, 1_000, 100_000] {
        let org = OrgPolicy::from_toml(&org_toml(n), "bench.toml").expect("bench policy loads");
        let policy: RequestPolicy = org.default_policy().clone();
        let levels = [&policy];
        let eff = Effective {
            org: &org,
            levels: &levels,
        };
        let allowed = Target {
            host: Host::parse("a.b.tenant1.example.net").unwrap(),
            port: 443,
        };
        let denied = Target {
            host: Host::parse("x.y.z.evil.example.org").unwrap(),
            port: 443,
        };
        group.bench_with_input(BenchmarkId::new("allowed_subtree", n), &allowed, |b, t| {
            b.iter(|| decide(black_box(&eff), black_box(t)))
        });
        group.bench_with_input(BenchmarkId::new("denied", n), &denied, |b, t| {
            b.iter(|| decide(black_box(&eff), black_box(t)))
        });
    }
    group.finish();
}

fn bench_compile(c: &mut Criterion) {
    let text = org_toml(100_000);
    let mut group = c.benchmark_group("compile");
    group.sample_size(10);
    group.bench_function("org_100k", |b| {
        b.iter(|| OrgPolicy::from_toml(black_box(&text), "bench.toml").unwrap())
    });
    group.finish();
}

/// A request policy of `n` entries, every one covered by `org_toml(100_000)`: exact names
/// and subtrees under the org's subtrees, and exact names the org lists, so each entry
/// takes a real lookup rather than an early miss.
fn narrower_json(n: usize) -> String {
    let entries: Vec<String> = (0..n)
        .map(|k| match k % 3 {
            0 => format!("\"api{}.service{}.example.com\"", 2 * k, (2 * k) % 997),
            1 => format!("\"*.deep{k}.tenant{}.example.net\"", 2 * k + 1),
            _ => format!("\"host{k}.tenant{}.example.net\"", 2 * k + 1),
        })
        .collect();
    format!(
        "{{\"type\": \"allowlist\", \"allowed_domains\": [{}]}}",
        entries.join(",")
    )
}

fn bench_narrowing(c: &mut Criterion) {
    let org = OrgPolicy::from_toml(&org_toml(100_000), "bench.toml").expect("bench policy loads");
    let narrower = RequestPolicy::from_json(&narrower_json(100), "bench.json").unwrap();
    // The level above the header: an allowlist that covers every narrower entry.
    let above = RequestPolicy::from_json(&narrower_json(100), "above.json").unwrap();
    let uppers = [&above];
    assert!(check_narrowing(&org, &uppers, &narrower).is_ok());
    let mut group = c.benchmark_group("narrowing");
    group.bench_function("request_100_vs_org_100k", |b| {
        b.iter(|| check_narrowing(black_box(&org), black_box(&uppers), black_box(&narrower)))
    });
    group.finish();
}

/// Entries with rules: a request judged by method and path against two entries for one
/// host (the read-only entry refuses the POST, the second allows it), next to the same
/// host judged as a `CONNECT`, and the path normalisation a request with rules pays.
fn bench_rules(c: &mut Criterion) {
    let text = r#"version = 1
allowed_domains = [
  "docs.example.com",
  { host = "git.example.com", access = "read-only" },
  { host = "git.example.com", methods = ["POST"], paths = ["/acme/repo.git/git-upload-pack"] },
]
default_network_policy = { type = "allowlist", allowed_domains = [{ host = "git.example.com", access = "read-only" }, { host = "git.example.com", methods = ["POST"], paths = ["/acme/repo.git/git-upload-pack"] }] }
"#;
    let org = OrgPolicy::from_toml(text, "bench.toml").expect("bench policy loads");
    let policy = org.default_policy().clone();
    let levels = [&policy];
    let eff = Effective {
        org: &org,
        levels: &levels,
    };
    let git = Target {
        host: Host::parse("git.example.com").unwrap(),
        port: 443,
    };
    let raw = "/acme/repo.git/git-upload-pack?service=x";
    let path = normalize_path(raw).unwrap();
    let http = Http {
        method: "POST",
        path: &path,
    };
    assert!(decide_request(&eff, &git, &http).is_allowed());
    let mut group = c.benchmark_group("rules");
    group.bench_function("connect", |b| {
        b.iter(|| decide(black_box(&eff), black_box(&git)))
    });
    group.bench_function("request_second_entry", |b| {
        b.iter(|| decide_request(black_box(&eff), black_box(&git), black_box(&http)))
    });
    group.bench_function("must_intercept", |b| {
        b.iter(|| black_box(&eff).must_intercept(black_box(&git)))
    });
    group.bench_function("normalize_path", |b| {
        b.iter(|| normalize_path(black_box(raw)))
    });
    group.finish();
}

criterion_group!(
    benches,
    bench_decide,
    bench_compile,
    bench_narrowing,
    bench_rules
);
criterion_main!(benches);
