//! The Redis store (`--session-store redis://HOST:PORT[/DB]`): sessions shared by every
//! replica (docs/scale-out.md).
//!
//! Redis is the truth; each replica keeps the sessions it has verified in a local map,
//! trusted for at most [`VERIFY_EVERY`] before Redis is asked again, and dropped at once
//! when a delete or revocation is published. Traffic (requests, and bytes relayed by
//! tunnels) is noted locally and pushed to the key's TTL by the upkeep
//! ([`super::redis_sync`]), at most once per [`refresh_interval`] per session, so a
//! request or a relayed byte costs no Redis command in the steady state. An open tunnel
//! is no traffic: a replica holding one watches the key, and when Redis has expired it
//! (idle on every replica) ends the session here, closing the tunnel. Every call has a timeout (`--session-store-timeout`); a call that fails or
//! times out marks the store unavailable, and until a call succeeds again every request
//! with credentials is refused (`session_store_unavailable`), cached or not.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, FromRedisValue, RedisResult};
use tokio::sync::Notify;

use super::redis_record::{self as record, key, plausible_id, refresh_policy, CHANNEL};
use super::store::{Admit, Revoked};
use super::{
    count_end, hash_token, memory::view, now_ms, random_hex, AuthError, BoxFuture, CreateError,
    Ended, NewSession, Session, SessionPolicy, Store, StoreError, View,
};
use crate::metrics::Metrics;
use crate::policy::RequestPolicy;

/// How long a verified session is trusted without asking Redis. A delete on another
/// replica reaches this one through pub/sub at once; this bounds it when a message was
/// lost (docs/scale-out.md: at most 2 s).
pub(crate) const VERIFY_EVERY: Duration = Duration::from_secs(1);
/// The longest a replica waits before telling Redis of a session's traffic.
pub(crate) const MAX_REFRESH: Duration = Duration::from_secs(5);
/// A local copy unused for this long is dropped (Redis still holds the session).
pub(super) const EVICT_AFTER: Duration = Duration::from_secs(30);

/// How often traffic on one replica moves a session's TTL: a quarter of its idle
/// timeout, at most [`MAX_REFRESH`]. A session can expire this much (plus one upkeep
/// tick) before its last traffic plus its idle timeout: never later.
pub(crate) fn refresh_interval(idle: Duration) -> Duration {
    (idle / 4).min(MAX_REFRESH)
}

/// Whether a held copy may be used without asking Redis: verified less than
/// [`VERIFY_EVERY`] ago, and not idle past its timeout here (then Redis may have
/// expired it; open tunnels that relay nothing do not count).
fn trusted(s: &Session) -> bool {
    let now = now_ms();
    let fresh =
        now.saturating_sub(s.verified_at.load(Ordering::Acquire)) < VERIFY_EVERY.as_millis() as u64;
    let idle = now.saturating_sub(s.last_activity.load(Ordering::Relaxed))
        >= s.idle_timeout.as_millis() as u64;
    fresh && !idle
}

/// Sessions in Redis, with this replica's verified copies.
pub(crate) struct RedisStore {
    pub(super) conn: ConnectionManager,
    pub(super) client: Client,
    pub(super) timeout: Duration,
    pub(super) local: Mutex<HashMap<String, Arc<Session>>>,
    up: AtomicBool,
    /// Set when messages may have been missed: the held sessions are checked again.
    pub(super) recheck: AtomicBool,
    /// Told when the store comes back, so the subscription is made again.
    pub(super) resubscribe: Notify,
    pub(super) last_ping: AtomicU64,
    pub(super) metrics: Arc<Metrics>,
    /// This process's name in the budget keys (`super::redis_budget`): random, so a
    /// restarted replica never takes over a dead one's reserves.
    pub(super) replica: String,
    /// What this replica holds of each session's upload budget.
    pub(super) holdings: super::redis_holdings::Holdings,
    /// When this replica last set its tunnel counts, and the sessions it set.
    pub(super) tunnels_refreshed: AtomicU64,
    pub(super) tunnels_counted: Mutex<std::collections::HashSet<String>>,
}

