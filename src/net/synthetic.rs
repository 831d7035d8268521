//! Synthetic addresses (docs/reference/confinement.md): inside a jail the DNS listener
//! answers an allowed name with an address from `198.18.0.0/15` that stands for it, and
//! a connection to that address is judged by the name. The same name keeps its address
//! while the proxy runs; different names get different addresses. When every address is
//! taken, no new name gets one (the DNS listener then fails the query: fail closed).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;

use ipnet::Ipv4Net;

use crate::policy::HostName;

/// The benchmarking range of RFC 2544: never routed on the internet, so a synthetic
/// address cannot be confused with a real destination.
pub(crate) const RANGE: Ipv4Net = match Ipv4Net::new(Ipv4Addr::new(198, 18, 0, 0), 15) {
    Ok(net) => net,
    Err(_) => panic!("198.18.0.0/15 is a valid network"),
};

#[derive(Default)]
struct Table {
    by_name: HashMap<HostName, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, HostName>,
    /// Offset into [`RANGE`] of the next address to hand out (0 and the last are skipped).
    next: u32,
}

/// The names the DNS listener has answered, and the addresses that stand for them.
#[derive(Default)]
pub(crate) struct SyntheticNames {
    table: Mutex<Table>,
}

impl SyntheticNames {
    pub(crate) fn new() -> SyntheticNames {
        SyntheticNames::default()
    }

    /// The address that stands for `name`, given on first use; `None` when the range is
    /// exhausted.
    pub(crate) fn address_for(&self, name: &HostName) -> Option<Ipv4Addr> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(addr) = table.by_name.get(name) {
            return Some(*addr);
        }
        // Skip the network and broadcast addresses of the range.
        let size = 1u32 << (32 - RANGE.prefix_len());
        let offset = table.next + 1;
        if offset >= size - 1 {
            return None;
        }
        table.next += 1;
        let addr = Ipv4Addr::from(u32::from(RANGE.network()) + offset);
        table.by_name.insert(name.clone(), addr);
        table.by_addr.insert(addr, name.clone());
        Some(addr)
    }

    /// The name `ip` stands for, if it is a synthetic address that was handed out.
    pub(crate) fn name_for(&self, ip: IpAddr) -> Option<HostName> {
        let IpAddr::V4(v4) = ip.to_canonical() else {
            return None;
        };
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.by_addr.get(&v4).cloned()
    }

    /// Whether `ip` is in the synthetic range at all (handed out or not): such an
    /// address is never a real destination.
    pub(crate) fn in_range(ip: IpAddr) -> bool {
        match ip.to_canonical() {
            IpAddr::V4(v4) => RANGE.contains(&v4),
            IpAddr::V6(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> HostName {
        HostName::parse(s).unwrap()
    }

    #[test]
    fn a_name_keeps_its_address_and_names_differ() {
        let names = SyntheticNames::new();
        let a = names.address_for(&name("a.test")).unwrap();
        let b = names.address_for(&name("b.test")).unwrap();
        assert_ne!(a, b);
        assert_eq!(
            names.address_for(&name("A.test.")).unwrap(),
            a,
            "case and trailing dot"
        );
        assert!(RANGE.contains(&a) && RANGE.contains(&b));
        assert_eq!(names.name_for(IpAddr::V4(a)), Some(name("a.test")));
        assert_eq!(names.name_for("198.18.200.1".parse().unwrap()), None);
        assert!(SyntheticNames::in_range("198.19.255.255".parse().unwrap()));
        assert!(!SyntheticNames::in_range("198.20.0.1".parse().unwrap()));
    }

    #[test]
    fn the_range_runs_out_without_reusing_an_address() {
        let names = SyntheticNames::new();
        names.table.lock().unwrap().next = (1 << 17) - 3;
        let last = names.address_for(&name("last.test")).unwrap();
        assert_eq!(last, Ipv4Addr::new(198, 19, 255, 254));
        assert_eq!(names.address_for(&name("more.test")), None);
        assert_eq!(names.address_for(&name("last.test")), Some(last));
    }
}
