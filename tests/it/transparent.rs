//! The transparent listener (docs/reference/confinement.md): connections redirected to
//! it by nftables are judged by their original destination, through the same judge,
//! answers and audit records as the explicit proxy (`"via": "transparent"`).
//!
//! Needs root, `unshare` and `nft`: the test runs `tests/fixtures/transparent/harness.py`
//! in a network namespace of its own (loopback only, two TEST-NET-3 origin addresses on
//! `lo`), where a client that ignores every proxy connects to the origins directly.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::proxy::binary;
use crate::support::unique_temp_dir;

/// Why the namespace tests cannot run here, if they cannot.
pub(crate) fn jail_tools_missing() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("needs root (network namespaces and nftables)".into());
    }
    for tool in ["unshare", "nft", "ip"] {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!(
                "needs `{tool}` (apt-get install nftables iproute2)"
            ));
        }
    }
    None
}

/// Run `tests/fixtures/transparent/<script>` in a network namespace of its own.
fn run_harness(script: &str) -> Value {
    run_harness_with(script, &[])
}

/// [`run_harness`], with more arguments after the binary and the work directory.
fn run_harness_with(script: &str, args: &[&str]) -> Value {
    let work = unique_temp_dir("transparent");
    let out = Command::new("unshare")
        .arg("--net")
        .arg("--")
        .arg("python3")
        .arg(Path::new("tests/fixtures/transparent").join(script))
        .arg(binary())
        .arg(&work)
        .args(args)
        .output()
        .expect("run the harness");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let proxy_log = std::fs::read_to_string(work.join("proxy.err")).unwrap_or_default();
    assert!(
        out.status.success(),
        "harness failed: {}\n{stdout}\n{}\nproxy:\n{proxy_log}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("harness output is not JSON ({e}): {stdout}\nproxy:\n{proxy_log}")
    })
}

#[test]
fn redirected_connections_are_judged_by_their_original_destination() {
    if let Some(why) = jail_tools_missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let r = run_harness("harness.py");
    let audit = r["audit"].as_array().unwrap().clone();
    let ctx = format!("{r:#}");
    // An address the policy allows, over plain HTTP, with the proxy ignored by the client.
    assert_eq!(r["allowed_ip"], "HTTP/1.1 200 OK", "{ctx}");
    assert_eq!(
        r["accepted"]["203.0.113.5:80"], 1,
        "only the allowed request arrived: {ctx}"
    );
    // A name never rescues a literal address: a Host naming another authority.
    assert_eq!(
        r["host_names_another_authority"], "HTTP/1.1 403 Egress denied: host_mismatch",
        "{ctx}"
    );
    // The organization covers 203.0.113.0/24, the request level only .5: refused, and the
    // refused origin is reachable when not redirected, so the probe works.
    assert_eq!(
        r["ip_not_in_request_policy"], "HTTP/1.1 403 Egress denied: not_in_request_policy",
        "{ctx}"
    );
    assert_eq!(r["accepted"]["203.0.113.6:80"], 0, "{ctx}");
    assert_eq!(r["direct_to_refused_origin"], "HTTP/1.1 200 OK", "{ctx}");
    // TLS: a server name for an IP-literal destination is refused before upstream is
    // dialed; a hello without one (not required off port 443) is relayed unchanged.
    assert_eq!(r["tls_sni_on_ip_target"], "closed", "{ctx}");
    assert_eq!(r["accepted"]["203.0.113.5:8443"], 1, "{ctx}");
    assert!(
        r["received"]["203.0.113.5:8443"].as_u64().unwrap() > 100,
        "the hello was relayed: {ctx}"
    );

    let events: Vec<(String, String, String, String)> = audit
        .iter()
        .map(|a| {
            let s = |k: &str| a[k].as_str().unwrap_or("-").to_string();
            (s("event"), s("method"), s("reason"), s("via"))
        })
        .collect();
    let want = [
        ("egress.allowed", "GET", "-", "transparent"),
        ("egress.denied", "GET", "host_mismatch", "transparent"),
        (
            "egress.denied",
            "GET",
            "not_in_request_policy",
            "transparent",
        ),
        ("egress.denied", "CONNECT", "sni_mismatch", "transparent"),
        ("egress.allowed", "CONNECT", "-", "transparent"),
        ("egress.denied", "CONNECT", "invalid_request", "transparent"),
    ];
    let want: Vec<(String, String, String, String)> = want
        .iter()
        .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
        .collect();
    assert_eq!(events, want, "{ctx}");
    let hosts: Vec<&str> = audit.iter().map(|a| a["host"].as_str().unwrap()).collect();
    let five = "203.0.113.5";
    assert_eq!(hosts, [five, five, "203.0.113.6", five, five, ""], "{ctx}");
    // A CONNECT sent down a redirected connection: it is one destination already.
    assert!(
        r["connect_inside"]
            .as_str()
            .is_some_and(|s| s.starts_with("HTTP/1.1 400 ")),
        "{ctx}"
    );
}