impl RedisStore {
    /// Connect lazily to `url` (the first call connects; a store that is down at start
    /// is an outage like any other). `RedisStore::start` (`super::redis_sync`) also
    /// starts listening for ended sessions.
    pub(super) fn connect(
        url: &str,
        timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<RedisStore>, StoreError> {
        let client = Client::open(url).map_err(|e| StoreError(e.to_string()))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| StoreError(e.to_string()))?;
        let store = Arc::new(RedisStore {
            conn,
            client,
            timeout,
            local: Mutex::new(HashMap::new()),
            up: AtomicBool::new(true),
            recheck: AtomicBool::new(false),
            resubscribe: Notify::new(),
            last_ping: AtomicU64::new(0),
            metrics,
            replica: random_hex(8),
            holdings: Default::default(),
            tunnels_refreshed: AtomicU64::new(0),
            tunnels_counted: Mutex::default(),
        });
        Ok(store)
    }

    pub(super) fn local(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.local.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One call to Redis within the timeout; its outcome is the store's health.
    pub(super) async fn call<T: FromRedisValue>(
        &self,
        what: &str,
        fut: impl Future<Output = RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(value)) => {
                self.mark_up();
                Ok(value)
            }
            Ok(Err(e)) => Err(self.mark_down(what, &e.to_string())),
            Err(_) => Err(self.mark_down(what, &format!("no answer within {:?}", self.timeout))),
        }
    }

    pub(super) async fn cmd<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        self.call("command", cmd.query_async(&mut conn)).await
    }

    pub(super) async fn pipe<T: FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        self.call("pipeline", pipe.query_async(&mut conn)).await
    }

    fn mark_up(&self) {
        if !self.up.swap(true, Ordering::AcqRel) {
            tracing::warn!("the session store answers again; sessions are served");
            self.recheck.store(true, Ordering::Release);
            self.resubscribe.notify_one();
        }
    }

    fn mark_down(&self, what: &str, why: &str) -> StoreError {
        if self.up.swap(false, Ordering::AcqRel) {
            tracing::error!(call = what, error = why, "the session store is unavailable: requests with session credentials get 503 session_store_unavailable until it answers");
        }
        StoreError(why.to_string())
    }

    /// Drop a held session and end it here (its tunnels close).
    pub(super) fn end_local(&self, id: &str, why: Ended) {
        let removed = {
            let mut local = self.local();
            let removed = local.remove(id);
            self.metrics.sessions_active.set(local.len() as i64);
            removed
        };
        if let Some(session) = removed {
            if session.end() {
                count_end(&self.metrics, why);
                tracing::info!(session = %id, reason = ?why, "session ended");
            }
        }
    }

    async fn check(&self, id: &str, token: &str) -> Result<Arc<Session>, AuthError> {
        if !self.available() {
            return Err(AuthError::StoreUnavailable);
        }
        if !plausible_id(id) {
            return Err(AuthError::Unknown);
        }
        let held = self.local().get(id).cloned();
        let session = match held {
            Some(s) => self.recheck_held(s, token).await?,
            None => self.fetch(id, token).await?,
        };
        session.touch();
        Ok(session)
    }

    /// A session held here: trusted while fresh, else Redis is asked whether it lives.
    async fn recheck_held(&self, s: Arc<Session>, token: &str) -> Result<Arc<Session>, AuthError> {
        if !s.token_matches(token) {
            return Err(AuthError::Unknown);
        }
        if trusted(&s) {
            return Ok(s);
        }
        // One question to Redis for all the requests that found the copy stale; those
        // that waited find it fresh, or the store unavailable, or the session ended.
        let _one = s.verifying.lock().await;
        if !self.available() {
            return Err(AuthError::StoreUnavailable);
        }
        if s.is_ended() {
            return Err(AuthError::Unknown);
        }
        if trusted(&s) {
            return Ok(s.clone());
        }
        // Its policy, not only whether it exists: an approval on another replica may
        // have added an entry (docs/reference/approvals.md).
        let policy: Option<String> = self
            .cmd(redis::cmd("HGET").arg(key(&s.id)).arg("network_policy"))
            .await
            .map_err(|_| AuthError::StoreUnavailable)?;
        let Some(policy) = policy else {
            self.end_local(&s.id, Ended::Expired);
            return Err(AuthError::Unknown);
        };
        refresh_policy(&s, &policy);
        s.verified_at.store(now_ms(), Ordering::Release);
        Ok(s.clone())
    }

    /// A session not held here: read from Redis, and held if the token is right.
    async fn fetch(&self, id: &str, token: &str) -> Result<Arc<Session>, AuthError> {
        let fields: HashMap<String, String> = self
            .cmd(redis::cmd("HGETALL").arg(key(id)))
            .await
            .map_err(|_| AuthError::StoreUnavailable)?;
        if fields.is_empty() {
            return Err(AuthError::Unknown);
        }
        let session = record::parse(id, &fields).ok_or(AuthError::Unknown)?;
        if !session.token_matches(token) {
            return Err(AuthError::Unknown);
        }
        let mut local = self.local();
        let held = local.entry(id.to_string()).or_insert(Arc::new(session));
        let held = held.clone();
        self.metrics.sessions_active.set(local.len() as i64);
        Ok(held)
    }

    /// Delete `id` everywhere and tell every replica why.
    pub(super) async fn end_everywhere(&self, id: &str, why: Ended) -> Result<bool, StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("DEL")
            .arg(key(id))
            .cmd("PUBLISH")
            .arg(CHANNEL)
            .arg(record::message(why, id))
            .ignore();
        let (deleted,): (u64,) = self.pipe(&pipe).await?;
        let held = self.local().contains_key(id);
        self.end_local(id, why);
        if deleted > 0 && !held {
            count_end(&self.metrics, why);
        }
        Ok(deleted > 0)
    }

    async fn create_in_redis(
        &self,
        new: NewSession,
        admit: Admit<'_>,
    ) -> Result<(View, String), CreateError> {
        admit(&new.policy).map_err(CreateError::Widening)?;
        let (id, token) = (random_hex(16), random_hex(32));
        let hash = hash_token(&token);
        let created_at = SystemTime::now();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("HSET")
            .arg(key(&id))
            .arg(record::fields(&new, &hash, created_at))
            .ignore()
            .cmd("PEXPIRE")
            .arg(key(&id))
            .arg(new.idle_timeout.as_millis() as u64)
            .ignore();
        // The key cannot expire before its first TTL, set after this, has run out.
        let expiry = now_ms() + new.idle_timeout.as_millis() as u64;
        self.pipe::<()>(&pipe).await.map_err(CreateError::Store)?;
        let session = Session::new(id.clone(), hash, new, created_at);
        session.store_expiry.store(expiry, Ordering::Relaxed);
        let session = Arc::new(session);
        let view = view(&session);
        let mut local = self.local();
        local.insert(id, session);
        self.metrics.sessions_created.inc();
        self.metrics.sessions_active.set(local.len() as i64);
        Ok((view, token))
    }
}

