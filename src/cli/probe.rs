//! `probe`'s arguments (docs/reference/command-line.md, "probe").

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Output format: one line per check, a JSON document, or SARIF (one `error` result
    /// per open check).
    #[arg(long, value_enum, default_value_t = ProbeFormat::Table)]
    pub format: ProbeFormat,

    /// Check ids that may be open (one a line, `#` comments): they do not make exit 1.
    #[arg(long, value_name = "FILE")]
    pub expect: Option<PathBuf>,

    /// How long each check may take, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub timeout_ms: u64,

    /// The IPv4 address the direct checks try.
    #[arg(long, value_name = "IP", default_value = "1.1.1.1")]
    pub target_v4: Ipv4Addr,

    /// The IPv6 address the direct checks try.
    #[arg(long, value_name = "IP", default_value = "2606:4700:4700::1111")]
    pub target_v6: Ipv6Addr,

    /// A URL the sandbox must reach (`proxy-allows`; unreachable makes exit 1).
    #[arg(long, value_name = "URL")]
    pub allowed: Vec<String>,

    /// A URL the proxy must refuse (`proxy-enforces`; default
    /// `http://egress-probe.invalid/`).
    #[arg(long, value_name = "URL")]
    pub denied: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProbeFormat {
    Table,
    Json,
    Sarif,
}
