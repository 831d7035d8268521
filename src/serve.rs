//! `egress-proxy serve`, from its validated [`ServeConfig`]: load and check the policies,
//! bind, run until SIGTERM/SIGINT, then flush the audit log. Every failure before serving
//! is a [`StartError`] (exit 2).

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::net::{TcpListener, UdpSocket};

use crate::admin::{self, reload::Reloader, Admin};
use crate::audit::{AuditLog, AuditOptions, ExportQueue};
use crate::config::SessionStoreConfig;
use crate::config::{AdminConfig, CaSource, ServeConfig};
use crate::judgement::approvals::Approvals;
use crate::judgement::{budget::Budgets, tunnel_counts::TunnelCounts, Phase, Policies, State};
use crate::load::{self, LoadError};
use crate::metrics::Metrics;
use crate::net::resolve::Resolver;
use crate::net::synthetic::SyntheticNames;
use crate::otlp::Exporter;
use crate::session::{redis_store::RedisStore, Leases, MemoryStore, Store};
use crate::workers::{self, Kind, Server};

mod process;
mod trim;
use process::{
    expire_sessions, raise_open_files_limit, reload_on_sighup, reopen_on_sigusr1, shutdown_signal,
    signal,
};

/// Why `serve` did not start. Each message names the file or flag at fault.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Load(#[from] LoadError),
    #[error("--admin-token-file {0}: the token is empty")]
    EmptyToken(String),
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
    #[error("cannot start {workers} worker threads: {source}")]
    Workers {
        workers: usize,
        source: std::io::Error,
    },
    #[error("cannot start the DNS listener: {0}")]
    Dns(std::io::Error),
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error(
        "the policy inspects {0}, which needs --ca DIR (make one with `egress-proxy ca init DIR`)"
    )]
    NoCa(String),
    #[error("--session-store: {0}")]
    SessionStore(crate::session::StoreError),
    #[error("cannot install the {signal} handler: {source}")]
    Signal {
        signal: &'static str,
        source: std::io::Error,
    },
}

/// `--ca` and `--upstream-ca`, loaded. A policy that inspects a host needs a CA: without
/// one it refuses to start, naming the entries (docs/reference/inspection.md).
fn interception(
    args: &ServeConfig,
    policies: &Policies,
) -> Result<Option<Arc<crate::tls::Interception>>, StartError> {
    let Some(dir) = &args.ca else {
        let inspected = policies.inspected_entries();
        if !inspected.is_empty() {
            return Err(StartError::NoCa(inspected.join(", ")));
        }
        return Ok(None);
    };
    let ca = match dir {
        CaSource::Dir(dir) => Arc::new(crate::tls::ca::Ca::load(dir)?),
        CaSource::Loaded(ca) => ca.clone(),
    };
    let loaded = crate::tls::Interception::new(ca, args.upstream_ca.as_deref())?;
    Ok(Some(Arc::new(loaded)))
}

