//! egress-proxy: an egress allowlist proxy.
//!
//! # Layout
//!
//! - [`policy`]: the pure policy core (parse, compile, cover, decide).

pub mod policy;
