//! The proxy's own addresses, always refused as destinations (docs/reference/policy-files.md, "Addresses"). A listener
//! on a wildcard address (`0.0.0.0`, `[::]`) is reachable at every local address on its
//! port, so it is expanded to each address of this host's interfaces, read at start.

use std::net::{IpAddr, SocketAddr};

/// Every address at which `listeners` can be reached. Interfaces added after start are
/// not seen; loopback and "this host" addresses are refused by the address check anyway.
pub(crate) fn own_addresses(listeners: &[SocketAddr]) -> Vec<SocketAddr> {
    let mut own = listeners.to_vec();
    if listeners.iter().any(|l| l.ip().is_unspecified()) {
        let local = local_ips();
        for listener in listeners.iter().filter(|l| l.ip().is_unspecified()) {
            own.extend(local.iter().map(|ip| SocketAddr::new(*ip, listener.port())));
        }
    }
    own.sort();
    own.dedup();
    own
}

fn local_ips() -> Vec<IpAddr> {
    match if_addrs::get_if_addrs() {
        Ok(interfaces) => interfaces.into_iter().map(|i| i.ip()).collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list this host's addresses; only loopback is known as the proxy's own");
            vec![
                IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
                IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_listener_stands_for_every_local_address_on_its_port() {
        let own = own_addresses(&[
            "0.0.0.0:3128".parse().unwrap(),
            "127.0.0.1:9000".parse().unwrap(),
        ]);
        assert!(own.contains(&"127.0.0.1:3128".parse().unwrap()), "{own:?}");
        assert!(own.contains(&"127.0.0.1:9000".parse().unwrap()));
        assert!(!own.contains(&"127.0.0.1:9001".parse().unwrap()));
    }

    #[test]
    fn specific_listeners_are_kept_as_they_are() {
        let listeners: Vec<SocketAddr> = vec!["127.0.0.1:3128".parse().unwrap()];
        assert_eq!(own_addresses(&listeners), listeners);
    }
}
