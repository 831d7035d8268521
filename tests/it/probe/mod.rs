//! `egress-proxy probe` (docs/reference/probe.md), run only inside network namespaces
//! these tests make: the leaky lab ([`lab`]) shows every check both ways, open where the
//! lab leaves the channel open and closed where it drops it; [`jail`] runs it inside
//! `egress-proxy run`. Without root (or `ip`, `nft`, `unshare`) they print why and pass
//! without checking anything.

mod jail;
mod lab;
mod servers;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use lab::Lab;

/// Every check id, in the report's order.
pub(crate) const IDS: [&str; 13] = [
    "tcp4-direct",
    "tcp6-direct",
    "udp-dns-system",
    "udp-dns-direct",
    "dot",
    "doh",
    "quic",
    "icmp",
    "metadata",
    "proxy-enforces",
    "proxy-allows",
    "unix-sockets",
    "ipv6-any",
];

/// Why the lab cannot be made here, if it cannot.
pub(crate) fn skip_reason() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("the probe's lab needs root (network namespaces, nftables)".into());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for tool in ["ip", "nft", "unshare", "mount"] {
        let found = std::env::split_paths(&path)
            .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
            .any(|dir| dir.join(tool).is_file());
        if !found {
            return Some(format!("`{tool}` is not installed"));
        }
    }
    None
}

macro_rules! require_lab {
    () => {
        if let Some(reason) = crate::probe::skip_reason() {
            eprintln!("skipped: {reason}");
            return;
        }
    };
}

fn result_of<'a>(results: &'a [(String, String)], id: &str) -> &'a str {
    results
        .iter()
        .find(|(i, _)| i == id)
        .map(|(_, r)| r.as_str())
        .unwrap_or_else(|| panic!("no {id} in {results:?}"))
}

