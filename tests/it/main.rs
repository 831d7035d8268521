//! Integration tests of `egress-proxy` against its contract (`SPEC.md`): the real
//! binary on loopback, with test origins, a test DNS server and raw clients.
//!
//! Every proxy gets `--resolve` pins or a `--dns-server`; nothing here reaches the
//! system resolver or the internet.

mod support;

mod check;
mod connect;
mod denials;
mod dns;
mod forward;
mod lifecycle;
mod lint;
mod report;
mod summary;
mod support_selftest;
