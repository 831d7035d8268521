//! Command-line argument types (clap derive), and nothing else: a leaf that imports
//! nothing of the crate. The flags more than one command takes are declared once, in
//! [`flags`], and flattened into each command; `config` turns each command's arguments
//! into the validated configuration the rest of the crate takes, and no module below
//! `main` sees these types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub mod flags;
mod offline;
mod probe;
mod run;
mod serve;
mod watch;

pub use offline::{
    AuditArgs, AuditCommand, CheckArgs, CheckFormat, DiffArgs, DiffFormat, LintArgs, LintFormat,
    ReplayArgs, SuggestArgs, SuggestFormat, SummarizeArgs, SummaryFormat, VerifyArgs,
};
pub use probe::{ProbeArgs, ProbeFormat};
pub use run::{JailInitArgs, RulesArgs, RunArgs, DNS_PORT, TRANSPARENT_PORT};
pub use serve::{Admin, Approval, AuditFailure, Limits, Listen, ServeArgs, Sessions};
pub use watch::{AdminApi, ApproveArgs, Decision, WatchArgs};

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
    /// Decide targets offline with the proxy's decision code; nothing is resolved but
    /// the names pinned with --resolve (exit 0 all allowed, 1 any denied, 2 error).
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
    Run(Box<RunArgs>),
    /// Print the nftables ruleset that confines a pod's network namespace to a sidecar
    /// proxy, or, with `--apply`, apply it (in an init container: `rules --apply`).
    Rules(RulesArgs),
    /// Print the audit records of a running proxy as they are written, one line each,
    /// from its admin API's event stream (exit 2 when it cannot be read).
    Watch(WatchArgs),
    /// List the requests a running proxy holds for a reviewer, or decide one:
    /// `approve ID allow-once|allow-session|deny` (exit 2 when it cannot be done).
    Approve(ApproveArgs),
    /// Try every way out of the sandbox this runs in, and report each channel open,
    /// closed or unknown (exit 0 all closed or expected, 1 any open or an `--allowed`
    /// URL unreachable, 2 error). No privileges needed.
    Probe(ProbeArgs),
    /// The interception CA: `ca init DIR` makes one for `serve --ca DIR`.
    Ca(CaArgs),
    /// Internal: the first process in `run`'s jail, started by `run` itself.
    #[command(name = "__jail-init", hide = true)]
    JailInit(JailInitArgs),
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
