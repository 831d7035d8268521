//! egress-proxy: an egress allowlist proxy.
//!
//! # Layout
//!
//! - [`policy`]: the pure policy core (parse, compile, cover, decide).
//! - [`net`]: resolving allowed names, and dialing only addresses the check approved.
//! - [`audit`]: the audit record and its writer (JSON Lines, never drops an event).

pub mod audit;
pub mod net;
pub mod policy;
