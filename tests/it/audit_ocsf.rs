//! `serve --audit-format ocsf` from the outside (docs/reference/audit-log.md, "OCSF"):
//! the lines a real proxy writes for a denied and an allowed request, a tunnel, a DNS
//! query and its shutdown checkpoint are OCSF 1.5 events that a validator from PyPI
//! (`ocsf-emitter`, pinned in `.ci/run`) accepts against each class's model and
//! invariants, and `audit verify` and `audit summarize` read them.
//! The validation is skipped, with a reason printed, when `python3` has no
//! `ocsf_emitter` module.

use std::process::Command;
use std::time::Duration;

use hickory_proto::rr::RecordType;
use serde_json::Value;

use crate::lint::egress;
use crate::support::client::{connect_via_proxy, get_via_proxy};
use crate::support::dns::DnsServer;
use crate::support::dns_client::{dns_listener, UdpClient};
use crate::support::origin::Origin;
use crate::support::proxy::ProxyBuilder;
use crate::support::{json_lines, unique_temp_dir};

/// Validates each line of the file named by argv[1] with ocsf-emitter: the line's class
/// model (generated from the OCSF 1.5.0 schema: required attributes, enums, types) and
/// its invariants (category, names, type_uid, metadata.version). Shows first that the
/// validator refuses an event without a required attribute (`time`).
const SCRIPT: &str = r#"
import json, sys
from ocsf_emitter import validate, InvalidFindingError, _models
from ocsf_emitter.defaults import class_spec_by_uid

def check(event):
    spec = class_spec_by_uid(event["class_uid"])
    if spec is None:
        raise InvalidFindingError(f"class_uid {event['class_uid']} is not an OCSF class")
    validate(getattr(_models, spec.model_name).model_validate(event))

lines = [json.loads(l) for l in open(sys.argv[1])]
broken = dict(lines[0])
del broken["time"]
try:
    check(broken)
    print("the validator accepted an event without `time`")
    sys.exit(2)
except Exception:
    pass
failed = 0
for n, event in enumerate(lines, 1):
    try:
        check(event)
        print("valid", n, event["class_uid"], event["type_uid"])
    except Exception as e:
        failed += 1
        print("INVALID", n, type(e).__name__, e)
sys.exit(1 if failed else 0)
"#;

/// Whether `python3` can import ocsf-emitter; says why not when it cannot.
fn validator_missing() -> bool {
    let found = Command::new("python3")
        .args(["-c", "import ocsf_emitter"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: python3 has no `ocsf_emitter` module (pip install ocsf-emitter)");
    }
    !found
}

#[tokio::test]
async fn the_proxy_writes_ocsf_events_a_validator_accepts_and_audit_commands_read() {
    let dir = unique_temp_dir("ocsf");
    let keys = dir.join("keys");
    assert_eq!(egress(&["audit", "keygen", keys.to_str().unwrap()]).code, 0);
    let origin = Origin::start().await;
    let dns = DnsServer::builder().start().await;
    let mut proxy = ProxyBuilder::standard(origin.port())
        .audit_allowed()
        .dns_server(dns.addr())
        .arg("--audit-format")
        .arg("ocsf")
        .arg("--audit-signing-key")
        .arg(keys.join("audit-signing-key.pem").to_str().unwrap())
        .arg("--dns-listen")
        .arg("127.0.0.1:0")
        .start()
        .await;
    let allowed = format!("allowed.test:{}", origin.port());

    let denied = get_via_proxy(proxy.addr, "http://evil.test/x?q=1", &[]).await;
    assert_eq!(denied.status, 403, "{}", proxy.diagnostics());
    let ok = get_via_proxy(proxy.addr, &format!("http://{allowed}/"), &[]).await;
    assert_eq!(ok.status, 200, "{}", proxy.diagnostics());
    let (answer, mut tunnel) = connect_via_proxy(proxy.addr, &allowed, &[]).await;
    assert_eq!(answer.status, 200, "{}", proxy.diagnostics());
    assert_eq!(tunnel.get(&allowed, "/in-tunnel").await.status, 200);
    drop(tunnel);
    let mut udp = UdpClient::new(dns_listener(&proxy)).await;
    udp.query("evil.test", RecordType::A).await;
    let class = |uid: u64| move |v: &Value| v["class_uid"] == uid;
    for uid in [4001, 4002, 4003] {
        proxy.wait_audit(class(uid), Duration::from_secs(10)).await;
    }
    assert!(proxy.terminate().await.success(), "{}", proxy.diagnostics());

    let events = json_lines(&proxy.audit_path);
    let by = |uid: u64, event: &str| {
        events
            .iter()
            .find(|e| e["class_uid"] == uid && e["unmapped"]["event"] == event)
            .unwrap_or_else(|| panic!("no {uid} {event} in {events:#?}"))
    };
    let refused = by(4002, "egress.denied");
    assert_eq!(refused["http_request"]["http_method"], "GET");
    assert_eq!(
        refused["http_request"]["url"]["url_string"],
        "http://evil.test/x?q=1"
    );
    assert_eq!(refused["disposition_id"], 2);
    assert_eq!(refused["dst_endpoint"]["hostname"], "evil.test");
    assert!(refused["status_detail"].is_string(), "{refused}");
    assert_eq!(by(4002, "egress.allowed")["disposition_id"], 1);
    let tunnel = by(4001, "egress.allowed");
    assert_eq!(tunnel["unmapped"]["method"], "CONNECT");
    assert!(tunnel["traffic"]["bytes_in"].as_u64() > Some(0), "{tunnel}");
    assert_eq!(by(4003, "egress.denied")["query"]["hostname"], "evil.test");
    let last = events.last().unwrap();
    assert_eq!(last["class_uid"], 1008, "the shutdown checkpoint");
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["metadata"]["sequence"], i as u64 + 1, "{e}");
        assert_eq!(e["metadata"]["version"], "1.5.0");
    }

    let public = keys.join("audit-signing-key.pub.pem");
    let log = proxy.audit_path.to_str().unwrap();
    let out = egress(&[
        "audit",
        "verify",
        "--public-key",
        public.to_str().unwrap(),
        log,
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let records = events.len() - 1;
    assert!(
        out.stdout.starts_with(&format!(
            "intact: {records} records in 1 file; 1 checkpoint"
        )),
        "{}",
        out.stdout
    );
    let out = egress(&["audit", "summarize", "--format", "json", log]);
    let summary: Value = serde_json::from_str(&out.stdout).expect("a JSON summary");
    assert_eq!(summary["records"], events.len() as u64, "{summary}");
    assert_eq!(summary["malformed"], 0, "{summary}");
    assert_eq!(summary["denials"], 2, "{summary}");

    if validator_missing() {
        return;
    }
    let out = Command::new("python3")
        .args(["-c", SCRIPT, log])
        .output()
        .expect("run python3");
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    for uid in ["4001", "4002", "4003", "1008"] {
        assert!(
            said.contains(&format!(" {uid} ")),
            "{uid} validated: {said}"
        );
    }
}
