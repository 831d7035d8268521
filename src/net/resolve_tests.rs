//! The resolver's unit tests (`super` is `net::resolve`), against a DNS server of their own on loopback.

use super::*;
use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Mutex;
use std::time::Instant;
use tokio::net::UdpSocket;

/// A DNS server on 127.0.0.1 that answers A records for its names, NODATA for their
/// other types, NXDOMAIN for everything else (or nothing at all when `silent`), and
/// records every question it is asked.
struct TestDns {
    addr: SocketAddr,
    asked: Arc<Mutex<Vec<(String, RecordType)>>>,
}

impl TestDns {
    async fn start(names: &[(&str, IpAddr)], silent: bool) -> TestDns {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let mut by_name: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for (name, ip) in names {
            by_name.entry(name.to_string()).or_default().push(*ip);
        }
        let names = by_name;
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                    return;
                };
                let Ok(query) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                for q in query.queries() {
                    let name = q.name().to_ascii().trim_end_matches('.').to_lowercase();
                    log.lock().unwrap().push((name, q.query_type()));
                }
                if silent {
                    continue;
                }
                let reply = answer(&query, &names);
                let _ = socket.send_to(&reply.to_vec().unwrap(), from).await;
            }
        });
        TestDns { addr, asked }
    }

    fn asked(&self, name: &str, qtype: RecordType) -> usize {
        let asked = self.asked.lock().unwrap();
        asked
            .iter()
            .filter(|(n, t)| n == name && *t == qtype)
            .count()
    }

    fn total(&self) -> usize {
        self.asked.lock().unwrap().len()
    }
}

fn answer(query: &Message, names: &HashMap<String, Vec<IpAddr>>) -> Message {
    let mut reply = Message::new();
    reply
        .set_id(query.id())
        .set_message_type(MessageType::Response)
        .set_op_code(query.op_code())
        .set_recursion_desired(query.recursion_desired())
        .set_recursion_available(true);
    let mut code = ResponseCode::NoError;
    for q in query.queries() {
        reply.add_query(q.clone());
        let name = q.name().to_ascii().trim_end_matches('.').to_lowercase();
        let Some(ips) = names.get(&name) else {
            code = ResponseCode::NXDomain;
            continue;
        };
        for ip in ips {
            let rdata = match (ip, q.query_type()) {
                (IpAddr::V4(v4), RecordType::A) => RData::A(A(*v4)),
                (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(*v6)),
                _ => continue,
            };
            reply.add_answer(Record::from_rdata(q.name().clone(), 60, rdata));
        }
    }
    reply.set_response_code(code);
    reply
}

const A_TEST: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));

#[tokio::test]
async fn both_families_are_returned_ipv4_first() {
    let v6: IpAddr = "2001:db8::1".parse().unwrap();
    let v4b: IpAddr = "192.0.2.2".parse().unwrap();
    let dns = TestDns::start(
        &[("d.test", v6), ("d.test", A_TEST), ("d.test", v4b)],
        false,
    )
    .await;
    let r = resolver(HashMap::new(), dns.addr, 2000);
    assert_eq!(r.resolve("d.test").await.unwrap(), vec![A_TEST, v4b, v6]);
}

fn resolver(pins: HashMap<String, Vec<IpAddr>>, server: SocketAddr, ms: u64) -> Resolver {
    Resolver::new(pins, Some(server), Duration::from_millis(ms)).unwrap()
}

#[tokio::test]
async fn pinned_name_answers_without_a_query() {
    let dns = TestDns::start(&[("a.test", A_TEST)], false).await;
    let pinned: Vec<IpAddr> = vec![
        Ipv4Addr::new(203, 0, 113, 7).into(),
        Ipv6Addr::LOCALHOST.into(),
    ];
    let pins = HashMap::from([("a.test".to_string(), pinned.clone())]);
    let r = resolver(pins, dns.addr, 2000);
    assert_eq!(r.resolve("a.test").await.unwrap(), pinned);
    assert_eq!(dns.total(), 0);
}

#[tokio::test]
async fn configured_server_answers_with_one_query_per_type() {
    let dns = TestDns::start(&[("a.test", A_TEST)], false).await;
    let r = resolver(HashMap::new(), dns.addr, 2000);
    let addrs = r.resolve("a.test").await.unwrap();
    assert_eq!(addrs, vec![A_TEST]);
    // Asked exactly as given (no search domain), once for A and once for AAAA.
    assert_eq!(dns.asked("a.test", RecordType::A), 1);
    assert_eq!(dns.asked("a.test", RecordType::AAAA), 1);
    assert_eq!(dns.total(), 2);
}

#[tokio::test]
async fn every_lookup_asks_the_server_again() {
    let dns = TestDns::start(&[("a.test", A_TEST)], false).await;
    let r = resolver(HashMap::new(), dns.addr, 2000);
    r.resolve("a.test").await.unwrap();
    r.resolve("a.test").await.unwrap();
    assert_eq!(dns.asked("a.test", RecordType::A), 2);
}

#[tokio::test]
async fn nxdomain_is_no_addresses_naming_the_host() {
    let dns = TestDns::start(&[("a.test", A_TEST)], false).await;
    let r = resolver(HashMap::new(), dns.addr, 2000);
    let err = r.resolve("missing.test").await.unwrap_err();
    assert!(
        matches!(err, ResolveError::NoAddresses(ref h) if h == "missing.test"),
        "{err:?}"
    );
    assert!(err.to_string().contains("missing.test"));
}

#[tokio::test]
async fn silent_server_times_out_within_the_budget() {
    let dns = TestDns::start(&[], true).await;
    let r = resolver(HashMap::new(), dns.addr, 300);
    let started = Instant::now();
    let err = r.resolve("a.test").await.unwrap_err();
    assert!(
        matches!(err, ResolveError::Timeout(ref h) if h == "a.test"),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    assert!(dns.total() >= 1);
}

#[test]
fn parse_resolve_pin_cases() {
    let v4: IpAddr = "127.0.0.1".parse().unwrap();
    let v6: IpAddr = "::1".parse().unwrap();
    assert_eq!(
        parse_resolve_pin("A.Test=127.0.0.1"),
        Ok(("a.test".into(), v4))
    );
    assert_eq!(
        parse_resolve_pin("a.test.=127.0.0.1"),
        Ok(("a.test".into(), v4))
    );
    assert_eq!(parse_resolve_pin("a.test=::1"), Ok(("a.test".into(), v6)));
    assert_eq!(parse_resolve_pin("a.test=[::1]"), Ok(("a.test".into(), v6)));
    for bad in [
        "a.test",
        "=127.0.0.1",
        ".=127.0.0.1",
        "a.test=",
        "a.test=nope",
        "a.test=[127.0.0.1]",
        "a.test=[::1",
        "a:80=::1",
        "*.a.test=::1",
        "bücher.test=::1",
        "a..test=::1",
    ] {
        let err = parse_resolve_pin(bad).unwrap_err();
        assert!(err.contains("--resolve"), "{bad}: {err}");
    }
}
