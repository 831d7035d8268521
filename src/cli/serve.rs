//! `serve`'s arguments: the shared groups, then the flags only a long-running proxy has.
//! `run` serves with [`Limits::default`] and [`Sessions::default`], the same values as
//! `serve`'s defaults.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::flags::{AuditFlags, DnsFlags, ParentFlags, PolicyFlags, TlsFlags};

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub policy: PolicyFlags,

    /// Reload when the --org or --policy file changes (looked at every second, a
    /// Kubernetes ConfigMap's symlink swap included), in addition to SIGHUP.
    #[arg(long)]
    pub watch_policy: bool,

    #[command(flatten)]
    pub listen: Listen,

    #[command(flatten)]
    pub audit: AuditFlags,

    /// While audit records cannot be written (a full disk, an I/O error): `closed`
    /// refuses every request with 503 `audit_unavailable` until a write succeeds;
    /// `open` keeps serving and counts the lost records (`egress_audit_lost_total`).
    #[arg(long, value_enum, value_name = "MODE", default_value_t = AuditFailure::Closed)]
    pub audit_failure: AuditFailure,

    #[command(flatten)]
    pub dns: DnsFlags,

    #[command(flatten)]
    pub limits: Limits,

    #[command(flatten)]
    pub admin: Admin,

    #[command(flatten)]
    pub sessions: Sessions,

    #[command(flatten)]
    pub tls: TlsFlags,

    #[command(flatten)]
    pub parent: ParentFlags,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AuditFailure {
    Closed,
    Open,
}

/// The proxy's own listeners besides the admin API.
#[derive(Debug, Args)]
pub struct Listen {
    /// Address to listen on, IP:PORT (IPv6 in brackets: `[::1]:3128`).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:3128")]
    pub listen: SocketAddr,

    /// Serve the DNS listener of confinement on this address, UDP and TCP, IP:PORT: it
    /// answers from the policy alone (a synthetic address for an allowed name, NXDOMAIN
    /// and an audit record for a denied one) and never queries upstream.
    #[arg(long, value_name = "ADDR")]
    pub dns_listen: Option<SocketAddr>,

    /// Also accept connections redirected here by nftables (a jail's, or a sidecar
    /// pod's: see `egress-proxy rules`), IP:PORT, judged by their original destination.
    #[arg(long, value_name = "ADDR")]
    pub transparent_listen: Option<SocketAddr>,

    /// Also serve SOCKS5 (CONNECT only, RFC 1928; username/password for sessions,
    /// RFC 1929) on this address, IP:PORT: each request judged as `CONNECT NAME:PORT`.
    #[arg(long, value_name = "ADDR")]
    pub socks_listen: Option<SocketAddr>,
}

/// Timeouts and limits, as given (validated in `config`).
#[derive(Debug, Args)]
pub struct Limits {
    /// Upstream connect timeout, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub connect_timeout: f64,

    /// DNS lookup timeout, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub dns_timeout: f64,

    /// Time a client has to send a complete request head, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub header_timeout: f64,

    /// Maximum concurrent client connections; beyond it a new connection waits up to
    /// --connection-wait, then gets 503 `limit_exceeded`.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub max_connections: usize,

    /// How long a connection over --max-connections waits for a free slot, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub connection_wait: f64,

    /// Worker threads serving proxied connections, each with its own runtime and
    /// upstream pool [default: the number of cores the process may use].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,

    /// Largest request head accepted, in bytes; a larger one gets 431.
    #[arg(long, value_name = "BYTES", default_value_t = 65536)]
    pub max_header_bytes: usize,

    /// Maximum tunnels one client address may hold open; beyond it, 429 `limit_exceeded`.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_tunnels_per_client: usize,

    /// Maximum connections one client address may hold that have not finished their
    /// request head (proxy and transparent listeners) or SOCKS5 handshake; past it a new
    /// one is closed at once (`egress_pending_refused_total`).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_pending_per_client: usize,

    /// Maximum tunnels one session may hold open; beyond it, 429 `limit_exceeded`.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_tunnels_per_session: usize,

    /// Close a tunnel after this many seconds with no bytes in either direction.
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    pub tunnel_idle_timeout: f64,

    /// Move a tunnel's bulk bytes with splice(2) (Linux), never through user space:
    /// about half the proxy's CPU per GiB, but a few percent slower to a client on the
    /// same host (loopback, a jail's veth), whose reads of spliced data cost it more.
    /// Without it they are copied 128 KiB at a time.
    #[arg(long)]
    pub tunnel_splice: bool,

    /// Seconds to let open connections finish after SIGTERM/SIGINT before closing them.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub shutdown_grace: f64,
}

impl Default for Limits {
    /// `serve`'s defaults, for `run` (which has none of these flags). A test in
    /// `config` checks that they are the ones `--help` shows.
    fn default() -> Limits {
        Limits {
            connect_timeout: 10.0,
            dns_timeout: 5.0,
            header_timeout: 10.0,
            max_connections: 4096,
            connection_wait: 1.0,
            workers: None,
            max_header_bytes: 65536,
            max_tunnels_per_client: 256,
            max_pending_per_client: 64,
            max_tunnels_per_session: 256,
            tunnel_idle_timeout: 300.0,
            tunnel_splice: false,
            shutdown_grace: 5.0,
        }
    }
}

/// The admin API.
#[derive(Debug, Args)]
pub struct Admin {
    /// Serve the admin API (sessions, reload, metrics, health, the event stream) on this
    /// address, IP:PORT.
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<SocketAddr>,

    /// The admin API's bearer token, read from this file (surrounding whitespace trimmed).
    /// Required when --admin-listen is not a loopback address.
    #[arg(long, value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,

    /// A name the admin API is called by besides its address (repeatable): a `Host` of
    /// NAME or NAME:PORT, and an `Origin` of http://NAME:PORT, are accepted. Any other
    /// `Host` gets 421 and any other `Origin` 403, so a web page (DNS rebinding included)
    /// cannot use the API.
    #[arg(long, value_name = "NAME")]
    pub admin_host: Vec<String>,

    /// What happens to a request without a session that the organization allows and
    /// the proxy's policy does not: `refuse` it at once, or `ask` a reviewer through the
    /// admin API (GET /v1/approvals) and hold it until decided (docs/reference/approvals.md).
    #[arg(long, value_enum, value_name = "WHAT", default_value = "refuse")]
    pub approval: Approval,

    /// How long `--approval ask` holds a request for a decision, in seconds, at most 300;
    /// then it is refused.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub ask_timeout: u64,
}

/// `--approval`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Approval {
    Refuse,
    Ask,
}

/// Sessions and where they live.
#[derive(Debug, Args)]
pub struct Sessions {
    /// Refuse (407) every proxied request without valid session credentials.
    #[arg(long)]
    pub require_session: bool,

    /// Where sessions live: `memory` (this process) or `redis://HOST:PORT[/DB]`, shared
    /// by every replica using the same Redis (docs/scale-out.md).
    #[arg(long, value_name = "URL", default_value = "memory")]
    pub session_store: String,

    /// The longest any call to the session store may take (connect or answer), in
    /// seconds, at most 10; past it, the store counts as unavailable.
    #[arg(long, value_name = "SECS", default_value_t = 2.0)]
    pub session_store_timeout: f64,
}

impl Default for Sessions {
    /// `serve`'s defaults, for `run`.
    fn default() -> Sessions {
        Sessions {
            require_session: false,
            session_store: "memory".to_string(),
            session_store_timeout: 2.0,
        }
    }
}
