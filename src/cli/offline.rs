//! The offline tools' arguments: `check`, `lint`, `diff` and the `audit` commands.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use super::flags::{OrgFlag, PinFlags, PolicyFlags};

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub policy: PolicyFlags,

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

    // `check` resolves nothing: a name's address is checked only when pinned.
    #[command(flatten)]
    pub pins: PinFlags,

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
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: AuditCommand,
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Summarise audit logs (JSON Lines, plain or gzip) for a security review.
    Summarize(SummarizeArgs),
    /// Print the narrowest request policy that covers the traffic in audit logs (one
    /// that loads against --org); destinations the organization denies or does not
    /// allow go to standard error.
    Suggest(SuggestArgs),
    /// Re-decide logged attempts under other policies, without resolving (exit 0 no
    /// verdict changes, 1 changes, 2 error).
    Replay(ReplayArgs),
    /// Check the chain of `seq` and `prev` across logs given in order, and with
    /// --public-key the checkpoints' signatures; names the first line changed, removed,
    /// inserted, reordered or cut (exit 0 intact, 1 broken, 2 error).
    Verify(VerifyArgs),
    /// Make an Ed25519 key pair for `serve --audit-signing-key`: DIR/audit-signing-key.pem
    /// (readable by its owner only) and DIR/audit-signing-key.pub.pem for `audit verify
    /// --public-key`. Refuses to overwrite either.
    Keygen {
        /// The directory to write the keys to (created if missing).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The public key (PEM) the checkpoints must be signed with (`audit keygen`'s
    /// audit-signing-key.pub.pem).
    #[arg(long, value_name = "FILE")]
    pub public_key: Option<PathBuf>,

    /// Audit log files, oldest first (gzip is recognised by its magic bytes).
    #[arg(required = true, value_name = "LOG")]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SuggestArgs {
    #[command(flatten)]
    pub org: OrgFlag,

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
    #[command(flatten)]
    pub policy: PolicyFlags,

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
