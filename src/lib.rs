//! egress-proxy: an egress allowlist proxy. Untrusted code reaches the network only
//! through it, and only where the organization allowlist and the narrower request
//! `network_policy` both allow. Every denied attempt is written to the audit log.
//!
//! # Public API
//!
//! What the binary, the benches and the fuzz targets use: [`cli`] (the argument types),
//! [`config`] (each command's validated configuration), the commands' modules
//! ([`serve`], [`run`], [`check`], [`lint`], [`review`], [`diff`], [`watch`], [`probe`]), [`tls`]
//! (`ca init`'s CA, which the tests use too), the pure [`policy`] core, and `fuzzing`
//! behind its feature. Everything else is `pub(crate)`.
//!
//! # Layout
//!
//! docs/ARCHITECTURE.md walks a request through these modules.
//!
//! A request flows one way: listener -> connection -> target -> decide (pure) -> deny
//! (audit + answer) or allow (resolve -> check address -> dial that address -> forward or
//! tunnel).
//!
//! - [`config`]: each command's arguments (the [`cli`] types) validated into its
//!   configuration before anything is read or bound; the only reader of [`cli`] below
//!   the binary.
//! - `load`: the one loader of policy files and `--resolve` pins, for `serve`, `check`
//!   and reload.
//! - [`policy`]: the pure policy core, the `egress-policy` crate (`crates/policy/`): raw
//!   file shapes, compiling, host names and patterns, the narrowing relation, the
//!   decision, shared hosting, address classes.
//! - `judgement`: the judgement below every listener, which speaks no protocol: the
//!   question every listener asks (`Ask`), the policies in force, the state the
//!   listeners share, the order of judgement, refusals, and the audit records and counts
//!   of a decision. Where a new listener plugs in.
//! - `workers`: the accept side: worker threads (a runtime each) accepting on the proxy,
//!   transparent and SOCKS5 listeners.
//! - `proxy`: the explicit HTTP proxy: connections, answers, HTTP forwarding, `CONNECT`
//!   tunnels (relayed with splice(2) on Linux, bulk bytes read in batches; copied
//!   elsewhere), interception.
//! - `transparent`: the transparent listener (`--transparent-listen`): redirected
//!   connections judged by their original destination and their first bytes.
//! - `socks`: the SOCKS5 listener (`--socks-listen`): the handshake's pure parsers,
//!   each `CONNECT` asked as a tunnel, as the explicit proxy's is, relayed by its tunnel
//!   code.
//! - `dns`: the DNS listener of confinement (`--dns-listen`): answers from the policy
//!   alone, synthetic addresses for allowed names, `NXDOMAIN` and an audit record for
//!   denied ones.
//! - [`tls`]: interception's TLS: the CA (`ca init`, `serve --ca`), leaf certificates
//!   minted per name, and the verified client side of connections to inspected hosts.
//! - `net`: resolving (pins, a chosen DNS server) and dialing checked addresses only.
//! - `audit`: the audit record and its writer.
//! - `admin`: the control plane on its own listener: the session calls, reload
//!   (`POST /v1/reload`, also SIGHUP and `--watch-policy`), `/metrics`, `/healthz`;
//!   bearer-token auth.
//! - `secrets`: the values of `[[credentials]]`, read at load, set on requests to their
//!   host, never shown.
//! - `session`: sessions and the store interface they live behind (memory, the default,
//!   or Redis shared by replicas): credentials (`Proxy-Authorization: Basic`), idle
//!   expiry, and the signal that closes a session's tunnels when it ends.
//! - `metrics`: the Prometheus metrics, counted on the request path without locks.
//! - `otlp`: the OpenTelemetry export (`--otlp-endpoint`): the audit log's lines as logs,
//!   judged requests as spans, `/metrics` as metrics, over OTLP/HTTP.
//! - [`serve`]: `serve` start-up: loading policies, binding (proxy and admin listeners),
//!   SIGHUP, shutdown and flush.
//! - [`run`]: `run` (a command in a network namespace whose only way out is the proxy:
//!   the jail, its first process, the nftables rulesets) and `rules` (the sidecar's,
//!   printed or applied over netlink).
//! - [`check`]: `check`: deciding targets offline with the proxy's decision code.
//! - [`lint`]: `lint`: rules over policy files -> findings -> text, JSON or SARIF.
//! - [`review`]: `audit summarize`: reading audit logs, statistics, text/JSON/HTML;
//!   `audit suggest` (a request policy from the traffic logged) and `audit replay`
//!   (logged attempts decided again under other policies).
//! - [`diff`]: `diff`: what a policy change opens and closes, by the covering relation,
//!   as text, markdown, JSON or SARIF.
//! - [`watch`]: `watch`: a running proxy's audit records as they are written, read from
//!   its admin API's event stream.
//! - [`probe`]: `probe`: run inside a sandbox, every way out tried (TCP, DNS, DoT, DoH,
//!   QUIC, ICMP, metadata, the proxy, daemon sockets, IPv6) and reported open, closed
//!   or unknown as a table, JSON or SARIF.
//! - [`cli`]: command-line argument types, a leaf: the flags several commands take are
//!   declared once and flattened into each.
//! - `fuzzing` (only with the `fuzzing` feature, and in the library's tests): the entry
//!   points of the fuzz targets in `fuzz/`, and the replay of their corpus.

// No unsafe code, except in `tunnel::splice` (splice(2) and its pipe), `tunnel::batch`
// (a socket option),
// `serve::trim` (malloc_trim(3)),
// `run::mount_attr` (mount_setattr(2)), `run::pty`, `run::jail` and `run::session`
// (terminal ioctls, the steps between fork and exec, close_range(2) of the caller's
// descriptors), and `run::unix` (the seccomp notifications of CMD's `connect`, their
// ioctls, `pidfd_getfd`, `process_vm_readv` and `sock_diag`): those allow it, and say in
// a `SAFETY:` comment on each block why it is sound (Cargo.toml's `[lints]`: unsafe
// code denied elsewhere, every unsafe block documented).

pub(crate) mod admin;
pub(crate) mod audit;
pub mod check;
pub mod cli;
pub mod config;
pub mod diff;
pub(crate) mod dlp;
pub(crate) mod dns;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub(crate) mod judgement;
pub mod lint;
pub(crate) mod load;
pub(crate) mod metrics;
pub(crate) mod net;
pub(crate) mod otlp;
/// The pure policy core, a crate of its own (`crates/policy/`, `egress-policy`) so the
/// compiler keeps it free of I/O: re-exported here under the name every module uses.
pub use egress_policy as policy;
pub mod probe;
pub(crate) mod proxy;
pub mod review;
pub mod run;
pub(crate) mod secrets;
pub mod serve;
pub(crate) mod session;
pub(crate) mod socks;
pub mod tls;
pub(crate) mod transparent;
pub(crate) mod tunnel;
pub mod watch;
pub(crate) mod workers;
