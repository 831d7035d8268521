//! `run`'s, `rules`' and the hidden `__jail-init`'s arguments.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;

use super::flags::{AuditFlags, DnsFlags, ParentFlags, PolicyFlags, TlsFlags};

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub policy: PolicyFlags,

    #[command(flatten)]
    pub audit: AuditFlags,

    #[command(flatten)]
    pub dns: DnsFlags,

    /// Run CMD as this user (uid and primary gid; GROUP instead of the primary group)
    /// [default: SUDO_UID/SUDO_GID under sudo, else the caller].
    #[arg(long, value_name = "USER[:GROUP]")]
    pub user: Option<String>,

    /// No namespace: only set CMD's proxy environment. NOT a boundary: CMD can reach the
    /// network directly.
    #[arg(long)]
    pub env_only: bool,

    /// Diagnosis: the jail's system call filter logs (to the kernel's log) the calls it
    /// would refuse, and lets them run. Everything else of the jail stays.
    #[arg(long, conflicts_with = "env_only")]
    pub seccomp_log: bool,

    #[command(flatten)]
    pub tls: TlsFlags,

    #[command(flatten)]
    pub parent: ParentFlags,

    /// Let CMD write under PATH too (repeatable); it may always write in the starting
    /// directory and in /tmp, /var/tmp and /dev/shm, which are the jail's own (fresh,
    /// empty, gone when run exits), and sees the rest read-only. `/tmp`, `/var/tmp` or
    /// `/dev/shm` binds the host's instead. `/` gives back a writable filesystem: the
    /// jail is then network-only.
    #[arg(long, value_name = "PATH")]
    pub writable: Vec<PathBuf>,

    /// Let CMD connect to this Unix socket outside the jail, or to the sockets in this
    /// directory (repeatable). Every other socket a process outside the jail listens on
    /// is refused (EACCES), wherever it appears in CMD's view.
    #[arg(long, value_name = "PATH")]
    pub allow_unix: Vec<PathBuf>,
    /// Plant a canary in CMD's environment (repeatable): `VAR=KIND` sets CMD's `VAR` to
    /// a fresh value of KIND (generic, aws_access_key_id, aws_secret_access_key,
    /// github_token, openai_api_key). A request, tunnel or DNS query that carries it, in
    /// any encoding, is refused `exfiltration_detected` and recorded, never the value.
    #[arg(long, value_name = "VAR=KIND")]
    pub canary: Vec<String>,

    /// Let CMD write this one file that runs later (repeatable): `.bashrc`, `.envrc`,
    /// `.git/hooks` and the like stay read-only in every writable place otherwise.
    #[arg(long, value_name = "PATH")]
    pub writable_exact: Vec<PathBuf>,

    /// Hide PATH from CMD too (repeatable): an empty read-only file or directory stands
    /// over it. `~/.ssh`, `~/.aws`, `~/.netrc` and the other secret stores are hidden
    /// already.
    #[arg(long, value_name = "PATH")]
    pub hide: Vec<PathBuf>,

    /// Show CMD one of the places hidden by default (repeatable), e.g. `--show ~/.ssh`;
    /// an error for any other PATH.
    #[arg(long, value_name = "PATH")]
    pub show: Vec<PathBuf>,

    /// The command and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `rules --transparent-port`'s default: where the jail's transparent listener is too.
pub const TRANSPARENT_PORT: u16 = 3129;
/// `rules --dns-port`'s default: where the jail's DNS listener is too.
pub const DNS_PORT: u16 = 3053;

#[derive(Debug, Args)]
pub struct RulesArgs {
    /// The proxy's uid: its own traffic is exempt (it dials upstream).
    #[arg(long, value_name = "UID")]
    pub proxy_uid: u32,

    /// Where redirected TCP connections go (`serve --transparent-listen 127.0.0.1:PORT`).
    #[arg(long, value_name = "PORT", default_value_t = TRANSPARENT_PORT,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub transparent_port: u16,

    /// Where DNS queries go, UDP and TCP (`serve --dns-listen 127.0.0.1:PORT`).
    #[arg(long, value_name = "PORT", default_value_t = DNS_PORT,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub dns_port: u16,

    /// Apply the ruleset to this network namespace instead of printing it (Linux; root
    /// or CAP_NET_ADMIN): through netlink, with nothing but this binary (no `nft`). It
    /// replaces the table `egress_proxy` in one transaction, so applying it again gives
    /// the same ruleset; on any error nothing is changed and the exit is 2.
    #[arg(long)]
    pub apply: bool,
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

    /// `run --seccomp-log`: the system call filter logs rather than refuses.
    #[arg(long)]
    pub seccomp_log: bool,

    /// A file or directory to cover in CMD's view with an empty read-only one
    /// (absolute): the proxy's files' directories, secrets, `run --hide`.
    #[arg(long, value_name = "PATH")]
    pub cover: Vec<PathBuf>,

    /// A file or directory to bind read-only on itself in CMD's view (absolute).
    #[arg(long, value_name = "PATH")]
    pub read_only: Vec<PathBuf>,

    /// A temporary place that is the jail's own: a fresh tmpfs (absolute).
    #[arg(long, value_name = "PATH")]
    pub fresh: Vec<PathBuf>,

    /// A place CMD may write (absolute, canonical); `/` for everywhere.
    #[arg(long, value_name = "PATH")]
    pub writable: Vec<PathBuf>,

    /// Descriptor 3 is `run`'s connect supervisor: CMD starts with the connect filter
    /// and sends its listener there.
    #[arg(long)]
    pub supervised: bool,

    /// CMD and its arguments.
    #[arg(required = true, last = true)]
    pub command: Vec<OsString>,
}
