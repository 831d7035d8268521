//! `serve`'s flags as a [`ServeConfig`]; `run` builds its own from the groups it shares
//! with `serve` and `serve`'s defaults for the rest ([`ServeConfig::shared`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{at_least, flag, seconds, ConfigError};
use crate::audit::keys::Signer;
use crate::audit::{Format, OnFailure};
use crate::cli::flags::{AuditFlags, AuditFormat, DnsFlags, ParentFlags, PolicyFlags};
use crate::cli::{self, AuditFailure, ServeArgs};
use crate::dlp::Canary;
use crate::judgement::Limits;
use crate::load;
use crate::net::parent::{NoProxy, Parent};
use crate::otlp::{Endpoint, OtlpConfig};
use crate::session::MAX_ASK_SECS;

/// The admin API's listener and where its token comes from.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    /// `None` only for a loopback listener (anyone on the host may use it: warned).
    pub token_file: Option<PathBuf>,
    /// `--admin-host` names, lower case.
    pub hosts: Vec<String>,
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

/// The longest `--session-store-timeout` (a store outage is answered within 10 s:
/// docs/reference/command-line.md).
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
    pub audit_format: Format,
    /// `--otlp-endpoint` and its flags: the OpenTelemetry export.
    pub(crate) otlp: Option<OtlpConfig>,
    /// `--audit-signing-key`, read at start, and its file (`run` hides it from CMD).
    pub audit_signing_key: Option<Arc<Signer>>,
    pub audit_signing_key_file: Option<PathBuf>,
    pub pins: HashMap<String, Vec<IpAddr>>,
    pub dns_server: Option<SocketAddr>,
    pub dns_timeout: Duration,
    pub limits: Limits,
    pub max_tunnels_per_client: usize,
    /// Worker threads; `None` for one per core the process may use.
    pub workers: Option<usize>,
    pub admin: Option<AdminConfig>,
    /// `--approval ask`: how long a request without a session waits for a reviewer.
    pub approval: Option<Duration>,
    pub require_session: bool,
    /// `--transparent-listen`: where connections redirected by nftables arrive.
    pub transparent_listen: Option<SocketAddr>,
    /// `--socks-listen`: where SOCKS5 clients connect.
    pub socks_listen: Option<SocketAddr>,
    /// `--ca`: the interception CA (a directory, or for `run` one held in memory).
    pub ca: Option<CaSource>,
    /// `--upstream-ca`: more roots for inspected hosts' servers.
    pub upstream_ca: Option<PathBuf>,
    pub session_store: SessionStoreConfig,
    pub session_store_timeout: Duration,
    /// `--watch-policy`: reload when a policy file changes.
    pub watch_policy: bool,
    /// `--upstream-proxy`: the parent proxy allowed connections go through.
    pub parent: Option<Arc<Parent>>,
    /// Canaries besides the organization's, kept across reloads: those `run --canary`
    /// minted for its command (docs/reference/dlp.md).
    pub canaries: Arc<[Canary]>,
}

impl ServeConfig {
    pub fn from_args(args: ServeArgs) -> Result<ServeConfig, ConfigError> {
        let ServeArgs {
            policy,
            watch_policy,
            listen,
            audit,
            audit_failure,
            dns,
            limits,
            admin,
            sessions,
            tls,
            parent,
        } = args;
        let mut config = ServeConfig::shared(listen.listen, policy, audit, dns, &limits)?;
        config.approval = approval_config(&admin)?;
        config.admin = admin_config(admin, sessions.require_session)?;
        config.sessions(&sessions)?;
        config.dns_listen = listen.dns_listen;
        config.transparent_listen = listen.transparent_listen;
        config.socks_listen = listen.socks_listen;
        config.watch_policy = watch_policy;
        config.audit_failure = match audit_failure {
            AuditFailure::Closed => OnFailure::Closed,
            AuditFailure::Open => OnFailure::Open,
        };
        config.ca = tls.ca.map(CaSource::Dir);
        config.upstream_ca = tls.upstream_ca;
        config.parent = parent_config(parent)?;
        Ok(config)
    }

