//! `watch`'s arguments: the admin API to read `GET /v1/events` from, its token, the
//! filters and the output; and `approve`'s: the approval and the decision.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Which running proxy's admin API, and its token: `watch`'s and `approve`'s.
#[derive(Debug, Args)]
pub struct AdminApi {
    /// The admin API's URL, `http://HOST:PORT` (the address `serve --admin-listen` was
    /// given).
    #[arg(long, value_name = "URL")]
    pub admin: String,

    /// The admin API's bearer token, read from this file (surrounding whitespace
    /// trimmed), as `serve --admin-token-file` takes it. Without it, the token in the
    /// environment variable EGRESS_PROXY_ADMIN_TOKEN, if set.
    #[arg(long, value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub api: AdminApi,

    /// Only the records of this session.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,

    /// Only the records of this event (`egress.denied`, `egress.allowed`,
    /// `egress.would_deny`, `session.revoked`, `approval.allowed`, ...).
    #[arg(long, value_name = "EVENT")]
    pub event: Option<String>,

    /// Print each record's JSON line as it comes, instead of one line of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    #[command(flatten)]
    pub api: AdminApi,

    /// The approval to decide (its `id` in `GET /v1/approvals`). Without it and the
    /// decision, the pending approvals are listed.
    #[arg(value_name = "ID", requires = "decision")]
    pub id: Option<String>,

    /// What to do with the held requests.
    #[arg(value_enum, value_name = "DECISION")]
    pub decision: Option<Decision>,
}

/// `approve`'s decision, spelled as `POST /v1/approvals/{id}` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Decision {
    /// Let the held requests through, this once.
    AllowOnce,
    /// Add the exact host and port to the session's policy, and let them through.
    AllowSession,
    /// Refuse them (403 not_in_request_policy).
    Deny,
}