/// The admin API's bearer token, read from its file; `None` for a loopback listener
/// without one. An empty token refuses to start.
fn admin_token(admin: &AdminConfig) -> Result<Option<String>, StartError> {
    let Some(path) = &admin.token_file else {
        let addr = admin.listen;
        tracing::warn!(%addr, "the admin API has no token: anyone on this host can use it");
        return Ok(None);
    };
    let token = load::read(path)?.trim().to_string();
    if token.is_empty() {
        return Err(StartError::EmptyToken(path.display().to_string()));
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

/// The listeners `serve` takes: bound from the flags by [`run`], or by the caller (`run`
/// binds them inside a network namespace).
pub struct Listeners {
    pub proxy: TcpListener,
    pub admin: Option<TcpListener>,
    /// `--transparent-listen`: connections redirected by nftables.
    pub transparent: Option<TcpListener>,
    /// `--socks-listen`: SOCKS5 clients.
    pub socks: Option<TcpListener>,
    /// The DNS listener: UDP and TCP, normally on one address.
    pub dns: Option<(UdpSocket, TcpListener)>,
}

/// The longest the OpenTelemetry export is waited for at shutdown.
const EXPORT_AT_EXIT: Duration = Duration::from_secs(5);

/// How many times a DNS listener on port 0 tries for a port free for both UDP and TCP.
const DNS_BIND_TRIES: usize = 16;

/// Bind the DNS listener on `addr`, UDP and TCP on the same port (on port 0, one the
/// system picks for UDP that is free for TCP too).
pub async fn bind_dns(addr: SocketAddr) -> Result<(UdpSocket, TcpListener), StartError> {
    let fail = |source| StartError::Bind { addr, source };
    let mut tries = 0;
    loop {
        let udp = UdpSocket::bind(addr).await.map_err(fail)?;
        let port = udp.local_addr().map_err(fail)?.port();
        match TcpListener::bind(SocketAddr::new(addr.ip(), port)).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if addr.port() == 0 && tries + 1 < DNS_BIND_TRIES => {
                tracing::debug!(port, error = %e, "the DNS port is taken for TCP, trying another");
                tries += 1;
            }
            Err(source) => return Err(fail(source)),
        }
    }
}

/// Bind the listeners the flags name.
async fn bind_listeners(config: &ServeConfig) -> Result<Listeners, StartError> {
    let (proxy, _) = bind(config.listen).await?;
    let admin = match &config.admin {
        Some(admin) => Some(bind(admin.listen).await?.0),
        None => None,
    };
    let transparent = match config.transparent_listen {
        Some(addr) => Some(bind(addr).await?.0),
        None => None,
    };
    let socks = match config.socks_listen {
        Some(addr) => Some(bind(addr).await?.0),
        None => None,
    };
    let dns = match config.dns_listen {
        Some(addr) => Some(bind_dns(addr).await?),
        None => None,
    };
    Ok(Listeners {
        proxy,
        admin,
        transparent,
        socks,
        dns,
    })
}

/// `egress-proxy serve`: run the proxy until SIGTERM or SIGINT; every audit record is
/// written before it returns.
pub async fn run(config: ServeConfig) -> Result<(), StartError> {
    serve(config, None, shutdown_signal()).await
}

/// Run the proxy on `listeners` (bound from `config` when `None`) until `shutdown`
/// resolves; every audit record is written before it returns.
pub async fn serve(
    config: ServeConfig,
    listeners: Option<Listeners>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), StartError> {
    serve_with(config, listeners, shutdown, Options::default()).await
}

/// What `run` changes in [`serve`].
#[derive(Debug, Default)]
pub struct Options {
    /// Leave SIGHUP alone (`run` passes it to its command) rather than reload on it.
    pub keep_sighup: bool,
    /// Told once the proxy serves, when the `listening on` line is printed.
    pub ready: Option<tokio::sync::oneshot::Sender<()>>,
}

/// [`serve`] with [`Options`].
pub async fn serve_with(
    config: ServeConfig,
    listeners: Option<Listeners>,
    shutdown: impl std::future::Future<Output = ()>,
    options: Options,
) -> Result<(), StartError> {
    let args = &config;
    raise_open_files_limit(args.limits.max_connections);
    let policies = load::load_strict_with(&args.org, args.policy.as_deref(), &args.canaries)?;
    let interception = interception(args, &policies)?;
    let token = match &args.admin {
        Some(admin) => admin_token(admin)?,
        None => None,
    };
    let resolver = Resolver::new(args.pins.clone(), args.dns_server, args.dns_timeout)
        .map_err(|e| StartError::Resolver(e.to_string()))?;
    let listeners = match listeners {
        Some(bound) => bound,
        None => bind_listeners(args).await?,
    };
    let local_addr = |l: &TcpListener| {
        l.local_addr().map_err(|source| StartError::Bind {
            addr: args.listen,
            source,
        })
    };
    let local = local_addr(&listeners.proxy)?;
    let with_addr =
        |l: Option<TcpListener>| l.map(|l| local_addr(&l).map(|addr| (l, addr))).transpose();
    let admin_listener = with_addr(listeners.admin)?;
    let transparent = with_addr(listeners.transparent)?;
    let socks = with_addr(listeners.socks)?;
    let dns_listener = match listeners.dns {
        Some((udp, tcp)) => {
            let fail = |source| StartError::Bind {
                addr: args.dns_listen.unwrap_or(args.listen),
                source,
            };
            let addrs = [
                udp.local_addr().map_err(fail)?,
                tcp.local_addr().map_err(fail)?,
            ];
            Some((udp, tcp, addrs))
        }
        None => None,
    };
    let listener = listeners.proxy;
    let metrics = Arc::new(Metrics::new());
    // The export queue is the audit writer's to fill, the exporter's to drain.
    let (export, exported) = match &args.otlp {
        Some(_) => {
            let (queue, rx) = ExportQueue::new(metrics.otlp_dropped("logs"));
            (Some(queue), Some(rx))
        }
        None => (None, None),
    };
    let audit_options = AuditOptions {
        on_failure: args.audit_failure,
        format: args.audit_format,
        signer: args.audit_signing_key.clone(),
        export,
    };
    let (audit, writer) = AuditLog::open_with(&args.audit_log, audit_options)
        .await
        .map_err(|source| StartError::Audit {
            path: args.audit_log.clone(),
            source,
        })?;
    // Off the workers and this thread: serialising and sealing lines is the writer's.
    let writer = writer.start().map_err(|source| StartError::Audit {
        path: args.audit_log.clone(),
        source,
    })?;
    let audit_closer = audit.clone();

    tracing::info!(org = %args.org.display(), mode = ?policies.org.mode(), "policy loaded");
    if let Some(parent) = &args.parent {
        // Its name only: the credentials are never logged (docs/reference/parent-proxy.md).
        tracing::info!(
            parent = parent.name(),
            "allowed connections go through the parent proxy"
        );
        if !parent.by_address() {
            // docs/guides/parent-proxy.md: the parent resolves the name again.
            eprintln!("egress-proxy: warning: the parent proxy resolves names itself, so a rebinding DNS answer can take it to an address this proxy would refuse; --upstream-proxy-by-address sends it the checked address instead");
        }
    }
    let exporter = match (&args.otlp, exported) {
        (Some(otlp), Some(rx)) => {
            let (m, a) = (metrics.clone(), audit.clone());
            let text = Box::new(move || m.encode(a.lines_written(), a.lines_lost(), a.failing()));
            let exporter = Exporter::new(otlp.clone(), rx, &metrics, text);
            Some(tokio::spawn(exporter.run()))
        }
        _ => None,
    };
    let mut listeners = vec![local];
    listeners.extend(admin_listener.as_ref().map(|(_, addr)| *addr));
    listeners.extend(transparent.as_ref().map(|(_, addr)| *addr));
    listeners.extend(socks.as_ref().map(|(_, addr)| *addr));
    listeners.extend(dns_listener.iter().flat_map(|(_, _, addrs)| *addrs));
    let own = crate::net::local::own_addresses(&listeners);
    // A shared store shares session budgets too (docs/scale-out.md, "One upload budget").
    let (sessions, leases): (Arc<dyn Store>, Option<Arc<dyn Leases>>) = match &args.session_store {
        SessionStoreConfig::Memory => (Arc::new(MemoryStore::new(metrics.clone())), None),
        SessionStoreConfig::Redis(url) => {
            let store = RedisStore::start(url, args.session_store_timeout, metrics.clone())
                .map_err(StartError::SessionStore)?;
            (store.clone(), Some(store))
        }
    };
    let state = Arc::new(State {
        policies: RwLock::new(Arc::new(policies)),
        sessions,
        metrics,
        // A shared store's sessions are made through another replica's admin API too.
        sessions_enabled: args.admin.is_some() || args.session_store != SessionStoreConfig::Memory,
        require_session: args.require_session,
        resolver,
        audit,
        audit_allowed: args.audit_allowed,
        traced: args.otlp.is_some(),
        own,
        tunnels: TunnelCounts::new(args.max_tunnels_per_client),
        pending: crate::judgement::pending::PendingCounts::new(args.limits.max_pending_per_client),
        limits: args.limits.clone(),
        phase: tokio::sync::watch::Sender::new(Phase::Serving),
        synthetic: Arc::new(SyntheticNames::new()),
        interception,
        budgets: Budgets::new(leases),
        parent: args.parent.clone(),
        approvals: Approvals::new(args.approval),
    });
    let reloader = Arc::new(Reloader::new(
        (args.org.clone(), args.policy.clone()),
        args.canaries.clone(),
        state.clone(),
    ));
    // Installed before the `listening` line, so a SIGHUP from then on reloads (the
    // default action of SIGHUP would end the process).
    if !options.keep_sighup {
        tokio::spawn(reload_on_sighup(reloader.clone(), signal("SIGHUP")?));
    }
    if args.watch_policy {
        let files = std::iter::once(args.org.clone())
            .chain(args.policy.clone())
            .collect();
        tokio::spawn(admin::watch::watch(files, reloader.clone()));
    }
    tokio::spawn(reopen_on_sigusr1(state.audit.clone(), signal("SIGUSR1")?));
    tokio::spawn(expire_sessions(state.clone()));
    tokio::spawn(trim::trim_every(trim::TRIM_EVERY));
    if let Some((admin_listener, admin_addr)) = admin_listener {
        let hosts = args.admin.as_ref().map(|a| a.hosts.clone());
        let admin = Arc::new(Admin {
            state: state.clone(),
            token,
            reloader,
            names: admin::guard::Names {
                listen: admin_addr,
                hosts: hosts.unwrap_or_default(),
            },
        });
        eprintln!("egress-proxy: admin API on {admin_addr}");
        tokio::spawn(admin::serve(admin_listener, admin));
    }
    let dns = match dns_listener {
        Some((udp, tcp, [addr, _])) => {
            let thread = crate::dns::start(udp, tcp, state.clone()).map_err(StartError::Dns)?;
            eprintln!("egress-proxy: DNS listener on {addr}");
            Some(thread)
        }
        None => None,
    };
    let workers = args.workers.unwrap_or_else(workers::default_workers);
    let mut serving = vec![(listener, Kind::Proxy)];
    if let Some((listener, addr)) = transparent {
        eprintln!("egress-proxy: transparent listener on {addr}");
        serving.push((listener, Kind::Transparent));
    }
    if let Some((listener, addr)) = socks {
        eprintln!("egress-proxy: SOCKS5 listener on {addr}");
        serving.push((listener, Kind::Socks5));
    }
    let server = Server::start(serving, state, workers)
        .map_err(|source| StartError::Workers { workers, source })?;
    tracing::info!(workers, "worker threads started");
    eprintln!("egress-proxy: listening on {local}");
    if let Some(ready) = options.ready {
        let _ = ready.send(());
    }
    server.run(shutdown).await;
    if let Some(dns) = dns {
        dns.join().await;
    }
    // Connections and tunnels are gone; what they queued is written before the writer ends.
    audit_closer.close();
    match tokio::time::timeout(Duration::from_secs(10), writer).await {
        Ok(Ok(Ok(lines))) => tracing::info!(lines, "audit log flushed"),
        Ok(Ok(Err(e))) => tracing::error!(error = %e, "audit log write failed"),
        Ok(Err(e)) => tracing::error!(error = %e, "audit writer failed"),
        Err(_) => tracing::error!("audit writer did not finish within 10 s"),
    }
    if let Some(exporter) = exporter {
        // What the writer handed on is sent, within a bound: a collector that is down
        // does not hold the exit up.
        if tokio::time::timeout(EXPORT_AT_EXIT, exporter)
            .await
            .is_err()
        {
            tracing::warn!("the OTLP export did not finish in time; the rest is not sent");
        }
    }
    Ok(())
}
