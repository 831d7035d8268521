//! Resolving names that policy already allowed (docs/reference/policy-files.md, "Addresses").
//!
//! The proxy calls [`Resolver::resolve`] only after the name itself was allowed, so a
//! denied name never causes a DNS query. Pinned names (`serve --resolve HOST=IP`) never
//! cause a query either. Everything else goes to one configured server
//! (`serve --dns-server IP:PORT`) or to the system's nameservers.
//!
//! hickory's cache is switched off: every lookup asks the server again, so the address the
//! proxy checks is the address the server gives now (a rebinding server cannot hide behind
//! a cached answer), and tests can count queries.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use foldhash::fast::RandomState;
use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfigGroup, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::ProtoErrorKind;
use hickory_resolver::{Name, ResolveErrorKind, TokioResolver};

/// Why a name gave no address to check.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The name does not exist, or has no A or AAAA records.
    #[error("{0}: no addresses")]
    NoAddresses(String),
    /// The lookup failed (server failure, unreachable server, malformed name...).
    #[error("{0}")]
    Lookup(String),
    /// No answer within the resolve timeout. Carries the host name.
    #[error("{0}: DNS lookup timed out")]
    Timeout(String),
}

/// Resolves allowed names: pins first, then DNS. Cheap to clone (shared inside).
#[derive(Clone)]
pub struct Resolver {
    pins: Arc<HashMap<String, Vec<IpAddr>, RandomState>>,
    dns: TokioResolver,
    timeout: Duration,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("pins", &self.pins)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Resolver {
    /// Builds a resolver.
    ///
    /// `pins`: name -> addresses, names already normalised (lower-case ASCII, no trailing
    /// dot). `dns_server`: `Some` sends every query (UDP, TCP when truncated) to that server
    /// only; `None` reads the system configuration, and when that cannot be read uses no
    /// nameservers at all, so lookups fail with an error instead of going somewhere
    /// unexpected. `timeout` bounds each whole [`resolve`](Self::resolve) call.
    pub fn new(
        pins: HashMap<String, Vec<IpAddr>>,
        dns_server: Option<SocketAddr>,
        timeout: Duration,
    ) -> Result<Resolver, ResolveError> {
        let (config, mut opts) = match dns_server {
            Some(server) => {
                let servers =
                    NameServerConfigGroup::from_ips_clear(&[server.ip()], server.port(), true);
                let config = ResolverConfig::from_parts(None, vec![], servers);
                let mut opts = ResolverOpts::default();
                // A configured server is the whole truth: no /etc/hosts.
                opts.use_hosts_file = ResolveHosts::Never;
                // Two tries inside the overall budget, so one lost UDP datagram is retried.
                opts.timeout = (timeout / 2).max(Duration::from_millis(1));
                opts.attempts = 2;
                (config, opts)
            }
            None => system_config(),
        };
        opts.cache_size = 0;
        opts.ndots = 0;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.preserve_intermediates = false;
        let dns = TokioResolver::builder_with_config(config, TokioConnectionProvider::default())
            .with_options(opts)
            .build();
        Ok(Resolver {
            pins: Arc::new(pins.into_iter().collect()),
            dns,
            timeout,
        })
    }

    /// The addresses `name` is pinned to (`--resolve`), if it is: what
    /// [`resolve`](Self::resolve) answers for it, without a copy.
    pub fn pinned(&self, name: &str) -> Option<&[IpAddr]> {
        self.pins.get(name).map(Vec::as_slice)
    }

    /// Every A and AAAA address of an already-allowed name, IPv4 first, without
    /// duplicates. A pinned name answers from its pins and never causes a DNS query.
    pub async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
        if let Some(pinned) = self.pins.get(name) {
            return Ok(pinned.clone());
        }
        // Boxed: hickory's lookup future would otherwise be part of every request's
        // future (moved by memcpy), pinned or not; a query over the network costs far
        // more than the allocation.
        Box::pin(self.lookup(name)).await
    }

    /// [`resolve`](Self::resolve) for a name that is not pinned: a DNS query.
    async fn lookup(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
        // Fully qualified, so no search domain is ever appended: `a.test` is asked as is.
        let fqdn = Name::from_ascii(format!("{name}."))
            .map_err(|e| ResolveError::Lookup(format!("{name}: not a valid DNS name: {e}")))?;
        let lookup = match tokio::time::timeout(self.timeout, self.dns.lookup_ip(fqdn)).await {
            Err(_) => return Err(ResolveError::Timeout(name.to_string())),
            Ok(Err(e)) => return Err(lookup_error(name, &e)),
            Ok(Ok(lookup)) => lookup,
        };
        let mut addrs: Vec<IpAddr> = Vec::new();
        for ip in lookup.iter() {
            if !addrs.contains(&ip) {
                addrs.push(ip);
            }
        }
        // Stable: keeps the server's order within each family.
        addrs.sort_by_key(|ip| ip.is_ipv6());
        if addrs.is_empty() {
            return Err(ResolveError::NoAddresses(name.to_string()));
        }
        Ok(addrs)
    }
}

/// The system's resolver configuration, or one with no nameservers when it cannot be read.
fn system_config() -> (ResolverConfig, ResolverOpts) {
    match hickory_resolver::system_conf::read_system_conf() {
        Ok(conf) => conf,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the system DNS configuration; names that are not pinned will not resolve");
            (
                ResolverConfig::from_parts(None, vec![], NameServerConfigGroup::new()),
                ResolverOpts::default(),
            )
        }
    }
}

fn lookup_error(name: &str, e: &hickory_resolver::ResolveError) -> ResolveError {
    if e.is_nx_domain() || e.is_no_records_found() {
        return ResolveError::NoAddresses(name.to_string());
    }
    if let ResolveErrorKind::Proto(p) = e.kind() {
        if matches!(p.kind(), ProtoErrorKind::Timeout) {
            return ResolveError::Timeout(name.to_string());
        }
    }
    ResolveError::Lookup(format!("{name}: {e}"))
}

/// Parses one `serve --resolve HOST=IP` value. The host is lower-cased with one trailing
/// dot removed; the IP may be IPv6 bare (`::1`) or bracketed (`[::1]`).
pub fn parse_resolve_pin(s: &str) -> Result<(String, IpAddr), String> {
    let (host, ip) = s
        .split_once('=')
        .ok_or_else(|| format!("--resolve {s:?}: expected HOST=IP"))?;
    let host = host.trim().to_ascii_lowercase();
    let host = host.strip_suffix('.').unwrap_or(&host).to_string();
    if host.is_empty() {
        return Err(format!("--resolve {s:?}: the host is empty"));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if !host.split('.').all(label_ok) {
        return Err(format!(
            "--resolve {s:?}: {host:?} is not a host name (ASCII letters, digits, '-', '_' \
             and dots; write international names in punycode)"
        ));
    }
    let ip = ip.trim();
    let bracketed = ip.strip_prefix('[').and_then(|rest| rest.strip_suffix(']'));
    let parsed: IpAddr = bracketed
        .unwrap_or(ip)
        .parse()
        .map_err(|_| format!("--resolve {s:?}: {ip:?} is not an IP address"))?;
    if bracketed.is_some() && parsed.is_ipv4() {
        return Err(format!(
            "--resolve {s:?}: brackets are for IPv6 addresses only"
        ));
    }
    Ok((host, parsed))
}

#[cfg(test)]
mod tests {
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
}
