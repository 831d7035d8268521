//! What every listener shares: the policies in force, the session store, the resolver,
//! the audit log, the limits, and the server's phase.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use super::approvals::Approvals;
use super::budget::Budgets;
use super::policies::Policies;
use super::tunnel_counts::TunnelCounts;
use crate::audit::AuditLog;
use crate::metrics::Metrics;
use crate::net::parent::Parent;
use crate::net::resolve::Resolver;
use crate::net::synthetic::SyntheticNames;
use crate::session::Store;

/// Limits and timeouts of the server, validated from the command line
/// (`crate::config`).
#[derive(Debug, Clone)]
pub struct Limits {
    pub connect_timeout: Duration,
    pub header_timeout: Duration,
    pub max_connections: usize,
    /// How long a connection over `max_connections` waits for a slot before its 503.
    pub connection_wait: Duration,
    pub max_header_bytes: usize,
    pub tunnel_idle_timeout: Duration,
    /// Whether a tunnel's bulk bytes are spliced rather than copied (`--tunnel-splice`).
    pub tunnel_splice: bool,
    /// Open tunnels one session may hold (`--max-tunnels-per-session`).
    pub max_tunnels_per_session: usize,
    /// Connections one client address may hold before its first request head or SOCKS5
    /// handshake is complete (`--max-pending-per-client`).
    pub max_pending_per_client: usize,
    pub shutdown_grace: Duration,
}

/// What every connection shares: the compiled policies, the resolver, the audit log.
pub(crate) struct State {
    /// Read once per request ([`State::policies`]); replaced whole by a reload.
    pub policies: RwLock<Arc<Policies>>,
    /// Where sessions live (`--session-store`); the request path sees only this.
    pub sessions: Arc<dyn Store>,
    pub metrics: Arc<Metrics>,
    /// Sessions exist only with the admin API (`--admin-listen`) or a shared store. Without them,
    /// `Proxy-Authorization` is not judged (and is still stripped before forwarding).
    pub sessions_enabled: bool,
    /// `--require-session`: every proxied request needs session credentials.
    pub require_session: bool,
    pub resolver: Resolver,
    pub audit: AuditLog,
    pub audit_allowed: bool,
    /// `--otlp-endpoint`: requests carry their start and `traceparent` to their record.
    pub traced: bool,
    /// The proxy's own listening addresses, always refused as destinations.
    pub own: Vec<SocketAddr>,
    pub limits: Limits,
    /// Open tunnels per client address (`--max-tunnels-per-client`).
    pub tunnels: Arc<TunnelCounts>,
    /// Unfinished connections per client address (`--max-pending-per-client`).
    pub pending: Arc<super::pending::PendingCounts>,
    /// The server's phase; connections and tunnels subscribe to it.
    pub phase: watch::Sender<Phase>,
    /// The synthetic addresses the DNS listener hands out, which the transparent
    /// listener maps back to names.
    pub synthetic: Arc<SyntheticNames>,
    /// `serve --ca`: the CA's leaves and the upstream TLS client for inspected hosts.
    pub interception: Option<Arc<crate::tls::Interception>>,
    /// What each session (and the proxy) has sent upstream, against its upload budget.
    pub budgets: Budgets,
    /// `serve --upstream-proxy`: the parent proxy allowed connections go through.
    pub parent: Option<Arc<Parent>>,
    /// Requests held for a reviewer (docs/reference/approvals.md).
    pub approvals: Approvals,
}

impl State {
    /// The policies in force now. The lock is held only to clone the `Arc`.
    pub(crate) fn policies(&self) -> Arc<Policies> {
        self.policies
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Put `new` in force for every request judged from now on.
    pub(crate) fn swap_policies(&self, new: Arc<Policies>) {
        *self.policies.write().unwrap_or_else(|p| p.into_inner()) = new;
    }
}

/// Where the server is in its life: connections and tunnels watch this to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Serving,
    /// A shutdown signal came: finish in-flight requests, no more keep-alive.
    Draining,
    /// The grace period is over: tunnels close.
    Closing,
}
