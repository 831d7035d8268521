//! A DNS server on UDP `127.0.0.1:0`: A records for configured names, NXDOMAIN for
//! the rest, and a record of every name queried so tests can assert "no query".

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use tokio::net::UdpSocket;

/// What a name answers to its A queries: the n-th query gets `answers[n]` (the last
/// set once they run out), so a test can model a rebinding server.
struct Answers {
    answers: Vec<Vec<Ipv4Addr>>,
    asked: usize,
}

impl Answers {
    fn next(&mut self) -> Vec<Ipv4Addr> {
        let i = self.asked.min(self.answers.len() - 1);
        self.asked += 1;
        self.answers[i].clone()
    }
}

/// Builder: which names resolve to which address.
#[derive(Default)]
pub(crate) struct DnsBuilder {
    records: HashMap<String, Answers>,
    delay: Duration,
}

impl DnsBuilder {
    /// Answer `name` with an A record for `ip`.
    pub(crate) fn record(self, name: &str, ip: Ipv4Addr) -> Self {
        self.answers(name, &[&[ip]])
    }

    /// Answer the n-th A query for `name` with the records of `answers[n]` (in that
    /// order), and every later query with the last set.
    pub(crate) fn answers(mut self, name: &str, answers: &[&[Ipv4Addr]]) -> Self {
        assert!(!answers.is_empty(), "test bug: no answers for {name}");
        for ip in answers.iter().flat_map(|a| a.iter()) {
            assert!(
                ip.is_loopback(),
                "test bug: DNS answers must stay on loopback"
            );
        }
        let answers = answers.iter().map(|a| a.to_vec()).collect();
        self.records
            .insert(normalise(name), Answers { answers, asked: 0 });
        self
    }

    /// Hold every answer back this long (queries are still recorded at once), so a test
    /// can act between a name's judgement and its resolution.
    pub(crate) fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    pub(crate) async fn start(self) -> DnsServer {
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind dns");
        let addr = socket.local_addr().expect("dns addr");
        let queries = Arc::new(Mutex::new(Vec::new()));
        let (mut records, q, delay) = (self.records, queries.clone(), self.delay);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, peer)) = socket.recv_from(&mut buf).await {
                if let Some(answer) = answer(&buf[..n], &mut records, &q) {
                    tokio::time::sleep(delay).await;
                    let _ = socket.send_to(&answer, peer).await;
                }
            }
        });
        DnsServer { addr, queries }
    }
}

/// A running DNS server.
pub(crate) struct DnsServer {
    addr: SocketAddr,
    queries: Arc<Mutex<Vec<(String, RecordType)>>>,
}

impl DnsServer {
    pub(crate) fn builder() -> DnsBuilder {
        DnsBuilder::default()
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every name queried so far (lower case, no trailing dot), in order.
    pub(crate) fn queried_names(&self) -> Vec<String> {
        self.queries
            .lock()
            .unwrap()
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// How many queries named `name` or a name below it (catches search-domain
    /// suffixes such as `evil.test.corp`).
    pub(crate) fn queries_for(&self, name: &str) -> usize {
        let name = normalise(name);
        self.queried_names()
            .iter()
            .filter(|q| **q == name || q.starts_with(&format!("{name}.")))
            .count()
    }
}

fn normalise(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Build the answer to one query datagram; `None` when it does not parse.
fn answer(
    datagram: &[u8],
    records: &mut HashMap<String, Answers>,
    log: &Mutex<Vec<(String, RecordType)>>,
) -> Option<Vec<u8>> {
    let request = Message::from_vec(datagram).ok()?;
    let mut response = Message::new();
    response
        .set_id(request.id())
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(request.recursion_desired())
        .set_recursion_available(true)
        .set_authoritative(true);
    let mut code = ResponseCode::NoError;
    for query in request.queries() {
        let name = normalise(&query.name().to_ascii());
        log.lock().unwrap().push((name.clone(), query.query_type()));
        response.add_query(query.clone());
        match records.get_mut(&name) {
            Some(answers) if query.query_type() == RecordType::A => {
                for ip in answers.next() {
                    response.add_answer(Record::from_rdata(
                        query.name().clone(),
                        60,
                        RData::A(A(ip)),
                    ));
                }
            }
            // A known name without a record of this type: NOERROR, no answer.
            Some(_) => {}
            None => code = ResponseCode::NXDomain,
        }
    }
    response.set_response_code(code);
    response.to_vec().ok()
}
