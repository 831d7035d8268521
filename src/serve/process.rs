//! What `serve` asks of the process around it: the open-files limit its connections
//! need, its signals (SIGHUP reloads, SIGUSR1 reopens the audit log, SIGTERM and SIGINT
//! shut down; docs/reference/cli.md), and the session store's upkeep tick.

use std::sync::Arc;
use std::time::Duration;

use super::StartError;
use crate::admin::reload::Reloader;
use crate::audit::AuditLog;
use crate::judgement::State;

/// Descriptors the proxy needs at least: two per connection (the client's and the
/// upstream's), plus a margin for the listeners, the audit log, the resolver and the
/// upstream pool. (A spliced tunnel uses four more for its pipes; without them it falls
/// back to copying.)
fn needed_descriptors(max_connections: usize) -> u64 {
    max_connections as u64 * 2 + 64
}

/// Raise the soft open-files limit to the hard limit (the usual soft limit of 1,024 makes
/// accepts fail with `EMFILE` long before `--max-connections`), and warn when even the
/// hard limit is below what `--max-connections` needs.
pub(super) fn raise_open_files_limit(max_connections: usize) {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
            Ok(limits) => limits,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the open-files limit");
                return;
            }
        };
        if soft < hard {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::warn!(soft, hard, error = %e, "cannot raise the open-files limit to the hard limit");
            }
        }
        let needed = needed_descriptors(max_connections);
        if hard < needed {
            tracing::warn!(
                "the open-files hard limit is {hard}, below the {needed} that --max-connections {max_connections} needs (2 per connection plus 64): accepts will fail with EMFILE before the connection limit; raise the hard limit (ulimit -Hn, systemd LimitNOFILE=) or lower --max-connections"
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = max_connections;
}

/// A handler for SIGHUP or SIGUSR1 (whose default actions would end the process).
pub(super) fn signal(name: &'static str) -> Result<tokio::signal::unix::Signal, StartError> {
    use tokio::signal::unix::SignalKind;
    let kind = match name {
        "SIGHUP" => SignalKind::hangup(),
        _ => SignalKind::user_defined1(),
    };
    tokio::signal::unix::signal(kind).map_err(|source| StartError::Signal {
        signal: name,
        source,
    })
}

/// Each SIGUSR1 reopens the audit log file (log rotation).
pub(super) async fn reopen_on_sigusr1(audit: AuditLog, mut usr1: tokio::signal::unix::Signal) {
    while usr1.recv().await.is_some() {
        tracing::info!("SIGUSR1: reopening the audit log");
        audit.reopen();
    }
}

/// Each SIGHUP reloads the policies; a failure is logged and changes nothing.
pub(super) async fn reload_on_sighup(
    reloader: Arc<Reloader>,
    mut hup: tokio::signal::unix::Signal,
) {
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP: reloading the policies");
        let _ = reloader.reload().await;
    }
}

/// The session store's upkeep a few times a second: idle sessions end (their tunnels
/// close); a shared store is told of traffic and watched.
pub(super) async fn expire_sessions(state: Arc<State>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        state.sessions.tick().await;
    }
}

pub(super) async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}
