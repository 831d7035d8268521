//! The DNS listener (`serve --dns-listen`, docs/reference/confinement.md): answers
//! from the policy alone, over UDP and TCP. Every proxy here has `--dns-server` pointed
//! at a test DNS server that knows every name, so "no query upstream" is observed, not
//! assumed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use serde_json::Value;

use crate::admin::ADMIN_TOKEN;
use crate::lint::egress;
use crate::support::admin::metric;
use crate::support::client::connect_via_proxy;
use crate::support::dns::DnsServer;
use crate::support::dns_client::{a_records, dns_listener, query, TcpClient, UdpClient};
use crate::support::expect::{assert_denied_response, Denial};
use crate::support::org::{allowlist_json, Org};
use crate::support::proxy::{free_port, Proxy, ProxyBuilder, QUIET_PERIOD};

/// The synthetic range, `198.18.0.0/15`.
fn synthetic(ip: Ipv4Addr) -> bool {
    ip.octets()[0] == 198 && (ip.octets()[1] & 0xfe) == 18
}

/// Every name the tests ask, known upstream: only the policy can keep a query there.
const NAMES: &[&str] = &[
    "allowed.test",
    "other.test",
    "evil.test",
    "evil-tcp.test",
    "twice.test",
    "denied.evil.test",
];

async fn upstream() -> DnsServer {
    let mut builder = DnsServer::builder();
    for name in NAMES {
        builder = builder.record(name, Ipv4Addr::LOCALHOST);
    }
    builder.start().await
}

/// The organization allows `allowed.test` and `other.test`; so does `--policy`.
fn org() -> Org {
    Org::new().allow("allowed.test").allow("other.test")
}

struct Jail {
    proxy: Proxy,
    upstream: DnsServer,
    dns: SocketAddr,
}

impl Jail {
    async fn start(org: Org, extra: &[&str]) -> Jail {
        Jail::start_with(org, |mut builder| {
            for arg in extra {
                builder = builder.arg(arg);
            }
            builder
        })
        .await
    }

    /// A jail whose proxy is also set up by `more`.
    async fn start_with(org: Org, more: impl FnOnce(ProxyBuilder) -> ProxyBuilder) -> Jail {
        let upstream = upstream().await;
        let builder = ProxyBuilder::new(org.to_toml())
            .policy(allowlist_json(&["allowed.test", "other.test"]))
            .dns_server(upstream.addr())
            .arg("--dns-listen")
            .arg("127.0.0.1:0");
        let proxy = more(builder).start().await;
        let dns = dns_listener(&proxy);
        Jail {
            proxy,
            upstream,
            dns,
        }
    }

    /// No query reached the upstream server, a moment after the last answer.
    async fn assert_nothing_upstream(&self) {
        tokio::time::sleep(QUIET_PERIOD).await;
        assert!(
            self.upstream.queried_names().is_empty(),
            "the DNS listener asked upstream: {:?}\n{}",
            self.upstream.queried_names(),
            self.proxy.diagnostics()
        );
    }
}

/// The audit record of a denied DNS query.
fn assert_dns_denial(record: &Value, host: &str, reason: &str, proxy: &Proxy) {
    let ctx = || format!("record: {record}\n{}", proxy.diagnostics());
    assert_eq!(record["event"], "egress.denied", "{}", ctx());
    assert_eq!(record["via"], "dns", "{}", ctx());
    assert_eq!(record["method"], "DNS", "{}", ctx());
    assert!(
        record["port"].is_null(),
        "a DNS query has no port\n{}",
        ctx()
    );
    assert_eq!(record["host"], host, "{}", ctx());
    assert_eq!(record["reason"], reason, "{}", ctx());
    assert!(record.get("rule").is_some(), "{}", ctx());
    assert!(record.get("policy_level").is_some(), "{}", ctx());
    assert!(record["request_id"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));
    assert!(record["client"]
        .as_str()
        .is_some_and(|c| c.starts_with("127.0.0.1:")));
}

