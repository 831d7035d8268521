//! Command-line argument types (clap derive). No logic lives here.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// An egress allowlist proxy: lets through only what the organization allowlist and the
/// narrower request `network_policy` allow, and writes every denied attempt to an audit log.
#[derive(Debug, Parser)]
#[command(name = "egress-proxy", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the forwarding HTTP/CONNECT proxy.
    Serve(Box<ServeArgs>),
    /// Decide targets offline with the proxy's decision code (exit 0 all allowed, 1 any
    /// denied, 2 error).
    Check(CheckArgs),
    /// Lint organization (TOML) and request (JSON) policy files (exit 0 clean, 1
    /// findings at error level, 2 usage or I/O error).
    Lint(LintArgs),
    /// Audit log tools.
    Audit(AuditArgs),
    /// What a policy change opens and closes: every change between two organization
    /// files or two request policies, each marked widening or narrowing (exit 0 nothing
    /// widened, 1 widened, 2 error).
    Diff(DiffArgs),
    /// Run a command in a network whose only way out is the proxy (Linux, root or
    /// CAP_SYS_ADMIN and CAP_NET_ADMIN). Exit: the command's status (128+N for signal N);
    /// 125 run's own error, 126 not executable, 127 not found.
    Run(RunArgs),
    /// Print the nftables ruleset that confines a pod's network namespace to a sidecar
    /// proxy (apply it with `nft -f -` in an init container).
    Rules(RulesArgs),
    /// The interception CA: `ca init DIR` makes one for `serve --ca DIR`.
    Ca(CaArgs),
    /// Internal: the first process in `run`'s jail, started by `run` itself.
    #[command(name = "__jail-init", hide = true)]
    JailInit(JailInitArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The organization policy (TOML): the widest set of destinations anything may reach.
    #[arg(long, value_name = "FILE", default_value = "policies/org.toml")]
    pub org: PathBuf,

    /// A request policy (JSON `network_policy`) applied to every connection of this proxy.
    /// It may only narrow the organization policy: a widening file refuses to start.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// Address to listen on, IP:PORT (IPv6 in brackets: `[::1]:3128`).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:3128")]
    pub listen: SocketAddr,

    /// Where to write the audit log (JSON Lines); `-` for standard output.
    #[arg(long, value_name = "PATH", default_value = "-")]
    pub audit_log: String,

    /// Also write one audit record per allowed connection (with bytes_up/bytes_down).
    #[arg(long)]
    pub audit_allowed: bool,

    /// While audit records cannot be written (a full disk, an I/O error): `closed`
    /// refuses every request with 503 `audit_unavailable` until a write succeeds;
    /// `open` keeps serving and counts the lost records (`egress_audit_lost_total`).
    #[arg(long, value_enum, value_name = "MODE", default_value_t = AuditFailure::Closed)]
    pub audit_failure: AuditFailure,

    /// Pin a name to an address, like curl's --resolve (repeatable): HOST=IP.
    #[arg(long, value_name = "HOST=IP")]
    pub resolve: Vec<String>,

    /// Send DNS queries to this server (IP:PORT) instead of the system's resolvers.
    #[arg(long, value_name = "IP:PORT")]
    pub dns_server: Option<SocketAddr>,

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

    /// Maximum tunnels one session may hold open; beyond it, 429 `limit_exceeded`.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_tunnels_per_session: usize,

    /// Close a tunnel after this many seconds with no bytes in either direction.
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    pub tunnel_idle_timeout: f64,

    /// Seconds to let open connections finish after SIGTERM/SIGINT before closing them.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub shutdown_grace: f64,

    /// Serve the DNS listener of confinement on this address, UDP and TCP, IP:PORT: it
    /// answers from the policy alone (a synthetic address for an allowed name, NXDOMAIN
    /// and an audit record for a denied one) and never queries upstream.
    #[arg(long, value_name = "ADDR")]
    pub dns_listen: Option<SocketAddr>,

    /// Serve the admin API (sessions, reload, metrics, health) on this address, IP:PORT.
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<SocketAddr>,

    /// The admin API's bearer token, read from this file (surrounding whitespace trimmed).
    /// Required when --admin-listen is not a loopback address.
    #[arg(long, value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,

    /// Refuse (407) every proxied request without valid session credentials.
    #[arg(long)]
    pub require_session: bool,

    /// Reload when the --org or --policy file changes (looked at every second, a
    /// Kubernetes ConfigMap's symlink swap included), in addition to SIGHUP.
    #[arg(long)]
    pub watch_policy: bool,

    /// Where sessions live: `memory` (this process) or `redis://HOST:PORT[/DB]`, shared
    /// by every replica using the same Redis (docs/scale-out.md).
    #[arg(long, value_name = "URL", default_value = "memory")]
    pub session_store: String,

    /// The longest any call to the session store may take (connect or answer), in
    /// seconds, at most 10; past it, the store counts as unavailable.
    #[arg(long, value_name = "SECS", default_value_t = 2.0)]
    pub session_store_timeout: f64,

    /// Also accept connections redirected here by nftables (a jail's, or a sidecar
    /// pod's: see `egress-proxy rules`), IP:PORT, judged by their original destination.
    #[arg(long, value_name = "ADDR")]
    pub transparent_listen: Option<SocketAddr>,

    /// The interception CA (DIR/ca.pem and DIR/ca-key.pem, as `ca init` writes them):
    /// tunnels to inspected hosts are terminated with a certificate it signs, and each
    /// request inside is judged. Required when the policy inspects any host.
    #[arg(long, value_name = "DIR")]
    pub ca: Option<PathBuf>,

    /// More root certificates (PEM) to verify inspected hosts' servers against, besides
    /// the system's.
    #[arg(long, value_name = "FILE")]
    pub upstream_ca: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CaArgs {
    #[command(subcommand)]
    pub command: CaCommand,
}

#[derive(Debug, Subcommand)]
pub enum CaCommand {
    /// Make a new CA in DIR: DIR/ca.pem (give it to clients to trust) and DIR/ca-key.pem
    /// (readable by its owner only; never share it). Refuses to overwrite one.
    Init {
        /// The directory to write the CA to (created if missing).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AuditFailure {
    Closed,
    Open,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The organization policy (TOML).
    #[arg(long, value_name = "FILE", default_value = "policies/org.toml")]
    pub org: PathBuf,

    /// The proxy-level request policy (JSON); without it, the organization's
    /// `default_network_policy` applies, as in `serve`.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// Output format.
    #[arg(long, value_enum, default_value_t = CheckFormat::Text)]
    pub format: CheckFormat,

    /// Print each step of the judgement (deny list, allowlist, ports, request policy,
    /// shared hosting, address).
    #[arg(long)]
    pub explain: bool,

    /// Judge each target as a request with this method (entries with `methods` and
    /// `paths` then decide): a URL's path, `/` for `host[:port]`. Without it, a URL is a
    /// `GET` and `host[:port]` a `CONNECT`.
    #[arg(long, value_name = "METHOD")]
    pub method: Option<String>,

    /// Check the name's address too, as if it resolved to IP (repeatable): HOST=IP.
    /// Without it nothing is resolved.
    #[arg(long, value_name = "HOST=IP")]
    pub resolve: Vec<String>,

    /// URLs (`https://host/path`) or `host[:port]` (port 443 when omitted).
    #[arg(required = true, value_name = "TARGET")]
    pub targets: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CheckFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct LintArgs {
    /// The organization policy to check request policies against (it is linted too).
    /// Without it, the one organization file among PATHs is used, if there is one.
    #[arg(long, value_name = "FILE")]
    pub org: Option<PathBuf>,

    /// Output format.
    #[arg(long, value_enum, default_value_t = LintFormat::Text)]
    pub format: LintFormat,

    /// Exit 1 on warnings too.
    #[arg(long)]
    pub deny_warnings: bool,

    /// Policy files, or directories walked for `.toml` (organization) and `.json`
    /// (request) files.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LintFormat {
    Text,
    Json,
    Sarif,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: AuditCommand,
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Summarise audit logs (JSON Lines, plain or gzip) for a security review.
    Summarize(SummarizeArgs),
    /// Print the narrowest request policy that covers the traffic in audit logs;
    /// destinations the organization denies or does not allow go to standard error.
    Suggest(SuggestArgs),
    /// Re-decide logged attempts under other policies, without resolving (exit 0 no
    /// verdict changes, 1 changes, 2 error).
    Replay(ReplayArgs),
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Output format; `markdown` suits a pull-request comment, `sarif` gives one result
    /// per widening change.
    #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
    pub format: DiffFormat,

    /// The policy before the change: an organization file (TOML) or a request policy
    /// (JSON), of the same kind as NEW.
    #[arg(value_name = "OLD")]
    pub old: PathBuf,

    /// The policy after the change.
    #[arg(value_name = "NEW")]
    pub new: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DiffFormat {
    Text,
    Markdown,
    Json,
    Sarif,
}

#[derive(Debug, Args)]
pub struct SuggestArgs {
    /// The organization policy the suggestion must load against.
    #[arg(long, value_name = "FILE", default_value = "policies/org.toml")]
    pub org: PathBuf,

    /// Output format: `json` is the request policy itself; `text` lists each entry with
    /// the names and records it covers.
    #[arg(long, value_enum, default_value_t = SuggestFormat::Json)]
    pub format: SuggestFormat,

    /// Audit log files (gzip is recognised by its magic bytes).
    #[arg(required = true, value_name = "LOG")]
    pub files: Vec<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SuggestFormat {
    Json,
    Text,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The organization policy to decide under.
    #[arg(long, value_name = "FILE", default_value = "policies/org.toml")]
    pub org: PathBuf,

    /// The request policy to decide under; without it, the organization's
    /// `default_network_policy`, as in `serve` and `check`.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// Output format; `json` counts under `would_break` and `would_open`.
    #[arg(long, value_enum, default_value_t = CheckFormat::Text)]
    pub format: CheckFormat,

    /// Audit log files (gzip is recognised by its magic bytes).
    #[arg(required = true, value_name = "LOG")]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SummarizeArgs {
    /// Output format; `html` is one self-contained page with charts.
    #[arg(long, value_enum, default_value_t = SummaryFormat::Text)]
    pub format: SummaryFormat,

    /// Only records at or after this time (RFC 3339, e.g. 2026-11-29T10:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,

    /// Audit log files (gzip is recognised by its magic bytes).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SummaryFormat {
    Text,
    Json,
    Html,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The organization policy (TOML): the widest set of destinations CMD may reach.
    #[arg(long, value_name = "FILE", default_value = "policies/org.toml")]
    pub org: PathBuf,

    /// A request policy (JSON `network_policy`) applied to everything CMD does; it may
    /// only narrow the organization policy.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// Where to write the audit log (JSON Lines); `-` for standard output, which CMD's
    /// own output shares: give a file to keep them apart.
    #[arg(long, value_name = "PATH", default_value = "-")]
    pub audit_log: String,

    /// Also write one audit record per allowed connection.
    #[arg(long)]
    pub audit_allowed: bool,

    /// Pin a name to an address, like curl's --resolve (repeatable): HOST=IP.
    #[arg(long, value_name = "HOST=IP")]
    pub resolve: Vec<String>,

    /// Send the proxy's DNS queries to this server (IP:PORT) instead of the system's.
    #[arg(long, value_name = "IP:PORT")]
    pub dns_server: Option<SocketAddr>,

    /// Run CMD as this user (uid and primary gid; GROUP instead of the primary group)
    /// [default: SUDO_UID/SUDO_GID under sudo, else the caller].
    #[arg(long, value_name = "USER[:GROUP]")]
    pub user: Option<String>,

    /// No namespace: only set CMD's proxy environment. NOT a boundary: CMD can reach the
    /// network directly.
    #[arg(long)]
    pub env_only: bool,

    /// The interception CA (as `ca init` writes it) for inspected hosts; CMD's TLS
    /// clients are pointed at a bundle of the system roots plus it, and its key is hidden
    /// from CMD. Without it, a policy that inspects a host gets a throw-away CA.
    #[arg(long, value_name = "DIR")]
    pub ca: Option<PathBuf>,

    /// More root certificates (PEM) to verify inspected hosts' servers against.
    #[arg(long, value_name = "FILE")]
    pub upstream_ca: Option<PathBuf>,

    /// Let CMD write under PATH too (repeatable); it may always write in the starting
    /// directory, /tmp, /var/tmp and /dev/shm, and sees the rest read-only. `/` gives
    /// back a writable filesystem: the jail is then network-only.
    #[arg(long, value_name = "PATH")]
    pub writable: Vec<PathBuf>,

    /// The command and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct RulesArgs {
    /// The proxy's uid: its own traffic is exempt (it dials upstream).
    #[arg(long, value_name = "UID")]
    pub proxy_uid: u32,

    /// Where redirected TCP connections go (`serve --transparent-listen 127.0.0.1:PORT`).
    #[arg(long, value_name = "PORT", default_value_t = crate::run::rules::TRANSPARENT_PORT,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub transparent_port: u16,

    /// Where DNS queries go, UDP and TCP (`serve --dns-listen 127.0.0.1:PORT`).
    #[arg(long, value_name = "PORT", default_value_t = crate::run::rules::DNS_PORT,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub dns_port: u16,
}

/// `__jail-init`'s arguments, written by `run`.
#[derive(Debug, Args)]
pub struct JailInitArgs {
    /// CMD's uid.
    #[arg(long)]
    pub uid: u32,

    /// CMD's gid (and only group).
    #[arg(long)]
    pub gid: u32,

    /// `run --env-only`: switch to CMD's user and supervise it, nothing else.
    #[arg(long)]
    pub env_only: bool,

    /// A file or directory of the proxy's own to cover in CMD's view (absolute).
    #[arg(long, value_name = "PATH")]
    pub hide: Vec<PathBuf>,

    /// A place CMD may write (absolute, canonical); `/` for everywhere.
    #[arg(long, value_name = "PATH")]
    pub writable: Vec<PathBuf>,

    /// CMD and its arguments.
    #[arg(required = true, last = true)]
    pub command: Vec<OsString>,
}
