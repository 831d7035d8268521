//! Sessions (docs/reference/control-plane.md): a `network_policy` bound to random credentials, ending when deleted,
//! revoked by a reload, or idle for its timeout.
//!
//! A proxied request names its session in `Proxy-Authorization: Basic
//! base64(ID:TOKEN)`. Only the SHA-256 of the token is kept (in memory, or in Redis),
//! and it is compared in constant time; the token itself is written nowhere but the
//! `201` that creates the session. Each session owns a `watch` channel that its tunnels
//! listen on, so ending a session closes its open tunnels at once. Its traffic is its
//! requests and the bytes its tunnels relay, either way ([`Session::mark_traffic`]); an
//! open tunnel that relays nothing is not traffic, so it does not keep its session alive
//! (docs/reference/control-plane.md, "Ending").
//!
//! Where sessions live is the [`Store`] interface ([`store`]): [`memory::MemoryStore`]
//! (one process, the default) or [`redis_store::RedisStore`] (shared by every replica,
//! docs/scale-out.md). The request path sees only the interface. A shared store also
//! shares what bounds a session across replicas ([`held::Leases`]): its upload budget,
//! taken in leases by the arithmetic of [`lease`], and its open tunnels.

pub(crate) mod held;
// The model the Lua scripts of `redis_budget` follow; its tests drive it.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod lease;
pub(crate) mod memory;
mod policy;
mod redis_admin;
mod redis_budget;
mod redis_holdings;
mod redis_record;
pub(crate) mod redis_store;
mod redis_sync;
mod redis_tunnels;
pub(crate) mod store;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, SystemTime};

use base64::Engine;
use hyper::header::HeaderValue;
use tokio::sync::watch;

use crate::dlp::Scanner;
use crate::metrics::Metrics;
use crate::policy::OnTrip;
pub(crate) use held::{Held, Leases};
pub(crate) use memory::MemoryStore;
pub(crate) use policy::{SessionPolicy, DEFAULT_ASK_SECS, MAX_ASK_SECS};
pub(crate) use store::{BoxFuture, CreateError, NewSession, Store, StoreError};

/// Default idle timeout, like the hosted containers' 20 minutes.
pub(crate) const DEFAULT_IDLE_SECS: u64 = 1200;
/// The longest idle timeout a session may ask for (a day).
pub(crate) const MAX_IDLE_SECS: u64 = 86_400;

/// Why a session ended (for the log and the metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    Deleted,
    Expired,
    Revoked,
}

/// The SHA-256 of a token: what is kept of it.
pub(crate) type TokenHash = [u8; 32];

/// One session. Shared by the store and by the requests and tunnels running under it.
pub(crate) struct Session {
    pub id: String,
    token_hash: TokenHash,
    /// Its `network_policy`, compiled and as sent; an approved `allow-session` replaces
    /// it with one entry more ([`Session::policy`], [`Session::set_policy`]).
    policy: RwLock<Arc<SessionPolicy>>,
    /// `"on_deny": "ask"`: how long a request this policy refuses, and the organization
    /// allows, waits for a reviewer (docs/reference/approvals.md); `None` refuses at once.
    pub ask: Option<Duration>,
    pub label: Option<String>,
    pub idle_timeout: Duration,
    pub created_at: SystemTime,
    /// Milliseconds since the process's epoch ([`now_ms`]) of the last traffic here.
    last_activity: AtomicU64,
    open_tunnels: AtomicUsize,
    ended: watch::Sender<bool>,
    /// When a shared store last confirmed the session exists ([`now_ms`]).
    verified_at: AtomicU64,
    /// The last traffic a shared store has been told of ([`now_ms`]).
    pushed_at: AtomicU64,
    /// The earliest a shared store's key for the session may expire, as last read
    /// ([`now_ms`]; 0 when not known): a replica holding open tunnels of the session asks
    /// again then, and closes them if the key is gone.
    store_expiry: AtomicU64,
    /// Held while a shared store is asked whether the session still exists, so the
    /// requests that find the copy stale at once ask once, not each.
    verifying: tokio::sync::Mutex<()>,
    /// Its own canaries, ready to look for: built once, when the session is made
    /// (docs/reference/dlp.md). Beside the organization's, never instead.
    pub canaries: Arc<Scanner>,
    /// `"on_canary"`; `None` follows the organization's `on_trip`.
    pub on_canary: Option<OnTrip>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No token hash here: a Debug print must never leak credentials.
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// A session that had its last traffic now.
    fn new(id: String, token_hash: TokenHash, new: NewSession, created_at: SystemTime) -> Session {
        let now = now_ms();
        Session {
            id,
            token_hash,
            policy: RwLock::new(Arc::new(SessionPolicy::new(new.policy, new.policy_json))),
            ask: new.ask,
            label: new.label,
            idle_timeout: new.idle_timeout,
            created_at,
            last_activity: AtomicU64::new(now),
            open_tunnels: AtomicUsize::new(0),
            ended: watch::Sender::new(false),
            verified_at: AtomicU64::new(now),
            pushed_at: AtomicU64::new(now),
            store_expiry: AtomicU64::new(0),
            verifying: tokio::sync::Mutex::new(()),
            canaries: Arc::new(Scanner::compact(&new.canaries)),
            on_canary: new.on_canary,
        }
    }

