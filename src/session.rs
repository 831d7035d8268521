//! Sessions (docs/reference/control-plane.md): a `network_policy` bound to random credentials, ending when deleted,
//! revoked by a reload, or idle for its timeout.
//!
//! A proxied request names its session in `Proxy-Authorization: Basic
//! base64(ID:TOKEN)`. The token is compared in constant time and never written anywhere
//! but the `201` that creates the session. Each session owns a `watch` channel that its
//! tunnels listen on, so ending a session closes its open tunnels at once. An open tunnel
//! counts as traffic: a session with open tunnels does not expire.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use hyper::header::{HeaderMap, PROXY_AUTHORIZATION};
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::policy::RequestPolicy;

/// Default idle timeout, like the hosted containers' 20 minutes.
pub const DEFAULT_IDLE_SECS: u64 = 1200;
/// The longest idle timeout a session may ask for (a day).
pub const MAX_IDLE_SECS: u64 = 86_400;

/// Why a session ended (for the log and the metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Deleted,
    Expired,
    Revoked,
}

/// One session. Shared by the store and by the requests and tunnels running under it.
pub struct Session {
    pub id: String,
    token: String,
    pub policy: RequestPolicy,
    /// The `network_policy` as the client sent it, shown back by `GET`.
    pub policy_json: serde_json::Value,
    pub label: Option<String>,
    pub idle_timeout: Duration,
    pub created_at: SystemTime,
    /// Milliseconds since the store's epoch of the last traffic.
    last_activity: AtomicU64,
    open_tunnels: AtomicUsize,
    ended: watch::Sender<bool>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No token here: a Debug print must never leak it.
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Resolves once the session has ended (deleted, expired or revoked).
    pub async fn ended(&self) {
        let mut rx = self.ended.subscribe();
        let _ = rx.wait_for(|ended| *ended).await;
    }

    #[cfg(test)]
    pub fn is_ended(&self) -> bool {
        *self.ended.borrow()
    }

    pub fn open_tunnels(&self) -> usize {
        self.open_tunnels.load(Ordering::Relaxed)
    }
}

/// Counts an open tunnel as traffic while it lives; the tunnel's end is traffic too.
pub struct TunnelGuard {
    session: Arc<Session>,
    store: Arc<SessionStore>,
}

impl Drop for TunnelGuard {
    fn drop(&mut self) {
        self.session.open_tunnels.fetch_sub(1, Ordering::Relaxed);
        self.store.touch(&self.session);
    }
}

/// Resolves when `session` ends; never, for a request without one.
pub async fn until_ended(session: Option<&Session>) {
    match session {
        Some(s) => s.ended().await,
        None => std::future::pending().await,
    }
}

/// What a session's client sees of it: everything but the token.
#[derive(Debug, Clone, serde::Serialize)]
pub struct View {
    pub id: String,
    pub label: Option<String>,
    pub network_policy: serde_json::Value,
    pub idle_timeout_seconds: u64,
    pub created_at: String,
    pub last_activity: String,
    pub expires_at: String,
    pub open_tunnels: usize,
}

/// Why credentials were not accepted. The text goes to the client and the audit log, so
/// it never carries the credentials themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    Missing,
    Malformed,
    Unknown,
}

impl AuthError {
    pub fn message(self) -> &'static str {
        match self {
            AuthError::Missing => {
                "this proxy needs session credentials (Proxy-Authorization: Basic)"
            }
            AuthError::Malformed => "Proxy-Authorization is not Basic base64(SESSION_ID:TOKEN)",
            AuthError::Unknown => "unknown, expired, deleted or wrong session credentials",
        }
    }
}

/// Every live session.
pub struct SessionStore {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    epoch: Instant,
    epoch_wall: SystemTime,
    metrics: Arc<Metrics>,
}

impl SessionStore {
    pub fn new(metrics: Arc<Metrics>) -> SessionStore {
        SessionStore {
            sessions: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
            epoch_wall: SystemTime::now(),
            metrics,
        }
    }

