//! `egress-proxy serve`: load and check the policies, bind, run until SIGTERM/SIGINT,
//! then flush the audit log. Every failure before serving is a [`StartError`] (exit 2).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::audit::AuditLog;
use crate::cli::ServeArgs;
use crate::net::resolve::{parse_resolve_pin, Resolver};
use crate::policy::{check_narrowing, HostName, OrgPolicy, RequestPolicy};
use crate::proxy::{self, forward::Upstream, Limits, State};

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
        None => org.default_policy.clone(),
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

/// Run the proxy until a shutdown signal; every audit record is written before it returns.
pub async fn run(args: ServeArgs) -> Result<(), StartError> {
    let (org, policy) = load_policies(&args.org, args.policy.as_deref())?;
    let limits = Limits {
        connect_timeout: seconds("--connect-timeout", args.connect_timeout)?,
        header_timeout: seconds("--header-timeout", args.header_timeout)?,
        max_connections: args.max_connections.max(1),
        connection_wait: Duration::try_from_secs_f64(args.connection_wait).map_err(|_| {
            StartError::Flag("--connection-wait must be a number of seconds".into())
        })?,
        max_header_bytes: args.max_header_bytes.max(1024),
        tunnel_idle_timeout: seconds("--tunnel-idle-timeout", args.tunnel_idle_timeout)?,
        shutdown_grace: seconds("--shutdown-grace", args.shutdown_grace)?,
    };
    let resolver = Resolver::new(
        pins(&args.resolve)?,
        args.dns_server,
        seconds("--dns-timeout", args.dns_timeout)?,
    )
    .map_err(|e| StartError::Resolver(e.to_string()))?;
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: args.listen,
            source,
        })?;
    let local = listener.local_addr().map_err(|source| StartError::Bind {
        addr: args.listen,
        source,
    })?;
    let (audit, writer) =
        AuditLog::open(&args.audit_log)
            .await
            .map_err(|source| StartError::Audit {
                path: args.audit_log.clone(),
                source,
            })?;
    let writer = tokio::spawn(writer.run());
    let audit_closer = audit.clone();

    tracing::info!(org = %args.org.display(), mode = ?org.mode, "policy loaded");
    eprintln!("egress-proxy: listening on {local}");
    let state = Arc::new(State {
        org,
        policy,
        resolver,
        audit,
        audit_allowed: args.audit_allowed,
        own: vec![local],
        upstream: Upstream::new(limits.connect_timeout),
        tunnels: proxy::limits::TunnelCounts::new(args.max_tunnels_per_client.max(1)),
        limits,
        phase: tokio::sync::watch::Sender::new(proxy::Phase::Serving),
    });
    proxy::serve(listener, state, shutdown_signal()).await;
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

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}