    /// Resolves once the session has ended (deleted, expired or revoked).
    pub(crate) async fn ended(&self) {
        let mut rx = self.ended.subscribe();
        let _ = rx.wait_for(|ended| *ended).await;
    }

    pub(crate) fn is_ended(&self) -> bool {
        *self.ended.borrow()
    }

    /// Signal the end to the session's tunnels. True the first time.
    fn end(&self) -> bool {
        !self.ended.send_replace(true)
    }

    pub(crate) fn open_tunnels(&self) -> usize {
        self.open_tunnels.load(Ordering::Relaxed)
    }

    fn touch(&self) {
        self.last_activity.store(now_ms(), Ordering::Relaxed);
    }

    /// Bytes one of the session's tunnels relayed: traffic now. Called once per relayed
    /// burst, so it costs a read of the coarse clock ([`now_ms`], no system call) and a
    /// relaxed load; the relaxed store happens only when that clock has moved since the
    /// last mark, so busy tunnels on several threads rarely write the same line.
    #[inline]
    pub(crate) fn mark_traffic(&self) {
        let now = now_ms();
        if self.last_activity.load(Ordering::Relaxed) < now {
            self.last_activity.store(now, Ordering::Relaxed);
        }
    }

    fn token_matches(&self, token: &str) -> bool {
        constant_time_eq(&self.token_hash, &hash_token(token))
    }
}

/// Counts an open tunnel of a session (`--max-tunnels-per-session`, `open_tunnels`)
/// while it lives. Being open is not traffic: only the bytes it relays are.
pub(crate) struct TunnelGuard {
    session: Arc<Session>,
}

impl Drop for TunnelGuard {
    fn drop(&mut self) {
        self.session.open_tunnels.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Count an open tunnel of `session` until the guard drops; its opening (the request
/// that asked for it) is traffic. `None` when the session already holds `max` open
/// tunnels (`--max-tunnels-per-session`).
pub(crate) fn tunnel_opened(session: &Arc<Session>, max: usize) -> Option<TunnelGuard> {
    session
        .open_tunnels
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()?;
    session.touch();
    Some(TunnelGuard {
        session: session.clone(),
    })
}

/// Resolves when `session` ends; never, for a request without one.
pub(crate) async fn until_ended(session: Option<&Session>) {
    match session {
        Some(s) => s.ended().await,
        None => std::future::pending().await,
    }
}

/// What a session's client sees of it: everything but the token.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct View {
    pub id: String,
    pub label: Option<String>,
    pub network_policy: serde_json::Value,
    /// `ask` or `refuse` (docs/reference/approvals.md).
    pub on_deny: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ask_timeout_seconds: Option<u64>,
    pub idle_timeout_seconds: u64,
    pub created_at: String,
    pub last_activity: String,
    pub expires_at: String,
    /// Tunnels open on this proxy (with a shared store, on this replica).
    pub open_tunnels: usize,
    /// Its canaries' ids and kinds, never their values (docs/reference/dlp.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub canaries: Vec<CanaryView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_canary: Option<&'static str>,
}

/// What is shown of a session's canary after the `201`: its id and kind.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct CanaryView {
    pub id: String,
    pub kind: String,
}

/// As `"on_canary"` and `on_trip` spell it.
pub(crate) fn on_trip_str(on_trip: OnTrip) -> &'static str {
    match on_trip {
        OnTrip::EndSession => "end-session",
        OnTrip::Refuse => "refuse",
    }
}

