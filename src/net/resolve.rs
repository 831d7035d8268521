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
pub(crate) enum ResolveError {
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
pub(crate) struct Resolver {
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
    pub(crate) fn new(
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
    pub(crate) fn pinned(&self, name: &str) -> Option<&[IpAddr]> {
        self.pins.get(name).map(Vec::as_slice)
    }

    /// Every A and AAAA address of an already-allowed name, IPv4 first, without
    /// duplicates. A pinned name answers from its pins and never causes a DNS query.
    pub(crate) async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
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
pub(crate) fn parse_resolve_pin(s: &str) -> Result<(String, IpAddr), String> {
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
#[path = "resolve_tests.rs"]
mod tests;