impl Store for RedisStore {
    fn verify<'a>(
        &'a self,
        id: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Arc<Session>, AuthError>> {
        Box::pin(self.check(id, token))
    }

    fn create<'a>(
        &'a self,
        new: NewSession,
        admit: Admit<'a>,
    ) -> BoxFuture<'a, Result<(View, String), CreateError>> {
        Box::pin(self.create_in_redis(new, admit))
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<View>, StoreError>> {
        Box::pin(async move {
            if !plausible_id(id) {
                return Ok(None);
            }
            Ok(self.views(&[id.to_string()]).await?.pop())
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<View>, StoreError>> {
        Box::pin(async move {
            let ids = self.all_ids().await?;
            let mut views = Vec::new();
            for chunk in ids.chunks(500) {
                views.extend(self.views(chunk).await?);
            }
            views.sort_by(|a, b| a.created_at.cmp(&b.created_at));
            Ok(views)
        })
    }

    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            if !plausible_id(id) {
                return Ok(false);
            }
            self.end_everywhere(id, Ended::Deleted).await
        })
    }

    fn set_policy<'a>(
        &'a self,
        session: &'a Arc<Session>,
        policy: SessionPolicy,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.set_policy_in_redis(session, policy))
    }

    fn revoke<'a>(
        &'a self,
        uncovered: &'a (dyn Fn(&RequestPolicy) -> Option<Vec<String>> + Sync),
        swap: Box<dyn FnOnce() + Send + 'a>,
    ) -> BoxFuture<'a, Revoked> {
        swap();
        Box::pin(async move {
            match self.revoke_in_redis(uncovered).await {
                Ok(revoked) => revoked,
                Err(e) => {
                    tracing::error!(error = %e, "the reload could not end the sessions it no longer covers in the store; this replica refuses them (policy_widening), and the next reload tries again");
                    Vec::new()
                }
            }
        })
    }

    fn tick(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.upkeep())
    }

    fn available(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }
}