fn failing(doc: &Value) -> Vec<String> {
    let list = doc["summary"]["failing"]
        .as_array()
        .expect("summary.failing");
    list.iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_channel_the_open_lab_leaves_open_is_reported_open() {
    require_lab!();
    let lab = Lab::new(true);
    let out = lab.probe(&[
        "--format",
        "json",
        "--timeout-ms",
        "1500",
        "--allowed",
        "http://1.1.1.1/",
    ]);
    let results = out.results();
    for id in IDS {
        assert_eq!(result_of(&results, id), "open", "{id}: {out:#?}");
    }
    assert_eq!(out.code, 1, "{out:#?}");
    // The proxy let the probe by only with the variables' credentials, never shown.
    assert!(
        !out.stdout.contains("s3cr") && !out.stderr.contains("s3cr"),
        "{out:#?}"
    );
    let doc = out.json();
    let open = doc["open"].as_array().unwrap();
    assert_eq!(
        open.len(),
        IDS.len() - 1,
        "proxy-allows is reach, not an open channel"
    );
    assert!(!open.iter().any(|id| id == "proxy-allows"));
    let mut want: Vec<String> = IDS
        .iter()
        .filter(|i| **i != "proxy-allows")
        .map(|i| i.to_string())
        .collect();
    want.sort();
    let mut got = failing(&doc);
    got.sort();
    assert_eq!(got, want);
}

#[test]
fn every_channel_the_closed_lab_drops_is_closed_and_the_probe_ends_within_10_s() {
    require_lab!();
    let lab = Lab::new(false);
    // Every check times out at the default 2000 ms: nothing answers, nothing refuses.
    let out = lab.probe(&["--format", "json"]);
    assert!(
        out.took < Duration::from_secs(10),
        "took {:?}: {out:#?}",
        out.took
    );
    let results = out.results();
    for id in IDS {
        let want = if id == "proxy-allows" {
            "unknown"
        } else {
            "closed"
        };
        assert_eq!(result_of(&results, id), want, "{id}: {out:#?}");
    }
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(out.json()["open"], Value::Array(vec![]));
    // The servers are there, behind the drop: the checks waited out their timeout.
    let doc = out.json();
    let tcp4 = doc["checks"][0]["evidence"].as_str().unwrap();
    assert!(tcp4.contains("no handshake in 2000 ms"), "{tcp4}");
    // The refusing proxy's answers are told apart from a forwarding one's.
    let enforces = &doc["checks"][9];
    assert_eq!(enforces["id"], "proxy-enforces");
    assert!(
        enforces["evidence"].as_str().unwrap().contains("refused"),
        "{enforces}"
    );
}

#[test]
fn an_allowed_url_not_reached_is_exit_1_and_one_reached_is_not() {
    require_lab!();
    let closed = Lab::new(false);
    let out = closed.probe(&[
        "--format",
        "json",
        "--timeout-ms",
        "300",
        "--allowed",
        "http://1.1.1.1/",
    ]);
    assert_eq!(
        result_of(&out.results(), "proxy-allows"),
        "closed",
        "{out:#?}"
    );
    assert_eq!(failing(&out.json()), vec!["proxy-allows".to_string()]);
    assert_eq!(out.code, 1, "{out:#?}");
    let open = Lab::new(true);
    let expect = open.dir.join("expect");
    let every_open: Vec<&str> = IDS
        .iter()
        .copied()
        .filter(|i| *i != "proxy-allows")
        .collect();
    std::fs::write(
        &expect,
        format!("# all of them\n{}\n", every_open.join("\n")),
    )
    .unwrap();
    let out = open.probe(&[
        "--timeout-ms",
        "1500",
        "--allowed",
        "http://1.1.1.1/",
        "--expect",
        expect.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(
        out.stdout.contains("nothing unexpected is open"),
        "{out:#?}"
    );
}

#[test]
fn expect_excuses_only_the_checks_it_lists() {
    require_lab!();
    let lab = Lab::new(true);
    let expect = lab.dir.join("expect");
    let all_but_quic: Vec<&str> = IDS.iter().copied().filter(|i| *i != "quic").collect();
    std::fs::write(&expect, all_but_quic.join("  # expected\n")).unwrap();
    let out = lab.probe(&[
        "--format",
        "json",
        "--timeout-ms",
        "1500",
        "--expect",
        expect.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 1, "{out:#?}");
    assert_eq!(failing(&out.json()), vec!["quic".to_string()]);
    // The table says the same, one line per check.
    let table = lab.probe(&["--timeout-ms", "1500", "--expect", expect.to_str().unwrap()]);
    assert_eq!(table.code, 1);
    for id in IDS {
        assert!(
            table.stdout.lines().any(|l| l.starts_with(id)),
            "{id}: {table:#?}"
        );
    }
    assert!(table.stdout.contains("failing: quic"), "{table:#?}");
    // An id that names no check is the probe's own error.
    std::fs::write(&expect, "quic\ntcp4-direkt\n").unwrap();
    let out = lab.probe(&["--expect", expect.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{out:#?}");
    assert!(out.stderr.contains("tcp4-direkt"), "{out:#?}");
}

/// The parts of SARIF 2.1.0 that its schema requires and code-scanning services read.
fn assert_sarif(doc: &Value) {
    assert_eq!(doc["version"], "2.1.0");
    assert!(doc["$schema"].as_str().unwrap().contains("sarif-2.1.0"));
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1);
    let driver = &runs[0]["tool"]["driver"];
    assert!(driver["name"].is_string());
    let rules = driver["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), IDS.len());
    for r in rules {
        assert!(r["shortDescription"]["text"].is_string(), "{r}");
        assert!(
            r["fullDescription"]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty()),
            "{r}"
        );
        assert_eq!(r["defaultConfiguration"]["level"], "error");
    }
    for result in runs[0]["results"].as_array().expect("results") {
        let id = result["ruleId"].as_str().expect("ruleId");
        assert_eq!(
            rules[result["ruleIndex"].as_u64().unwrap() as usize]["id"],
            id
        );
        assert_eq!(result["level"], "error");
        assert!(result["message"]["text"].is_string());
        assert_eq!(result["locations"][0]["logicalLocations"][0]["name"], id);
    }
}

#[test]
fn sarif_gives_one_error_result_per_open_check() {
    require_lab!();
    let lab = Lab::new(true);
    let expect = lab.dir.join("expect");
    std::fs::write(&expect, "icmp\n").unwrap();
    let out = lab.probe(&[
        "--format",
        "sarif",
        "--timeout-ms",
        "1500",
        "--expect",
        expect.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 1, "{out:#?}");
    let doc = out.json();
    assert_sarif(&doc);
    let results = doc["runs"][0]["results"].as_array().unwrap();
    let ids: Vec<&str> = results
        .iter()
        .map(|r| r["ruleId"].as_str().unwrap())
        .collect();
    let want: Vec<&str> = IDS
        .iter()
        .copied()
        .filter(|i| *i != "proxy-allows")
        .collect();
    assert_eq!(ids, want, "{out:#?}");
    for r in results {
        let suppressed = r.get("suppressions").is_some();
        assert_eq!(suppressed, r["ruleId"] == "icmp", "{r}");
    }
    validate_sarif(&doc);
}

/// Validate against the SARIF 2.1.0 schema with `pydantic-sarif` (PyPI, pinned in
/// .ci/run: its model is generated from the schema, unknown properties forbidden); a
/// log with a level the schema does not know must fail it, so the check can fail.
fn validate_sarif(doc: &Value) {
    let script = "import sys\n\
try:\n    from pydantic_sarif.model import StaticAnalysisResultsFormatSarifVersion210JsonSchema as S\n\
except ImportError:\n    sys.exit(3)\n\
try:\n    S.model_validate_json(sys.stdin.read())\n\
except Exception as e:\n    print(e); sys.exit(1)\n";
    let run = |text: String| {
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    match run(doc.to_string()) {
        (Some(3), _) => {
            return eprintln!("note: pydantic-sarif is not installed: schema not checked")
        }
        (Some(0), _) => {}
        (code, out) => panic!("SARIF does not validate ({code:?}): {out}"),
    }
    let mut bad = doc.clone();
    bad["runs"][0]["results"][0]["level"] = Value::from("fatal");
    assert_eq!(
        run(bad.to_string()).0,
        Some(1),
        "the validator rejects a bad level"
    );
}

#[test]
fn flags_that_do_not_make_a_probe_are_exit_2_naming_the_flag() {
    require_lab!();
    // In a lab all the same: were a flag wrongly accepted, the probe would run there.
    let lab = Lab::new(false);
    for (flag, value) in [
        ("--timeout-ms", "0"),
        ("--timeout-ms", "60001"),
        ("--denied", "ftp://x.test/"),
        ("--allowed", "http://user@x.test/"),
        ("--target-v4", "2606:4700:4700::1111"),
        ("--expect", "/nonexistent/expect"),
    ] {
        let out = lab.probe(&[flag, value]);
        assert_eq!(out.code, 2, "{flag} {value}: {out:#?}");
        assert!(out.stderr.contains(flag), "{flag} {value}: {out:#?}");
        assert!(out.stdout.is_empty(), "{flag} {value}: {out:#?}");
    }
}
