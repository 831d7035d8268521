//! The DNS listener (`serve --dns-listen`, docs/reference/confinement.md): answers
//! from the policy alone, over UDP and TCP. Every proxy here has `--dns-server` pointed
//! at a test DNS server that knows every name, so "no query upstream" is observed, not
//! assumed.
//!
//! - [`allowed`]: names the policy allows, over UDP and TCP.
//! - [`denied`]: names it denies, their records, report mode, a reload left widening.
//! - [`serving`]: malformed messages, idle and surplus connections, metrics, shutdown.

mod allowed;
mod denied;
mod serving;

use std::net::{Ipv4Addr, SocketAddr};

use serde_json::Value;

use crate::support::dns::DnsServer;
use crate::support::dns_client::dns_listener;
use crate::support::org::{allowlist_json, Org};
use crate::support::proxy::{Proxy, ProxyBuilder, QUIET_PERIOD};

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