#[tokio::test]
async fn an_allowed_name_gets_a_stable_synthetic_address_over_udp_and_tcp() {
    let jail = Jail::start(org(), &[]).await;
    let mut udp = UdpClient::new(jail.dns).await;
    let first = udp.query("allowed.test.", RecordType::A).await;
    assert_eq!(first.response_code(), ResponseCode::NoError);
    let addrs = a_records(&first);
    assert_eq!(addrs.len(), 1, "{first:?}");
    assert!(synthetic(addrs[0]), "{addrs:?}");
    assert!(first.answers()[0].ttl() <= 60);

    let again = udp.query("allowed.test.", RecordType::A).await;
    assert_eq!(a_records(&again), addrs, "the same name keeps its address");
    for spelling in ["ALLOWED.Test.", "allowed.test"] {
        let m = udp.query(spelling, RecordType::A).await;
        assert_eq!(
            a_records(&m),
            addrs,
            "{spelling}: case and the dot make no new name"
        );
    }
    let other = udp.query("other.test.", RecordType::A).await;
    let other = a_records(&other);
    assert!(
        synthetic(other[0]) && other != addrs,
        "{other:?} vs {addrs:?}"
    );

    let mut tcp = TcpClient::connect(jail.dns).await;
    let by_tcp = tcp.query("allowed.test.", RecordType::A).await;
    assert_eq!(by_tcp.response_code(), ResponseCode::NoError);
    assert_eq!(a_records(&by_tcp), addrs, "TCP and UDP share the table");
    let second = tcp.query("other.test.", RecordType::A).await;
    assert_eq!(
        a_records(&second),
        other,
        "several messages on one connection"
    );

    jail.assert_nothing_upstream().await;
    assert!(
        jail.proxy.audit_lines().is_empty(),
        "an allowed name is not audited"
    );
}

#[tokio::test]
async fn aaaa_and_other_types_of_an_allowed_name_are_empty_noerror() {
    let jail = Jail::start(org(), &[]).await;
    let mut udp = UdpClient::new(jail.dns).await;
    let mut tcp = TcpClient::connect(jail.dns).await;
    for qtype in [RecordType::AAAA, RecordType::MX, RecordType::TXT] {
        for m in [
            udp.query("allowed.test.", qtype).await,
            tcp.query("allowed.test.", qtype).await,
        ] {
            assert_eq!(m.response_code(), ResponseCode::NoError, "{qtype}");
            assert!(m.answers().is_empty(), "{qtype}: {m:?}");
        }
    }
    jail.assert_nothing_upstream().await;
}

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
async fn malformed_messages_get_formerr_or_nothing_and_other_opcodes_notimp() {
    let jail = Jail::start(org(), &[]).await;
    let udp = UdpClient::new(jail.dns).await;
    let wait = Duration::from_millis(300);
    assert_eq!(udp.exchange(b"\x01\x02\x03", wait).await, None, "no header");
    let mut cut = query(0x0777, "allowed.test.", RecordType::A);
    cut.truncate(16);
    let reply = udp
        .exchange(&cut, crate::support::IO_TIMEOUT)
        .await
        .unwrap();
    let m = hickory_proto::op::Message::from_vec(&reply).unwrap();
    assert_eq!((m.id(), m.response_code()), (0x0777, ResponseCode::FormErr));
    let mut notify = query(0x0778, "allowed.test.", RecordType::SOA);
    notify[2] = (notify[2] & 0x87) | (4 << 3); // opcode NOTIFY
    let reply = udp
        .exchange(&notify, crate::support::IO_TIMEOUT)
        .await
        .unwrap();
    let m = hickory_proto::op::Message::from_vec(&reply).unwrap();
    assert_eq!(m.response_code(), ResponseCode::NotImp);
    // Still answering.
    let mut udp = udp;
    let m = udp.query("allowed.test.", RecordType::A).await;
    assert_eq!(m.response_code(), ResponseCode::NoError);
    jail.assert_nothing_upstream().await;
    assert!(jail.proxy.audit_lines().is_empty());
}