/// What one client of `split.py` got back, and the bytes each origin connection it made
/// received (`[port, bytes]`).
fn split_case<'a>(r: &'a Value, case: &str) -> (&'a str, &'a Vec<Value>) {
    let c = &r[case];
    (
        c["client"].as_str().unwrap_or("-"),
        c["origin"].as_array().unwrap(),
    )
}

/// The client's bytes are judged as if written at once, however it split them: a `G`
/// then the rest, a leading empty line, one byte at a time, a ClientHello in pieces.
/// Bytes still undecided at `--header-timeout` are never relayed (and the refusal is
/// recorded); bytes that can become neither HTTP nor TLS (an SSH banner) are a tunnel as
/// before.
#[test]
fn split_writes_are_judged_as_the_same_bytes_written_at_once() {
    if let Some(why) = jail_tools_missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let r = run_harness("split.py");
    let ctx = format!("{r:#}");
    let mismatch = "HTTP/1.1 403 Egress denied: host_mismatch";
    for case in [
        "g_then_rest_fronted",
        "crlf_then_fronted",
        "bytewise_fronted",
    ] {
        let (client, origin) = split_case(&r, case);
        assert_eq!(client, mismatch, "{case}: {ctx}");
        assert!(
            origin.is_empty(),
            "{case}: nothing reaches the origin: {ctx}"
        );
    }
    // An allowed request split up reaches the origin as the request that was judged,
    // with no empty line before it.
    for (case, path) in [
        ("bytewise_allowed", "/allowed"),
        ("crlf_alone_then_allowed", "/allowed"),
    ] {
        let (client, origin) = split_case(&r, case);
        assert_eq!(client, "HTTP/1.1 200 OK", "{case}: {ctx}");
        assert_eq!(origin.len(), 1, "{case}: {ctx}");
        let got = origin[0][1].as_str().unwrap();
        assert!(
            got.starts_with(&format!("GET {path} HTTP/1.1\r\n")),
            "{case}: {got:?}"
        );
        assert!(got.contains("host: 203.0.113.5\r\n"), "{case}: {got:?}");
    }
    let (client, origin) = split_case(&r, "g_then_timeout");
    assert_eq!(client, "closed", "{ctx}");
    assert!(origin.is_empty(), "{ctx}");
    for case in [
        "hello_one_byte_then_rest",
        "hello_in_pieces_named",
        "hello_then_timeout",
    ] {
        let (client, origin) = split_case(&r, case);
        assert_eq!(client, "closed", "{case}: {ctx}");
        assert!(origin.is_empty(), "{case}: {ctx}");
    }
    let (client, origin) = split_case(&r, "hello_in_pieces_nameless");
    assert_eq!(client, "open", "{ctx}");
    assert_eq!(origin.len(), 1, "{ctx}");
    assert_eq!(
        origin[0][1], r["nameless_hello"],
        "relayed whole and unchanged: {ctx}"
    );
    let (client, origin) = split_case(&r, "ssh_banner");
    assert_eq!(client, "open", "{ctx}");
    assert_eq!(origin.len(), 1, "{ctx}");
    assert_eq!(origin[0][1], "SSH-2.0-OpenSSH_9.6 test\r\n", "{ctx}");

    // The records are those of the same bytes in one write.
    let audit = r["audit"].as_array().unwrap();
    let events: Vec<String> = audit
        .iter()
        .map(|a| {
            let s = |k: &str| a[k].as_str().unwrap_or("-").to_string();
            format!("{} {} {} {}", s("method"), s("url"), s("reason"), s("via"))
        })
        .collect();
    let fronted = "GET http://203.0.113.5:80/fronted host_mismatch transparent";
    let allowed = "GET http://203.0.113.5:80/allowed - transparent";
    let sni = "CONNECT - sni_mismatch transparent";
    let tunnel = "CONNECT - - transparent";
    // `G` then nothing past the header timeout: refused, and recorded as every refused
    // connection is.
    let unfinished = "CONNECT - invalid_request transparent";
    let mut want = [
        fronted, fronted, fronted, allowed, allowed, unfinished, sni, sni, tunnel, sni, tunnel,
    ];
    // One record per case; a tunnel's is written when both sides have closed, which on
    // a loaded machine may come after the next case's.
    let mut events = events;
    events.sort();
    want.sort();
    assert_eq!(events, want, "{ctx}");
}

