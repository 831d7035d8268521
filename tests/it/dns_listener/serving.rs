//! The listener as a server: malformed messages and other opcodes, idle and surplus TCP
//! connections, metrics, its own address, and a clean shutdown.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use super::{org, upstream, Jail};
use crate::support::admin::metric;
use crate::support::client::connect_via_proxy;
use crate::support::dns_client::{dns_listener, query, TcpClient, UdpClient};
use crate::support::expect::{assert_denied_response, Denial};
use crate::support::proxy::{free_port, ProxyBuilder};
use crate::support::sessions::ADMIN_TOKEN;

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