    /// The explicit proxy on `listen`, with the groups `run` shares with `serve` and
    /// `limits`; everything else at `serve`'s default: no other listener, no admin API,
    /// sessions in memory, `--audit-failure closed`, no CA.
    pub(super) fn shared(
        listen: SocketAddr,
        policy: PolicyFlags,
        audit: AuditFlags,
        dns: DnsFlags,
        limits: &cli::Limits,
    ) -> Result<ServeConfig, ConfigError> {
        let limits_config = proxy_limits(limits)?;
        let pins = load::pins(&dns.pins.resolve)?;
        let dns_timeout = seconds("--dns-timeout", limits.dns_timeout)?;
        let max_tunnels_per_client =
            at_least("--max-tunnels-per-client", limits.max_tunnels_per_client, 1)?;
        let otlp = otlp_config(&audit)?;
        let mut config = ServeConfig {
            org: policy.org.path,
            policy: policy.policy,
            listen,
            dns_listen: None,
            audit_log: audit.audit_log,
            audit_allowed: audit.audit_allowed,
            audit_failure: OnFailure::Closed,
            audit_format: match audit.audit_format {
                AuditFormat::Json => Format::Json,
                AuditFormat::Ocsf => Format::Ocsf,
            },
            audit_signing_key: audit
                .audit_signing_key
                .as_deref()
                .map(Signer::load)
                .transpose()
                .map_err(|e| flag("--audit-signing-key", e.to_string()))?
                .map(Arc::new),
            audit_signing_key_file: audit.audit_signing_key,
            otlp,
            pins,
            dns_server: dns.dns_server,
            dns_timeout,
            limits: limits_config,
            max_tunnels_per_client,
            workers: limits.workers.map(usize::from),
            admin: None,
            approval: None,
            require_session: false,
            transparent_listen: None,
            socks_listen: None,
            ca: None,
            upstream_ca: None,
            session_store: SessionStoreConfig::Memory,
            session_store_timeout: Duration::ZERO,
            watch_policy: false,
            parent: None,
            canaries: Arc::from(Vec::new()),
        };
        // `serve`'s session defaults, which `run` keeps and `serve`'s flags replace.
        config.sessions(&cli::Sessions::default())?;
        Ok(config)
    }

    /// The session flags (the admin API's are checked with it).
    fn sessions(&mut self, sessions: &cli::Sessions) -> Result<(), ConfigError> {
        let timeout = seconds("--session-store-timeout", sessions.session_store_timeout)?;
        if timeout > MAX_STORE_TIMEOUT {
            return Err(flag(
                "--session-store-timeout",
                "must be at most 10 seconds",
            ));
        }
        self.session_store_timeout = timeout;
        self.session_store = session_store(&sessions.session_store)?;
        self.require_session = sessions.require_session;
        Ok(())
    }
}

/// The timeouts and limits every connection is held to.
/// `--upstream-proxy` and its companions, parsed, its host resolved.
pub(super) fn parent_config(flags: ParentFlags) -> Result<Option<Arc<Parent>>, ConfigError> {
    let Some(url) = flags.upstream_proxy else {
        return Ok(None);
    };
    let mut no_proxy = Vec::new();
    for pattern in &flags.upstream_no_proxy {
        let parsed = NoProxy::parse(pattern)
            .map_err(|e| flag("--upstream-no-proxy", format!("`{pattern}`: {e}")))?;
        no_proxy.push(parsed);
    }
    let parent = Parent::new(&url, flags.upstream_proxy_by_address, no_proxy)
        .map_err(|e| flag("--upstream-proxy", e.to_string()))?;
    Ok(Some(Arc::new(parent)))
}

