//! `watch`'s arguments: the admin API to read `GET /v1/events` from, its token, the
//! filters and the output.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The admin API's URL, `http://HOST:PORT` (the address `serve --admin-listen` was
    /// given).
    #[arg(long, value_name = "URL")]
    pub admin: String,

    /// The admin API's bearer token, read from this file (surrounding whitespace
    /// trimmed), as `serve --admin-token-file` takes it. Without it, the token in the
    /// environment variable EGRESS_PROXY_ADMIN_TOKEN, if set.
    #[arg(long, value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,

    /// Only the records of this session.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,

    /// Only the records of this event (`egress.denied`, `egress.allowed`,
    /// `egress.would_deny`, `session.revoked`).
    #[arg(long, value_name = "EVENT")]
    pub event: Option<String>,

    /// Print each record's JSON line as it comes, instead of one line of text.
    #[arg(long)]
    pub json: bool,
}