/// Why credentials were not accepted. The text goes to the client and the audit log, so
/// it never carries the credentials themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthError {
    Missing,
    Malformed,
    Unknown,
    /// The shared store did not answer: the credentials could not be checked.
    StoreUnavailable,
}

impl AuthError {
    pub(crate) fn message(self) -> &'static str {
        match self {
            AuthError::Missing => {
                "this proxy needs session credentials (Proxy-Authorization: Basic)"
            }
            AuthError::Malformed => "Proxy-Authorization is not Basic base64(SESSION_ID:TOKEN)",
            AuthError::Unknown => "unknown, expired, deleted or wrong session credentials",
            AuthError::StoreUnavailable => {
                "the session store cannot be reached; session credentials cannot be checked"
            }
        }
    }
}

/// The (ID, TOKEN) a request's `Proxy-Authorization` names, if it carries one.
/// Given the number of `Proxy-Authorization` fields and the first: more than one is
/// malformed.
pub(crate) fn credentials_of(
    count: usize,
    first: Option<&HeaderValue>,
) -> Result<Option<(String, String)>, AuthError> {
    let Some(value) = first else {
        return Ok(None);
    };
    if count > 1 {
        return Err(AuthError::Malformed);
    }
    parse_basic(value.as_bytes())
        .map(Some)
        .ok_or(AuthError::Malformed)
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
    // The decoded text becomes the ID; only the token is copied out of it.
    let mut id = String::from_utf8(decoded).ok()?;
    let colon = id.find(':')?;
    let token = id.split_off(colon + 1);
    id.truncate(colon);
    Some((id, token))
}

/// What is kept of a token. Tokens are 256 random bits, so a plain hash cannot be
/// reversed by guessing; a slow password hash would only cost every request.
pub(crate) fn hash_token(token: &str) -> TokenHash {
    crate::audit::chain::hash(token.as_bytes())
}

/// Equal bytes, in time that depends only on the lengths.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
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
    hex(&buf)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Count a session's end in the metrics.
fn count_end(metrics: &Metrics, why: Ended) {
    let counter = match why {
        Ended::Deleted => &metrics.sessions_deleted,
        Ended::Expired => &metrics.sessions_expired,
        Ended::Revoked => &metrics.sessions_revoked,
    };
    counter.inc();
}

/// The process's clock: its epoch on the monotonic clock ([`monotonic_ms`]) and the
/// wall time it stands for.
fn epoch() -> &'static (u64, SystemTime) {
    static EPOCH: OnceLock<(u64, SystemTime)> = OnceLock::new();
    EPOCH.get_or_init(|| (monotonic_ms(), SystemTime::now()))
}

/// Milliseconds since the process's epoch. Coarse (a few milliseconds, the kernel's
/// timer tick), which is plenty for idle timeouts of a second or more, and cheap enough
/// to read for every relayed burst of a tunnel.
fn now_ms() -> u64 {
    monotonic_ms().saturating_sub(epoch().0)
}

/// `CLOCK_MONOTONIC_COARSE` in milliseconds: the time of the last timer tick, read from
/// memory the kernel shares with the process (vDSO), so never a system call, whatever
/// the machine's clock source.
#[cfg(target_os = "linux")]
fn monotonic_ms() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    // Available since Linux 2.6.32; it fails only for an unknown clock id.
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC_COARSE)
        .expect("CLOCK_MONOTONIC_COARSE is available");
    t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000
}

/// Elsewhere, the standard monotonic clock since the first reading.
#[cfg(not(target_os = "linux"))]
fn monotonic_ms() -> u64 {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// The wall time of `ms` on the process's clock.
fn wall(ms: u64) -> SystemTime {
    epoch().1 + Duration::from_millis(ms)
}