fn proxy_limits(args: &cli::Limits) -> Result<Limits, ConfigError> {
    Ok(Limits {
        connect_timeout: seconds("--connect-timeout", args.connect_timeout)?,
        header_timeout: seconds("--header-timeout", args.header_timeout)?,
        max_connections: at_least("--max-connections", args.max_connections, 1)?,
        connection_wait: Duration::try_from_secs_f64(args.connection_wait)
            .map_err(|_| flag("--connection-wait", "must be a number of seconds"))?,
        max_header_bytes: at_least("--max-header-bytes", args.max_header_bytes, 1024)?,
        tunnel_idle_timeout: seconds("--tunnel-idle-timeout", args.tunnel_idle_timeout)?,
        tunnel_splice: args.tunnel_splice,
        max_tunnels_per_session: at_least(
            "--max-tunnels-per-session",
            args.max_tunnels_per_session,
            1,
        )?,
        shutdown_grace: seconds("--shutdown-grace", args.shutdown_grace)?,
        max_pending_per_client: at_least(
            "--max-pending-per-client",
            args.max_pending_per_client,
            1,
        )?,
    })
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

/// `--approval` and `--ask-timeout`: a request can be held only where a reviewer can
/// decide it, on the admin API.
fn approval_config(args: &cli::Admin) -> Result<Option<Duration>, ConfigError> {
    if !(1..=MAX_ASK_SECS).contains(&args.ask_timeout) {
        return Err(flag(
            "--ask-timeout",
            format!("must be a whole number of seconds from 1 to {MAX_ASK_SECS}"),
        ));
    }
    match args.approval {
        cli::Approval::Refuse => Ok(None),
        cli::Approval::Ask if args.admin_listen.is_none() => Err(flag(
            "--approval",
            "ask needs --admin-listen: a reviewer decides through the admin API",
        )),
        cli::Approval::Ask => Ok(Some(Duration::from_secs(args.ask_timeout))),
    }
}

/// The admin flags together: a non-loopback listener needs a token file, and sessions
/// need the admin API.
fn admin_config(
    args: cli::Admin,
    require_session: bool,
) -> Result<Option<AdminConfig>, ConfigError> {
    let Some(listen) = args.admin_listen else {
        if require_session {
            return Err(flag(
                "--require-session",
                "needs --admin-listen: without the admin API there are no sessions",
            ));
        }
        if args.admin_token_file.is_some() {
            return Err(flag("--admin-token-file", "needs --admin-listen"));
        }
        if !args.admin_host.is_empty() {
            return Err(flag("--admin-host", "needs --admin-listen"));
        }
        return Ok(None);
    };
    if args.admin_token_file.is_none() && !listen.ip().is_loopback() {
        return Err(flag(
            "--admin-listen",
            format!("{listen} is not a loopback address: it needs --admin-token-file"),
        ));
    }
    let mut hosts = Vec::new();
    for name in &args.admin_host {
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if !valid {
            return Err(flag(
                "--admin-host",
                format!("`{name}` is not a host name (letters, digits, `-`, `.`, `_`; no port)"),
            ));
        }
        hosts.push(name.to_ascii_lowercase());
    }
    Ok(Some(AdminConfig {
        listen,
        token_file: args.admin_token_file,
        hosts,
    }))
}

/// `--otlp-endpoint URL`, `--otlp-header NAME=VALUE`, `--otlp-interval SECS`; the header
/// and interval flags mean nothing without an endpoint.
fn otlp_config(audit: &AuditFlags) -> Result<Option<OtlpConfig>, ConfigError> {
    let interval = seconds("--otlp-interval", audit.otlp_interval)?;
    let Some(url) = &audit.otlp_endpoint else {
        if !audit.otlp_header.is_empty() {
            return Err(flag("--otlp-header", "needs --otlp-endpoint"));
        }
        return Ok(None);
    };
    let endpoint = Endpoint::parse(url).map_err(|e| flag("--otlp-endpoint", e))?;
    let headers = audit
        .otlp_header
        .iter()
        .map(|h| {
            let (name, value) = h
                .split_once('=')
                .ok_or_else(|| flag("--otlp-header", "give NAME=VALUE"))?;
            let name = hyper::header::HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| flag("--otlp-header", format!("{name:?} is not a header name")))?;
            // The value is a credential: never quoted back.
            let value = hyper::header::HeaderValue::from_str(value).map_err(|_| {
                flag(
                    "--otlp-header",
                    format!("the value of {name} is not a header value"),
                )
            })?;
            Ok((name, value))
        })
        .collect::<Result<_, ConfigError>>()?;
    Ok(Some(OtlpConfig {
        endpoint,
        headers,
        interval,
    }))
}