#[tokio::test]
async fn an_idle_tcp_connection_is_closed_after_the_header_timeout() {
    use tokio::io::AsyncReadExt;
    let jail = Jail::start(org(), &["--header-timeout", "0.5"]).await;
    let mut tcp = TcpClient::connect(jail.dns).await;
    let m = tcp.query("allowed.test.", RecordType::A).await;
    assert_eq!(m.response_code(), ResponseCode::NoError);
    let started = std::time::Instant::now();
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), tcp.stream.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the idle connection stays open: {read:?}"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[tokio::test]
async fn dns_answers_are_counted_in_the_metrics() {
    let jail = Jail::start_with(org(), |b| b.admin(ADMIN_TOKEN)).await;
    let mut udp = UdpClient::new(jail.dns).await;
    udp.query("allowed.test.", RecordType::A).await;
    udp.query("allowed.test.", RecordType::AAAA).await;
    udp.query("evil.test.", RecordType::A).await;
    udp.exchange(
        &query(1, "x.test.", RecordType::A)[..14],
        Duration::from_secs(1),
    )
    .await;
    jail.proxy.expect_audit_count(1).await;
    let text = jail.proxy.admin().metrics().await;
    let series = |d: &str, r: &str| {
        metric(
            &text,
            &format!("egress_dns_queries_total{{decision=\"{d}\",reason=\"{r}\"}}"),
        )
    };
    assert_eq!(series("allowed", "none"), Some(2.0), "{text}");
    assert_eq!(
        series("denied", "not_in_org_allowlist"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(series("denied", "invalid_request"), Some(1.0), "{text}");
    assert_eq!(
        metric(
            &text,
            "egress_connections_total{decision=\"denied\",reason=\"not_in_org_allowlist\"}"
        ),
        Some(0.0),
        "a DNS query is not a connection"
    );
}

#[tokio::test]
async fn the_dns_listener_is_one_of_the_proxys_own_addresses() {
    for _ in 0..5 {
        let dns = free_port(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let org = org().ports(&[80, 443, dns.port()]).loopback();
        let policy = serde_json::json!({
            "type": "allowlist",
            "allowed_domains": ["allowed.test"],
            "allowed_cidrs": ["127.0.0.0/8"],
        });
        let upstream = upstream().await;
        let proxy = ProxyBuilder::new(org.to_toml())
            .policy(policy.to_string())
            .dns_server(upstream.addr())
            .arg("--dns-listen")
            .arg(&dns.to_string())
            .start()
            .await;
        if dns_listener(&proxy) != dns {
            continue;
        }
        let (resp, _conn) = connect_via_proxy(proxy.addr, &dns.to_string(), &[]).await;
        let want = Denial::new(403, "private_address").at("127.0.0.1", dns.port());
        assert_denied_response(&resp, &want, &proxy);
        let record = proxy.single_audit().await;
        assert_eq!(record["rule"], "own listener", "{record}");
        return;
    }
    panic!("could not start a proxy with its DNS listener on a chosen port");
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

#[tokio::test]
async fn a_proxy_with_a_dns_listener_shuts_down_cleanly() {
    let mut jail = Jail::start(org(), &[]).await;
    let mut udp = UdpClient::new(jail.dns).await;
    udp.query("evil.test.", RecordType::A).await;
    let mut tcp = TcpClient::connect(jail.dns).await;
    tcp.query("allowed.test.", RecordType::A).await;
    let status = jail.proxy.terminate().await;
    assert!(status.success(), "{status:?}\n{}", jail.proxy.diagnostics());
    assert_eq!(jail.proxy.audit_lines().len(), 1, "flushed");
}

#[tokio::test]
async fn tcp_connections_over_the_cap_are_closed_until_one_ends() {
    use tokio::io::AsyncReadExt;
    // docs/reference/confinement.md: at most 256 TCP connections at once.
    const CAP: usize = 256;
    let jail = Jail::start(org(), &[]).await;
    let mut open = Vec::with_capacity(CAP);
    for _ in 0..CAP {
        let mut tcp = TcpClient::connect(jail.dns).await;
        // Answered: accepted and holding its slot.
        tcp.query("allowed.test.", RecordType::A).await;
        open.push(tcp);
    }
    let mut over = TcpClient::connect(jail.dns).await;
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), over.stream.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "a connection over the cap was kept: {read:?}"
    );
    drop(open.pop());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let mut tcp = TcpClient::connect(jail.dns).await;
        let mut probe = [0u8; 1];
        let closed =
            tokio::time::timeout(Duration::from_millis(200), tcp.stream.read(&mut probe)).await;
        if closed.is_err() {
            // Still open after 200 ms: it has a slot.
            let m = tcp.query("allowed.test.", RecordType::A).await;
            assert_eq!(m.response_code(), ResponseCode::NoError);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no slot came free");
    }
}
