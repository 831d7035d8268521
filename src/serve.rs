//! `egress-proxy serve`: load and check the policies, bind, run until SIGTERM/SIGINT,
//! then flush the audit log. Every failure before serving is a [`StartError`] (exit 2).

use std::collections::HashMap;
use std::net::IpAddr;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::net::TcpListener;

use crate::admin::{self, reload::Reloader, Admin};
use crate::audit::AuditLog;
use crate::cli::ServeArgs;
use crate::metrics::Metrics;
use crate::net::resolve::{parse_resolve_pin, Resolver};
use crate::policy::{check_narrowing, HostName, OrgPolicy, RequestPolicy};
use crate::proxy::{self, Limits, State};
use crate::session::SessionStore;

/// Why `serve` did not start. Each message names the file or flag at fault.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Policy(#[from] crate::policy::PolicyError),
    #[error("{path} widens the organization policy {org}: {offending}")]
    Widening {
        path: String,
        org: String,
        offending: String,
    },
    #[error("--resolve {value}: {message}")]
    Pin { value: String, message: String },
    #[error("{0}")]
    Flag(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot open the audit log {path}: {source}")]
    Audit {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot set up the resolver: {0}")]
    Resolver(String),
}

fn read(path: &Path) -> Result<String, StartError> {
    std::fs::read_to_string(path).map_err(|source| StartError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Load the organization policy and the proxy-level request policy (`--policy`, or the
/// organization's default), refusing a `--policy` that widens the organization's.
pub fn load_policies(
    org_path: &Path,
    policy_path: Option<&Path>,
) -> Result<(OrgPolicy, RequestPolicy), StartError> {
    let org = OrgPolicy::from_toml(&read(org_path)?, &org_path.display().to_string())?;
    let policy = match policy_path {
        None => org.default_policy().clone(),
        Some(path) => {
            let name = path.display().to_string();
            let policy = RequestPolicy::from_json(&read(path)?, &name)?;
            check_narrowing(&org, &[], &policy).map_err(|w| StartError::Widening {
                path: name,
                org: org_path.display().to_string(),
                offending: w.to_string(),
            })?;
            policy
        }
    };
    Ok((org, policy))
}

fn pins(values: &[String]) -> Result<HashMap<String, Vec<IpAddr>>, StartError> {
    let mut pins: HashMap<String, Vec<IpAddr>> = HashMap::new();
    for value in values {
        let (host, ip) = parse_resolve_pin(value).map_err(|message| StartError::Pin {
            value: value.clone(),
            message,
        })?;
        let name = HostName::parse(&host).map_err(|e| StartError::Pin {
            value: value.clone(),
            message: e.to_string(),
        })?;
        pins.entry(name.as_str().to_string()).or_default().push(ip);
    }
    Ok(pins)
}

fn seconds(flag: &str, secs: f64) -> Result<Duration, StartError> {
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| StartError::Flag(format!("{flag} must be a positive number of seconds")))
}

/// The admin API's bearer token: `None` only for a loopback `--admin-listen` without a
/// token file. A non-loopback listener without one, or an empty token, refuses to start.
fn admin_token(args: &ServeArgs) -> Result<Option<String>, StartError> {
    let Some(addr) = args.admin_listen else {
        if args.require_session {
            return Err(StartError::Flag(
                "--require-session needs --admin-listen: without the admin API there are no sessions".into(),
            ));
        }
        if args.admin_token_file.is_some() {
            return Err(StartError::Flag(
                "--admin-token-file needs --admin-listen".into(),
            ));
        }
        return Ok(None);
    };
    let Some(path) = &args.admin_token_file else {
        if !addr.ip().is_loopback() {
            return Err(StartError::Flag(format!(
                "--admin-listen {addr} is not a loopback address: it needs --admin-token-file"
            )));
        }
        tracing::warn!(%addr, "the admin API has no token: anyone on this host can use it");
        return Ok(None);
    };
    let token = read(path)?.trim().to_string();
    if token.is_empty() {
        return Err(StartError::Flag(format!(
            "--admin-token-file {}: the token is empty",
            path.display()
        )));
    }
    Ok(Some(token))
}

async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    Ok((listener, local))
}

/// Run the proxy until a shutdown signal; every audit record is written before it returns.
pub async fn run(args: ServeArgs) -> Result<(), StartError> {
    let (org, policy) = load_policies(&args.org, args.policy.as_deref())?;
    let token = admin_token(&args)?;
    let limits = Limits {
        connect_timeout: seconds("--connect-timeout", args.connect_timeout)?,
        header_timeout: seconds("--header-timeout", args.header_timeout)?,
        max_connections: args.max_connections.max(1),
        connection_wait: Duration::try_from_secs_f64(args.connection_wait).map_err(|_| {
            StartError::Flag("--connection-wait must be a number of seconds".into())
        })?,
        max_header_bytes: args.max_header_bytes.max(1024),
        tunnel_idle_timeout: seconds("--tunnel-idle-timeout", args.tunnel_idle_timeout)?,
        max_tunnels_per_session: args.max_tunnels_per_session.max(1),
        shutdown_grace: seconds("--shutdown-grace", args.shutdown_grace)?,
    };
    let resolver = Resolver::new(
        pins(&args.resolve)?,
        args.dns_server,
        seconds("--dns-timeout", args.dns_timeout)?,
    )
    .map_err(|e| StartError::Resolver(e.to_string()))?;
    let (listener, local) = bind(args.listen).await?;
    let admin_listener = match args.admin_listen {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let (audit, writer) =
        AuditLog::open(&args.audit_log)
            .await
            .map_err(|source| StartError::Audit {
                path: args.audit_log.clone(),
                source,
            })?;
    let writer = tokio::spawn(writer.run());
    let audit_closer = audit.clone();

    tracing::info!(org = %args.org.display(), mode = ?org.mode(), "policy loaded");
    let proxy_policy = args.policy.is_some().then_some(policy);
    let metrics = Arc::new(Metrics::new());
    let mut listeners = vec![local];
    listeners.extend(admin_listener.as_ref().map(|(_, addr)| *addr));
    let own = crate::net::local::own_addresses(&listeners);
    let state = Arc::new(State {
        policies: RwLock::new(Arc::new(proxy::Policies::new(org, proxy_policy))),
        sessions: Arc::new(SessionStore::new(metrics.clone())),
        metrics,
        sessions_enabled: args.admin_listen.is_some(),
        require_session: args.require_session,
        resolver,
        audit,
        audit_allowed: args.audit_allowed,
        own,
        tunnels: proxy::limits::TunnelCounts::new(args.max_tunnels_per_client.max(1)),
        limits,
        phase: tokio::sync::watch::Sender::new(proxy::Phase::Serving),
    });
    let reloader = Arc::new(Reloader::new(
        args.org.clone(),
        args.policy.clone(),
        state.clone(),
    ));
    // Installed before the `listening` line, so a SIGHUP from then on reloads (the
    // default action of SIGHUP would end the process).
    tokio::spawn(reload_on_sighup(reloader.clone(), hangup_signal()?));
    tokio::spawn(expire_sessions(state.clone()));
    if let Some((admin_listener, admin_addr)) = admin_listener {
        let admin = Arc::new(Admin {
            state: state.clone(),
            token,
            reloader,
        });
        eprintln!("egress-proxy: admin API on {admin_addr}");
        tokio::spawn(admin::serve(admin_listener, admin));
    }
    let workers = args
        .workers
        .map_or_else(proxy::workers::default_workers, usize::from);
    let server = proxy::Server::start(listener, state, workers)
        .map_err(|e| StartError::Flag(format!("cannot start {workers} worker threads: {e}")))?;
    tracing::info!(workers, "worker threads started");
    eprintln!("egress-proxy: listening on {local}");
    server.run(shutdown_signal()).await;
    // Connections and tunnels are gone; what they queued is written before the writer ends.
    audit_closer.close();
    match tokio::time::timeout(Duration::from_secs(10), writer).await {
        Ok(Ok(Ok(lines))) => tracing::info!(lines, "audit log flushed"),
        Ok(Ok(Err(e))) => tracing::error!(error = %e, "audit log write failed"),
        Ok(Err(e)) => tracing::error!(error = %e, "audit writer failed"),
        Err(_) => tracing::error!("audit writer did not finish within 10 s"),
    }
    Ok(())
}

fn hangup_signal() -> Result<tokio::signal::unix::Signal, StartError> {
    use tokio::signal::unix::{signal, SignalKind};
    signal(SignalKind::hangup())
        .map_err(|e| StartError::Flag(format!("cannot install the SIGHUP handler: {e}")))
}

/// Each SIGHUP reloads the policies; a failure is logged and changes nothing.
async fn reload_on_sighup(reloader: Arc<Reloader>, mut hup: tokio::signal::unix::Signal) {
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP: reloading the policies");
        let _ = reloader.reload();
    }
}

/// End idle sessions (their tunnels close) a few times a second.
async fn expire_sessions(state: Arc<State>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        state.sessions.expire_idle();
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}
