//! The flag groups more than one command takes, each declared once and flattened into
//! every command it applies to, so a flag has one spelling, default and help text.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

/// The organization policy file alone (`audit suggest` takes no request policy).
#[derive(Debug, Args)]
pub struct OrgFlag {
    /// The organization policy (TOML): the widest set of destinations anything may reach.
    #[arg(id = "org", long = "org", value_name = "FILE", default_value = DEFAULT_ORG)]
    pub path: PathBuf,
}

/// Where the organization policy is read from when `--org` is not given.
pub const DEFAULT_ORG: &str = "policies/org.toml";

/// The two levels of policy: `serve`, `run`, `check` and `audit replay`.
#[derive(Debug, Args)]
pub struct PolicyFlags {
    #[command(flatten)]
    pub org: OrgFlag,

    /// A request policy (JSON `network_policy`), the level below the organization's,
    /// which it may only narrow (a widening file is an error); without it, the
    /// organization's `default_network_policy`.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
}

/// The audit log: `serve` and `run`.
#[derive(Debug, Args)]
pub struct AuditFlags {
    /// Where to write the audit log (JSON Lines); `-` for standard output (under `run`,
    /// shared with CMD's own output: give a file to keep them apart).
    #[arg(long, value_name = "PATH", default_value = "-")]
    pub audit_log: String,

    /// Also write one audit record per allowed connection (with bytes_up/bytes_down).
    #[arg(long)]
    pub audit_allowed: bool,

    /// Sign an `audit.checkpoint` record every 1,000 records, every 60 s and at shutdown
    /// with this Ed25519 private key (PKCS#8 PEM, made by `audit keygen DIR`).
    #[arg(long, value_name = "FILE")]
    pub audit_signing_key: Option<PathBuf>,

    /// Each record as the proxy's own JSON object, or as an OCSF 1.5 event.
    #[arg(long, value_enum, default_value_t = AuditFormat::Json)]
    pub audit_format: AuditFormat,

    /// Export over OTLP/HTTP (protobuf) to this collector: the audit records as logs,
    /// judged requests as spans, the metrics (URL/v1/logs, /v1/traces, /v1/metrics).
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// A header sent with every export, for the collector's auth (repeatable).
    #[arg(long, value_name = "NAME=VALUE")]
    pub otlp_header: Vec<String>,

    /// Seconds between two exports of the metrics.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub otlp_interval: f64,
}

/// `--audit-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AuditFormat {
    Json,
    Ocsf,
}

/// Names pinned to addresses: `serve`, `run` and `check` (which resolves nothing else).
#[derive(Debug, Args)]
pub struct PinFlags {
    /// Pin a name to an address, like curl's --resolve (repeatable): HOST=IP.
    #[arg(long, value_name = "HOST=IP")]
    pub resolve: Vec<String>,
}

/// How the proxy resolves the names it allows: `serve` and `run`.
#[derive(Debug, Args)]
pub struct DnsFlags {
    #[command(flatten)]
    pub pins: PinFlags,

    /// Send the proxy's DNS queries to this server (IP:PORT) instead of the system's
    /// resolvers.
    #[arg(long, value_name = "IP:PORT")]
    pub dns_server: Option<SocketAddr>,
}

/// A parent proxy every allowed connection goes through: `serve` and `run`.
#[derive(Debug, Args)]
pub struct ParentFlags {
    /// Send every allowed connection through this parent HTTP proxy,
    /// `http://[USER:PASS@]HOST:PORT` (user and password percent-encoded): tunnels and
    /// inspected requests as `CONNECT HOST:PORT`, plain HTTP in absolute form. Decided
    /// and address-checked first, as always; the credentials are never logged.
    #[arg(long, value_name = "URL")]
    pub upstream_proxy: Option<String>,

    /// Ask the parent for the checked address (`CONNECT 203.0.113.5:443`) instead of
    /// the name, for a parent that could resolve the name differently.
    #[arg(long, requires = "upstream_proxy")]
    pub upstream_proxy_by_address: bool,

    /// Dial these destinations directly, not through the parent (repeatable): a
    /// destination pattern (`*.corp.example`, `db.corp.example:5432`; any port when it
    /// names none) or an address block (`10.0.0.0/8`).
    #[arg(long, value_name = "PATTERN", requires = "upstream_proxy")]
    pub upstream_no_proxy: Vec<String>,
}

/// Interception's certificates: `serve` and `run`.
#[derive(Debug, Args)]
pub struct TlsFlags {
    /// The interception CA (DIR/ca.pem and DIR/ca-key.pem, as `ca init` writes them):
    /// tunnels to inspected hosts are terminated with a certificate it signs, and each
    /// request inside is judged. `serve` needs it when the policy inspects any host;
    /// without it `run` makes a throw-away one. Under `run`, CMD's TLS clients trust a
    /// bundle of the system roots plus it, and its key is hidden from CMD.
    #[arg(long, value_name = "DIR")]
    pub ca: Option<PathBuf>,

    /// More root certificates (PEM) to verify inspected hosts' servers against, besides
    /// the system's.
    #[arg(long, value_name = "FILE")]
    pub upstream_ca: Option<PathBuf>,
}
