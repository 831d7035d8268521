//! The in-memory store (`--session-store memory`, the default): every session in one
//! map behind a lock, in this process only. A reload ends the sessions it no longer
//! covers and swaps the policies under that lock, so no session is created against a
//! policy being replaced.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

#[cfg(test)]
use hyper::header::HeaderMap;

use super::store::{Admit, Revoked};
use super::{
    hash_token, now_ms, random_hex, wall, AuthError, BoxFuture, CreateError, Ended, NewSession,
    Session, SessionPolicy, Store, StoreError, View,
};
use crate::metrics::Metrics;
use crate::policy::RequestPolicy;

/// Every live session of this process.
pub(crate) struct MemoryStore {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    metrics: Arc<Metrics>,
}

#[cfg(test)]
use super::{credentials_of, TunnelGuard};

impl MemoryStore {
    pub(crate) fn new(metrics: Arc<Metrics>) -> MemoryStore {
        MemoryStore {
            sessions: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// The store's lock. Held by a reload while it revokes and swaps policies, so a
    /// session is never created against a policy that is being replaced.
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Build a session with fresh credentials. Returns it and its token; insert it with
    /// [`insert`](Self::insert) once its policy has been checked.
    pub(crate) fn create(&self, new: NewSession) -> (Arc<Session>, String) {
        let token = random_hex(32);
        let session = Session::new(random_hex(16), hash_token(&token), new, SystemTime::now());
        (Arc::new(session), token)
    }

    /// Add a session to `map` (the store's locked map).
    pub(crate) fn insert(&self, map: &mut HashMap<String, Arc<Session>>, session: Arc<Session>) {
        map.insert(session.id.clone(), session);
        self.metrics.sessions_created.inc();
        self.metrics.sessions_active.set(map.len() as i64);
    }

    /// Remove and end a session held in `map`; `None` when it is not there.
    pub(crate) fn end_locked(
        &self,
        map: &mut HashMap<String, Arc<Session>>,
        id: &str,
        why: Ended,
    ) -> Option<Arc<Session>> {
        let session = map.remove(id)?;
        session.end();
        super::count_end(&self.metrics, why);
        self.metrics.sessions_active.set(map.len() as i64);
        tracing::info!(session = %session.id, reason = ?why, "session ended");
        Some(session)
    }

    /// End a session now (DELETE): its tunnels close.
    pub(crate) fn end(&self, id: &str, why: Ended) -> Option<Arc<Session>> {
        self.end_locked(&mut self.lock(), id, why)
    }

    /// Idle for its timeout: no request and no byte relayed by its tunnels for that
    /// long. Open tunnels that relay nothing do not count (docs/reference/control-plane.md).
    fn expired(&self, s: &Session, now_ms: u64) -> bool {
        now_ms.saturating_sub(s.last_activity.load(Ordering::Relaxed))
            >= s.idle_timeout.as_millis() as u64
    }

    /// End every session idle for its timeout (its tunnels close). Called periodically.
    pub(crate) fn expire_idle(&self) {
        let now = now_ms();
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
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Session>> {
        let mut map = self.lock();
        let session = map.get(id)?.clone();
        if self.expired(&session, now_ms()) {
            self.end_locked(&mut map, id, Ended::Expired);
            return None;
        }
        Some(session)
    }

    /// Every live session, oldest first.
    pub(crate) fn list(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<Arc<Session>> = self.lock().values().cloned().collect();
        all.sort_by_key(|s| s.created_at);
        all
    }

    /// The session `id` if `token` is its token; that request is traffic for it.
    fn check(&self, id: &str, token: &str) -> Result<Arc<Session>, AuthError> {
        let session = self.get(id).ok_or(AuthError::Unknown)?;
        if !session.token_matches(token) {
            return Err(AuthError::Unknown);
        }
        session.touch();
        Ok(session)
    }

    /// The session named by a request's `Proxy-Authorization`, if it carries one: that
    /// request is traffic for it. Errors never say which part was wrong.
    #[cfg(test)]
    pub(crate) fn authenticate(
        &self,
        headers: &HeaderMap,
    ) -> Result<Option<Arc<Session>>, AuthError> {
        let mut values = headers.get_all(hyper::header::PROXY_AUTHORIZATION).iter();
        let first = values.next();
        match credentials_of(first.map_or(0, |_| 1 + values.count()), first)? {
            None => Ok(None),
            Some((id, token)) => self.check(&id, &token).map(Some),
        }
    }

    /// Count an open tunnel of `session` until the guard drops. `None` when the session
    /// already holds `max` open tunnels (`--max-tunnels-per-session`).
    #[cfg(test)]
    pub(crate) fn tunnel_opened(&self, session: &Arc<Session>, max: usize) -> Option<TunnelGuard> {
        super::tunnel_opened(session, max)
    }

    /// What `GET /v1/sessions/{id}` shows.
    pub(crate) fn view(&self, s: &Session) -> View {
        view(s)
    }
}

/// What `GET /v1/sessions/{id}` shows of a session whose last traffic is known here.
pub(super) fn view(s: &Session) -> View {
    let last = s.last_activity.load(Ordering::Relaxed);
    View {
        id: s.id.clone(),
        label: s.label.clone(),
        network_policy: s.policy().json.clone(),
        on_deny: if s.ask.is_some() { "ask" } else { "refuse" },
        ask_timeout_seconds: s.ask.map(|d| d.as_secs()),
        idle_timeout_seconds: s.idle_timeout.as_secs(),
        created_at: crate::audit::rfc3339(s.created_at),
        last_activity: crate::audit::rfc3339(wall(last)),
        expires_at: crate::audit::rfc3339(wall(last) + s.idle_timeout),
        open_tunnels: s.open_tunnels(),
        canaries: s
            .canaries
            .ids()
            .map(|(id, kind)| super::CanaryView {
                id: id.into(),
                kind: kind.into(),
            })
            .collect(),
        on_canary: s.on_canary.map(super::on_trip_str),
    }
}

impl Store for MemoryStore {
    fn set_policy<'a>(
        &'a self,
        session: &'a Arc<Session>,
        policy: SessionPolicy,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        // The store holds this very session: the change is everywhere at once.
        session.set_policy(policy);
        Box::pin(std::future::ready(Ok(())))
    }

    fn verify<'a>(
        &'a self,
        id: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Arc<Session>, AuthError>> {
        Box::pin(std::future::ready(self.check(id, token)))
    }

    fn create<'a>(
        &'a self,
        new: NewSession,
        admit: Admit<'a>,
    ) -> BoxFuture<'a, Result<(View, String), CreateError>> {
        let (session, token) = self.create(new);
        let mut map = self.lock();
        let done = match admit(&session.policy().compiled) {
            Err(w) => Err(CreateError::Widening(w)),
            Ok(()) => {
                self.insert(&mut map, session.clone());
                Ok((self.view(&session), token))
            }
        };
        drop(map);
        Box::pin(std::future::ready(done))
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<View>, StoreError>> {
        let found = MemoryStore::get(self, id).map(|s| self.view(&s));
        Box::pin(std::future::ready(Ok(found)))
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<View>, StoreError>> {
        let views = MemoryStore::list(self)
            .iter()
            .map(|s| self.view(s))
            .collect();
        Box::pin(std::future::ready(Ok(views)))
    }

    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        let found = self.end(id, Ended::Deleted).is_some();
        Box::pin(std::future::ready(Ok(found)))
    }

    fn revoke<'a>(
        &'a self,
        uncovered: &'a (dyn Fn(&RequestPolicy) -> Option<Vec<String>> + Sync),
        swap: Box<dyn FnOnce() + Send + 'a>,
    ) -> BoxFuture<'a, Revoked> {
        let mut map = self.lock();
        let widening: Revoked = map
            .values()
            .filter_map(|s| uncovered(&s.policy().compiled).map(|w| (s.id.clone(), w)))
            .collect();
        let mut revoked = Vec::with_capacity(widening.len());
        for (id, offending) in widening {
            if self.end_locked(&mut map, &id, Ended::Revoked).is_some() {
                revoked.push((id, offending));
            }
        }
        swap();
        drop(map);
        Box::pin(std::future::ready(revoked))
    }

    fn tick(&self) -> BoxFuture<'_, ()> {
        self.expire_idle();
        Box::pin(std::future::ready(()))
    }

    fn available(&self) -> bool {
        true
    }
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
