//! `serve`'s flags, validated once into a [`ServeConfig`] before any file is read or
//! socket bound: a value out of range is an error that names the flag, never clamped.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::audit::OnFailure;
use crate::cli::{AuditFailure, ServeArgs};
use crate::judgement::Limits;
use crate::load::{self, LoadError};

/// Why the flags do not make a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{flag} {message}")]
    Flag { flag: &'static str, message: String },
    #[error("{0}")]
    Pin(#[from] LoadError),
}

fn flag(flag: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Flag {
        flag,
        message: message.into(),
    }
}

/// The admin API's listener and where its token comes from.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    /// `None` only for a loopback listener (anyone on the host may use it: warned).
    pub token_file: Option<PathBuf>,
}

/// Where the interception CA comes from.
#[derive(Clone)]
pub enum CaSource {
    /// `--ca DIR`: `DIR/ca.pem` and `DIR/ca-key.pem`.
    Dir(PathBuf),
    /// `run`'s CA, already read or made: never written where CMD could read the key.
    Loaded(std::sync::Arc<crate::tls::ca::Ca>),
}

impl std::fmt::Debug for CaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaSource::Dir(dir) => f.debug_tuple("Dir").field(dir).finish(),
            CaSource::Loaded(_) => f.write_str("Loaded"),
        }
    }
}

/// Where sessions live (`--session-store`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionStoreConfig {
    Memory,
    /// A `redis://` URL, checked to parse.
    Redis(String),
}

/// The longest `--session-store-timeout` (SPEC: a store outage is answered within 10 s).
const MAX_STORE_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything `serve` runs with, validated.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub org: PathBuf,
    pub policy: Option<PathBuf>,
    pub listen: SocketAddr,
    /// `--dns-listen`: the DNS listener's address (UDP and TCP).
    pub dns_listen: Option<SocketAddr>,
    pub audit_log: String,
    pub audit_allowed: bool,
    pub audit_failure: OnFailure,
    pub pins: HashMap<String, Vec<IpAddr>>,
    pub dns_server: Option<SocketAddr>,
    pub dns_timeout: Duration,
    pub limits: Limits,
    pub max_tunnels_per_client: usize,
    /// Worker threads; `None` for one per core the process may use.
    pub workers: Option<usize>,
    pub admin: Option<AdminConfig>,
    pub require_session: bool,
    /// `--transparent-listen`: where connections redirected by nftables arrive.
    pub transparent_listen: Option<SocketAddr>,
    /// `--ca`: the interception CA (a directory, or for `run` one held in memory).
    pub ca: Option<CaSource>,
    /// `--upstream-ca`: more roots for inspected hosts' servers.
    pub upstream_ca: Option<PathBuf>,
    pub session_store: SessionStoreConfig,
    pub session_store_timeout: Duration,
    /// `--watch-policy`: reload when a policy file changes.
    pub watch_policy: bool,
}

/// A positive, finite number of seconds.
fn seconds(name: &'static str, secs: f64) -> Result<Duration, ConfigError> {
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| flag(name, "must be a positive number of seconds"))
}

/// A count of at least `min`.
fn at_least(name: &'static str, value: usize, min: usize) -> Result<usize, ConfigError> {
    if value < min {
        return Err(flag(name, format!("must be at least {min} (got {value})")));
    }
    Ok(value)
}

impl ServeConfig {
    pub fn from_args(args: ServeArgs) -> Result<ServeConfig, ConfigError> {
        let limits = Limits {
            connect_timeout: seconds("--connect-timeout", args.connect_timeout)?,
            header_timeout: seconds("--header-timeout", args.header_timeout)?,
            max_connections: at_least("--max-connections", args.max_connections, 1)?,
            connection_wait: Duration::try_from_secs_f64(args.connection_wait)
                .map_err(|_| flag("--connection-wait", "must be a number of seconds"))?,
            max_header_bytes: at_least("--max-header-bytes", args.max_header_bytes, 1024)?,
            tunnel_idle_timeout: seconds("--tunnel-idle-timeout", args.tunnel_idle_timeout)?,
            max_tunnels_per_session: at_least(
                "--max-tunnels-per-session",
                args.max_tunnels_per_session,
                1,
            )?,
            shutdown_grace: seconds("--shutdown-grace", args.shutdown_grace)?,
        };
        let admin = admin(&args)?;
        let session_store_timeout = seconds("--session-store-timeout", args.session_store_timeout)?;
        if session_store_timeout > MAX_STORE_TIMEOUT {
            return Err(flag(
                "--session-store-timeout",
                "must be at most 10 seconds",
            ));
        }
        Ok(ServeConfig {
            session_store: session_store(&args.session_store)?,
            watch_policy: args.watch_policy,
            session_store_timeout,
            pins: load::pins(&args.resolve)?,
            dns_timeout: seconds("--dns-timeout", args.dns_timeout)?,
            max_tunnels_per_client: at_least(
                "--max-tunnels-per-client",
                args.max_tunnels_per_client,
                1,
            )?,
            workers: args.workers.map(usize::from),
            limits,
            admin,
            org: args.org,
            policy: args.policy,
            listen: args.listen,
            dns_listen: args.dns_listen,
            audit_log: args.audit_log,
            audit_allowed: args.audit_allowed,
            audit_failure: match args.audit_failure {
                AuditFailure::Closed => OnFailure::Closed,
                AuditFailure::Open => OnFailure::Open,
            },
            dns_server: args.dns_server,
            require_session: args.require_session,
            transparent_listen: args.transparent_listen,
            ca: args.ca.map(CaSource::Dir),
            upstream_ca: args.upstream_ca,
        })
    }
}

/// `memory`, or a `redis://HOST:PORT[/DB]` URL the Redis client accepts.
fn session_store(url: &str) -> Result<SessionStoreConfig, ConfigError> {
    if url == "memory" {
        return Ok(SessionStoreConfig::Memory);
    }
    if !url.starts_with("redis://") {
        return Err(flag(
            "--session-store",
            // The URL is not echoed: it may hold a password.
            "must be `memory` or redis://HOST:PORT[/DB]",
        ));
    }
    redis::Client::open(url)
        .map(|_| SessionStoreConfig::Redis(url.to_string()))
        .map_err(|e| flag("--session-store", format!("is not a Redis URL: {e}")))
}

/// The admin flags together: a non-loopback listener needs a token file, and sessions
/// need the admin API.
fn admin(args: &ServeArgs) -> Result<Option<AdminConfig>, ConfigError> {
    let Some(listen) = args.admin_listen else {
        if args.require_session {
            return Err(flag(
                "--require-session",
                "needs --admin-listen: without the admin API there are no sessions",
            ));
        }
        if args.admin_token_file.is_some() {
            return Err(flag("--admin-token-file", "needs --admin-listen"));
        }
        return Ok(None);
    };
    if args.admin_token_file.is_none() && !listen.ip().is_loopback() {
        return Err(flag(
            "--admin-listen",
            format!("{listen} is not a loopback address: it needs --admin-token-file"),
        ));
    }
    Ok(Some(AdminConfig {
        listen,
        token_file: args.admin_token_file.clone(),
    }))
}
