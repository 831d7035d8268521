//! The network side of an allowed request: resolving a name that policy already allowed,
//! and dialing exactly the addresses the proxy's address check approved
//! (docs/reference/policy-files.md, "Addresses").
//!
//! - [`resolve`]: pinned names (`serve --resolve`) and DNS (`serve --dns-server` or the
//!   system configuration), with no cache, so every lookup reflects the server.
//! - [`dial`]: connects only to a [`dial::CheckedAddr`], a type only the address check can
//!   build, so a connection that skipped the check does not compile.
//! - [`local`]: the proxy's own addresses, a wildcard listener expanded to every local
//!   address on its port.
//! - [`parent`]: the parent proxy (`serve --upstream-proxy`) allowed connections go
//!   through, asked only for what was decided and checked.
//! - [`synthetic`]: the addresses from `198.18.0.0/15` that stand for allowed names
//!   inside a jail.

pub(crate) mod dial;
pub(crate) mod local;
pub(crate) mod parent;
pub(crate) mod resolve;
pub(crate) mod synthetic;

/// The bytes of URL text with its `%XX` escapes decoded (userinfo, a query's values);
/// `None` for a `%` not followed by two hex digits.
pub(crate) fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}
