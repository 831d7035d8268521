//! The checks of docs/reference/command-line.md ("probe"), run concurrently, each part
//! bounded by `--timeout-ms` and every check by the whole probe's limit.

use std::future::Future;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::proxy_env::ProxyEnv;
use super::{datagram, dns, millis, tcp, unix, web, Outcome, Part};
use crate::config::probe::ProbeUrl;
use crate::config::ProbeConfig;

pub const TCP4_DIRECT: &str = "tcp4-direct";
pub const TCP6_DIRECT: &str = "tcp6-direct";
pub const UDP_DNS_SYSTEM: &str = "udp-dns-system";
pub const UDP_DNS_DIRECT: &str = "udp-dns-direct";
pub const DOT: &str = "dot";
pub const DOH: &str = "doh";
pub const QUIC: &str = "quic";
pub const ICMP: &str = "icmp";
pub const METADATA: &str = "metadata";
pub const PROXY_ENFORCES: &str = "proxy-enforces";
pub const PROXY_ALLOWS: &str = "proxy-allows";
pub const UNIX_SOCKETS: &str = "unix-sockets";
pub const IPV6_ANY: &str = "ipv6-any";

/// Every check id, in the order the report lists them.
pub const IDS: [&str; 13] = [
    TCP4_DIRECT,
    TCP6_DIRECT,
    UDP_DNS_SYSTEM,
    UDP_DNS_DIRECT,
    DOT,
    DOH,
    QUIC,
    ICMP,
    METADATA,
    PROXY_ENFORCES,
    PROXY_ALLOWS,
    UNIX_SOCKETS,
    IPV6_ANY,
];

/// What each check tries, for the SARIF rules and the docs.
pub fn describe(id: &str) -> &'static str {
    match id {
        TCP4_DIRECT => "TCP to the IPv4 target, ports 443 and 80, ignoring proxy variables",
        TCP6_DIRECT => "TCP to the IPv6 target, ports 443 and 80, ignoring proxy variables",
        UDP_DNS_SYSTEM => "a DNS query to each nameserver of /etc/resolv.conf",
        UDP_DNS_DIRECT => "a DNS query to port 53 of the IPv4 target, over UDP and TCP",
        DOT => "DNS over TLS: TCP to port 853 of the IPv4 target",
        DOH => "DNS over HTTPS: a TLS handshake with the target, directly and through the proxy",
        QUIC => "a QUIC Initial to UDP port 443 of the IPv4 target",
        ICMP => "an ICMP echo to the IPv4 target",
        METADATA => "the cloud metadata service, directly and through the proxy",
        PROXY_ENFORCES => "the proxy refuses each --denied URL",
        PROXY_ALLOWS => "each --allowed URL is reached",
        UNIX_SOCKETS => "daemon Unix sockets (Docker, containerd, podman, D-Bus, tmux, X11)",
        IPV6_ANY => "a non-loopback IPv6 route and a TCP handshake to the IPv6 target",
        _ => "",
    }
}

/// The cloud metadata service's addresses (AWS's IPv6 one too).
pub const METADATA_V4: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(169, 254, 169, 254));
pub const METADATA_V6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254));

/// Time one check and bound it by `limit`; a check still running then is `unknown`.
async fn timed(
    id: &'static str,
    limit: Duration,
    check: impl Future<Output = Vec<Part>>,
) -> Outcome {
    let start = Instant::now();
    let parts = match tokio::time::timeout(limit, check).await {
        Ok(parts) => parts,
        Err(_) => vec![Part::unknown(format!(
            "did not finish within the probe's {} ms",
            limit.as_millis()
        ))],
    };
    Outcome::of(id, parts, millis(start.elapsed()))
}

/// Run every check concurrently; the results in [`IDS`]' order.
pub async fn all(config: &ProbeConfig, limit: Duration) -> Vec<Outcome> {
    let t = config.timeout;
    let v4 = IpAddr::V4(config.target_v4);
    let v6 = IpAddr::V6(config.target_v6);
    let env = ProxyEnv::from_env();
    let (a, b, c, d, e, f, g) = tokio::join!(
        timed(TCP4_DIRECT, limit, tcp::direct(v4, t)),
        timed(TCP6_DIRECT, limit, tcp::direct(v6, t)),
        timed(UDP_DNS_SYSTEM, limit, dns::system(t)),
        timed(
            UDP_DNS_DIRECT,
            limit,
            dns::direct(SocketAddr::new(v4, 53), t)
        ),
        timed(DOT, limit, tcp::dot(SocketAddr::new(v4, 853), t)),
        timed(DOH, limit, web::doh(v4, &env, t)),
        timed(QUIC, limit, datagram::quic(SocketAddr::new(v4, 443), t)),
    );
    let (h, i, j, k, l, m) = tokio::join!(
        timed(ICMP, limit, datagram::icmp(config.target_v4, t)),
        timed(METADATA, limit, metadata(&env, t)),
        timed(
            PROXY_ENFORCES,
            limit,
            web::enforces(&config.denied, &env, t)
        ),
        timed(PROXY_ALLOWS, limit, web::allows(&config.allowed, &env, t)),
        timed(UNIX_SOCKETS, limit, unix::sockets(t)),
        timed(IPV6_ANY, limit, tcp::ipv6_any(config.target_v6, t)),
    );
    vec![a, b, c, d, e, f, g, h, i, j, k, l, m]
}

/// `metadata`: a handshake (and a `GET /`) to each address, and the same through the
/// proxy variable.
async fn metadata(env: &ProxyEnv, t: Duration) -> Vec<Part> {
    let url = |ip: IpAddr| {
        let host = match ip {
            IpAddr::V6(v6) => format!("[{v6}]"),
            IpAddr::V4(v4) => v4.to_string(),
        };
        ProbeUrl::parse(&format!("http://{host}/latest/meta-data/")).expect("a valid URL")
    };
    let (url4, url6) = (url(METADATA_V4), url(METADATA_V6));
    let (v4, v6, proxied4, proxied6) = tokio::join!(
        tcp::http_get(SocketAddr::new(METADATA_V4, 80), t),
        tcp::http_get(SocketAddr::new(METADATA_V6, 80), t),
        web::through_proxy(&url4, env, t),
        web::through_proxy(&url6, env, t),
    );
    let mut parts = vec![v4, v6];
    parts.extend(proxied4);
    parts.extend(proxied6);
    parts
}
