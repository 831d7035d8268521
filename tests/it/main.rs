//! Integration tests of `egress-proxy` against its contract (`docs/reference/`): the real
//! binary on loopback, with test origins, a test DNS server and raw clients.
//!
//! Every proxy gets `--resolve` pins or a `--dns-server`; nothing here reaches the
//! system resolver or the internet.

mod support;

mod admin;
mod admin_start;
mod approvals;
mod audit_chain;
mod audit_ocsf;
mod budget;
mod bypass;
mod check;
mod circles;
mod connect;
mod credentials;
mod denials;
mod diff;
mod dlp;
mod dns;
mod dns_levels;
mod dns_listener;
mod events;
mod fleet;
mod forward;
mod idle;
mod inspect;
mod inspect_git;
mod inspect_h2;
mod layers;
mod lifecycle;
mod limits;
mod lint;
mod messages;
mod otlp;
mod parent;
mod pending;
#[cfg(target_os = "linux")]
mod probe;
mod reason_phrase;
mod reliability;
mod reload;
mod report;
mod rules;
mod rules_lint;
#[cfg(target_os = "linux")]
mod run;
mod socks;
mod suggest;
mod summary;
mod support_selftest;
mod timeouts;
mod transparent;
mod ui;
mod upstream_pool;
mod watch;
mod websocket;