    /// The store's lock. Held by a reload while it revokes and swaps policies, so a
    /// session is never created against a policy that is being replaced.
    pub fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn touch(&self, s: &Session) {
        s.last_activity.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Build a session with fresh credentials. Returns it and its token; insert it with
    /// [`insert`](Self::insert) once its policy has been checked.
    pub fn create(
        &self,
        policy: RequestPolicy,
        policy_json: serde_json::Value,
        label: Option<String>,
        idle_timeout: Duration,
    ) -> (Arc<Session>, String) {
        let token = random_hex(32);
        let session = Arc::new(Session {
            id: random_hex(16),
            token: token.clone(),
            policy,
            policy_json,
            label,
            idle_timeout,
            created_at: SystemTime::now(),
            last_activity: AtomicU64::new(self.now_ms()),
            open_tunnels: AtomicUsize::new(0),
            ended: watch::Sender::new(false),
        });
        (session, token)
    }

    /// Add a session to `map` (the store's locked map).
    pub fn insert(&self, map: &mut HashMap<String, Arc<Session>>, session: Arc<Session>) {
        map.insert(session.id.clone(), session);
        self.metrics.sessions_created.inc();
        self.metrics.sessions_active.set(map.len() as i64);
    }

    /// Remove and end a session held in `map`; `None` when it is not there.
    pub fn end_locked(
        &self,
        map: &mut HashMap<String, Arc<Session>>,
        id: &str,
        why: Ended,
    ) -> Option<Arc<Session>> {
        let session = map.remove(id)?;
        session.ended.send_replace(true);
        let counter = match why {
            Ended::Deleted => &self.metrics.sessions_deleted,
            Ended::Expired => &self.metrics.sessions_expired,
            Ended::Revoked => &self.metrics.sessions_revoked,
        };
        counter.inc();
        self.metrics.sessions_active.set(map.len() as i64);
        tracing::info!(session = %session.id, reason = ?why, "session ended");
        Some(session)
    }

    /// End a session now (DELETE): its tunnels close.
    pub fn end(&self, id: &str, why: Ended) -> Option<Arc<Session>> {
        self.end_locked(&mut self.lock(), id, why)
    }

    fn expired(&self, s: &Session, now_ms: u64) -> bool {
        s.open_tunnels.load(Ordering::Relaxed) == 0
            && now_ms.saturating_sub(s.last_activity.load(Ordering::Relaxed))
                >= s.idle_timeout.as_millis() as u64
    }

    /// End every session idle for its timeout. Called periodically.
    pub fn expire_idle(&self) {
        let now = self.now_ms();
        let mut map = self.lock();
        let idle: Vec<String> = map
            .values()
            .filter(|s| self.expired(s, now))
            .map(|s| s.id.clone())
            .collect();
        for id in idle {
            self.end_locked(&mut map, &id, Ended::Expired);
        }
    }

    /// The live session `id` (expiring it first if its time is up).
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        let mut map = self.lock();
        let session = map.get(id)?.clone();
        if self.expired(&session, self.now_ms()) {
            self.end_locked(&mut map, id, Ended::Expired);
            return None;
        }
        Some(session)
    }

    /// Every live session, oldest first.
    pub fn list(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<Arc<Session>> = self.lock().values().cloned().collect();
        all.sort_by_key(|s| s.created_at);
        all
    }

    /// The session named by a request's `Proxy-Authorization`, if it carries one: that
    /// request is traffic for it. Errors never say which part was wrong.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Option<Arc<Session>>, AuthError> {
        let mut values = headers.get_all(PROXY_AUTHORIZATION).iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(AuthError::Malformed);
        }
        let (id, token) = parse_basic(value.as_bytes()).ok_or(AuthError::Malformed)?;
        let session = self.get(&id).ok_or(AuthError::Unknown)?;
        if !constant_time_eq(session.token.as_bytes(), token.as_bytes()) {
            return Err(AuthError::Unknown);
        }
        self.touch(&session);
        Ok(Some(session))
    }

    /// Mark an open tunnel of `session`: traffic until the guard drops. `None` when the
    /// session already holds `max` open tunnels (`--max-tunnels-per-session`).
    pub fn tunnel_opened(
        self: &Arc<Self>,
        session: &Arc<Session>,
        max: usize,
    ) -> Option<TunnelGuard> {
        session
            .open_tunnels
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        self.touch(session);
        Some(TunnelGuard {
            session: session.clone(),
            store: self.clone(),
        })
    }

    /// What `GET /v1/sessions/{id}` shows.
    pub fn view(&self, s: &Session) -> View {
        let now = self.now_ms();
        let last = s.last_activity.load(Ordering::Relaxed);
        let last_wall = self.epoch_wall + Duration::from_millis(last);
        // An open tunnel is traffic now, so the session's end moves with the clock.
        let active = if s.open_tunnels() > 0 {
            self.epoch_wall + Duration::from_millis(now)
        } else {
            last_wall
        };
        View {
            id: s.id.clone(),
            label: s.label.clone(),
            network_policy: s.policy_json.clone(),
            idle_timeout_seconds: s.idle_timeout.as_secs(),
            created_at: crate::audit::rfc3339(s.created_at),
            last_activity: crate::audit::rfc3339(last_wall),
            expires_at: crate::audit::rfc3339(active + s.idle_timeout),
            open_tunnels: s.open_tunnels(),
        }
    }
}

/// `Basic base64(ID:TOKEN)` -> (ID, TOKEN).
fn parse_basic(value: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (id, token) = decoded.split_once(':')?;
    Some((id.to_string(), token.to_string()))
}

/// Equal bytes, in time that depends only on the lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// `bytes` random bytes from the OS as hex. A session without OS randomness would have
/// guessable credentials, so failing here is fatal.
fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("the OS random source is unavailable");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