/// Every refused connection has its own record, however its bytes arrive and whatever
/// other connections to the same address are waiting: a client sends `hello` (still the
/// start of a request line) to a refused literal address and waits, while a ClientHello
/// to the same address and port arrives on a second connection. Two records, both with
/// the address's refusal. The probe: to an allowed address the ClientHello reaches the
/// origin, and `hello` is still refused (its bytes never became a request), recorded.
#[test]
fn every_refused_connection_to_one_address_has_its_own_record() {
    if let Some(why) = jail_tools_missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let r = run_harness("refused.py");
    let ctx = format!("{r:#}");
    assert_eq!(
        r["refused_clients"],
        serde_json::json!(["closed", "closed"]),
        "{ctx}"
    );
    assert_eq!(r["accepted"]["203.0.113.6"], 0, "nothing reached it: {ctx}");
    let refused: Vec<&Value> = r["refused_audit"].as_array().unwrap().iter().collect();
    assert_eq!(refused.len(), 2, "one record per connection: {ctx}");
    for rec in &refused {
        assert_eq!(rec["event"], "egress.denied", "{ctx}");
        assert_eq!(rec["host"], "203.0.113.6", "{ctx}");
        assert_eq!(rec["port"], 8443, "{ctx}");
        assert_eq!(rec["via"], "transparent", "{ctx}");
        assert_eq!(
            rec["reason"], refused[0]["reason"],
            "the same refusal: {ctx}"
        );
        assert_eq!(rec["policy_level"], refused[0]["policy_level"], "{ctx}");
    }
    // TEST-NET-3 is a refused class (docs/reference/policy-files.md): no CIDR covers it.
    assert_eq!(refused[0]["reason"], "private_address", "{ctx}");
    assert_ne!(
        refused[0]["client"], refused[1]["client"],
        "two connections: {ctx}"
    );

    // The probe: the redirect works, and the allowed address's ClientHello was relayed.
    assert_eq!(r["accepted"]["203.0.113.5"], 1, "{ctx}");
    let audit = r["audit"].as_array().unwrap();
    let after: Vec<&str> = audit[2..]
        .iter()
        .map(|a| a["reason"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(after, ["invalid_request"], "{ctx}");
    assert_eq!(audit[2]["host"], "203.0.113.5", "{ctx}");
}

/// A canary in the first bytes of a redirected plain TCP connection (docs/reference/dlp.md,
/// "Where the proxy looks"): an SSH banner and a line carrying the organization's canary
/// to an allowed address is closed before upstream is dialed, recorded
/// `exfiltration_detected` with `"found_in": "first_bytes"`. The negative control: the
/// same line without the canary reaches the origin.
#[test]
fn a_canary_in_a_redirected_connections_first_bytes_closes_it_undialed() {
    if let Some(why) = jail_tools_missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let canary = "AKIAQ7EGRESSCANARY42";
    let r = run_harness_with("canary.py", &[canary]);
    let ctx = format!("{r:#}");
    let without = r["received_without"].as_array().unwrap();
    assert_eq!(without.len(), 1, "the control reached the origin: {ctx}");
    assert!(
        without[0]
            .as_str()
            .unwrap()
            .contains("no-canary-in-this-line"),
        "{ctx}"
    );
    assert_eq!(r["with"], "closed", "{ctx}");
    assert_eq!(
        r["received"].as_array().unwrap().len(),
        1,
        "nothing more reached the origin: {ctx}"
    );
    let audit = r["audit"].as_array().unwrap();
    let denied: Vec<&Value> = audit
        .iter()
        .filter(|a| a["event"] == "egress.denied")
        .collect();
    assert_eq!(denied.len(), 1, "{ctx}");
    assert_eq!(denied[0]["reason"], "exfiltration_detected", "{ctx}");
    assert_eq!(denied[0]["via"], "transparent", "{ctx}");
    assert_eq!(denied[0]["dlp"]["found_in"], "first_bytes", "{ctx}");
    assert_eq!(denied[0]["dlp"]["id"], "org:1", "{ctx}");
    let records = serde_json::to_string(audit).unwrap();
    assert!(
        !records.contains(canary),
        "never shown in a record: {records}"
    );
}

/// `[dlp] action = "report"` on the transparent listener (docs/reference/dlp.md, "Secret
/// detectors"): a GitHub token in a redirected connection's first bytes (a plain-HTTP
/// request line, an SSH banner's next line) reaches the origin, and each leaves one
/// `egress.flagged` record with its `dlp` object; a server name carrying it, refused
/// anyway (a server name for a literal address), is refused with the token as the
/// reason. The control: the request without it goes through unflagged. No record or
/// line of the proxy's log holds the token.
#[test]
fn report_mode_lets_a_secret_in_redirected_first_bytes_through_and_records_it_flagged() {
    if let Some(why) = jail_tools_missing() {
        eprintln!("skipped: {why}");
        return;
    }
    let token = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789";
    let r = run_harness_with("reported.py", &[token]);
    let ctx = format!("{r:#}");
    assert_eq!(r["http_clean"], "HTTP/1.1 200 OK", "{ctx}");
    assert_eq!(r["audit_clean"], serde_json::json!([]), "unflagged: {ctx}");
    assert_eq!(r["http_token"], "HTTP/1.1 200 OK", "{ctx}");
    let http: Vec<&str> = r["http_received"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(http.len(), 2, "{ctx}");
    assert!(
        http[1].starts_with(&format!("GET /?k={token} HTTP/1.1\r\n")),
        "{ctx}"
    );
    let lines = r["lines_received"].as_array().unwrap();
    assert_eq!(lines.len(), 1, "only the line, not the hello: {ctx}");
    assert!(lines[0].as_str().unwrap().contains(token), "{ctx}");
    assert_eq!(r["sni_token"], "closed", "{ctx}");
    let audit = r["audit"].as_array().unwrap();
    fn text(v: &Value) -> &str {
        v.as_str().unwrap_or("-")
    }
    let seen: Vec<(&str, &str, &str)> = audit
        .iter()
        .map(|a| {
            (
                text(&a["event"]),
                text(&a["method"]),
                text(&a["dlp"]["found_in"]),
            )
        })
        .collect();
    let want = [
        ("egress.flagged", "GET", "url"),
        ("egress.flagged", "CONNECT", "first_bytes"),
        ("egress.denied", "CONNECT", "sni"),
    ];
    assert_eq!(seen, want, "{ctx}");
    for record in audit {
        assert_eq!(record["reason"], "secret_detected", "{ctx}");
        assert_eq!(record["policy_level"], "dlp", "{ctx}");
        assert_eq!(record["via"], "transparent", "{ctx}");
        assert_eq!(record["dlp"]["id"], "github_token", "{ctx}");
        assert_eq!(record["dlp"]["kind"], "detector", "{ctx}");
        assert_eq!(record["dlp"]["encoding"], "plain", "{ctx}");
        assert!(record.get("url").is_none(), "{ctx}");
    }
    let shown = format!(
        "{}\n{}",
        serde_json::to_string(audit).unwrap(),
        r["proxy_log"]
    );
    for form in crate::dlp::shown::encoded_forms(token) {
        assert!(!shown.contains(&form), "{form} shown: {ctx}");
    }
}
