//! Keeping a replica in step with the Redis store (docs/scale-out.md): the subscription
//! that ends sessions deleted or revoked elsewhere, and the upkeep that pushes this
//! replica's traffic to the keys' TTLs, ends the sessions whose keys expired while
//! tunnels of theirs are open here, watches the store's health, and after a reconnect
//! checks again every session it holds (it may have missed messages).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;

use super::redis_record::{key, parse_message, CHANNEL};
use super::redis_store::{refresh_interval, RedisStore, EVICT_AFTER};
use super::{now_ms, Ended, Session, Store, StoreError};
use crate::metrics::Metrics;

impl RedisStore {
    /// Connect lazily to `url` (the first call connects; a store that is down at start
    /// is an outage like any other) and start listening for ended sessions.
    pub(crate) fn start(
        url: &str,
        timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<RedisStore>, StoreError> {
        let store = RedisStore::connect(url, timeout, metrics)?;
        tokio::spawn(listen(Arc::downgrade(&store)));
        Ok(store)
    }
}

/// How often the store is pinged when nothing else asks it (for `/healthz`).
const PING_EVERY: Duration = Duration::from_secs(1);
/// The wait before subscribing again after the subscription was lost.
const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(250);

/// Listen on [`CHANNEL`] until the store is dropped, subscribing again whenever the
/// subscription is lost or the store comes back after an outage.
pub(super) async fn listen(store: Weak<RedisStore>) {
    loop {
        let Some((client, timeout)) = store.upgrade().map(|s| (s.client.clone(), s.timeout)) else {
            return;
        };
        let subscribed = tokio::time::timeout(timeout, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(CHANNEL).await?;
            redis::RedisResult::Ok(pubsub)
        })
        .await;
        match subscribed {
            Ok(Ok(pubsub)) => {
                let Some(s) = store.upgrade() else { return };
                // Messages published while unsubscribed are lost: check what is held.
                s.recheck.store(true, Ordering::Release);
                tracing::debug!("subscribed to the session store's ended sessions");
                drop(s);
                follow(&store, pubsub).await;
                tracing::warn!("lost the session store's subscription; subscribing again");
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "cannot subscribe to the session store"),
            Err(_) => tracing::debug!("subscribing to the session store timed out"),
        }
        tokio::time::sleep(RESUBSCRIBE_DELAY).await;
    }
}

/// End the sessions named on the channel, until the subscription ends or the store asks
/// for a new one (it came back after an outage: the old connection may be dead).
async fn follow(store: &Weak<RedisStore>, pubsub: redis::aio::PubSub) {
    let mut messages = pubsub.into_on_message();
    loop {
        let Some(s) = store.upgrade() else { return };
        let next = tokio::select! {
            next = messages.next() => next,
            _ = s.resubscribe.notified() => return,
        };
        let Some(msg) = next else { return };
        if let Some((why, id)) = parse_message(msg.get_payload_bytes()) {
            s.end_local(id, why);
        }
    }
}

impl RedisStore {
    /// One upkeep tick: health, re-checks after an outage, traffic, eviction.
    pub(super) async fn upkeep(&self) {
        let now = now_ms();
        let since_ping = now.saturating_sub(self.last_ping.load(Ordering::Relaxed));
        if !self.available() || since_ping >= PING_EVERY.as_millis() as u64 {
            self.last_ping.store(now, Ordering::Relaxed);
            if self.cmd::<String>(&redis::cmd("PING")).await.is_err() {
                return;
            }
        }
        if self.recheck.swap(false, Ordering::AcqRel) && self.recheck_all().await.is_err() {
            self.recheck.store(true, Ordering::Release);
            return;
        }
        self.sync_traffic(now).await;
        self.budget_upkeep(now).await;
        self.tunnel_upkeep(now).await;
        self.evict(now);
    }

    /// Ask Redis whether each held session still exists; end those that do not.
    async fn recheck_all(&self) -> Result<(), super::StoreError> {
        let held: Vec<Arc<Session>> = self.local().values().cloned().collect();
        if held.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for s in &held {
            pipe.cmd("EXISTS").arg(key(&s.id));
        }
        let exists: Vec<bool> = self.pipe(&pipe).await?;
        let now = now_ms();
        for (s, alive) in held.iter().zip(exists) {
            if alive {
                s.verified_at.store(now, Ordering::Release);
            } else {
                tracing::warn!(session = %s.id, "the session is gone from the store; ending it here");
                self.end_local(&s.id, Ended::Expired);
            }
        }
        Ok(())
    }

    /// Tell Redis of the traffic each held session had here, at most once per its
    /// [`refresh_interval`]: its TTL becomes its idle time left, never shortened (`GT`:
    /// another replica may have seen later traffic). And watch the sessions with tunnels
    /// open here: a tunnel that relays nothing is no traffic, so Redis may expire the key
    /// (idle on every replica) while one is open. Once the key's last known TTL has run
    /// out it is asked again, and a key that is gone ends the session here (its tunnels
    /// close). Both ask for the key's TTL, in one pipeline for every session due.
    async fn sync_traffic(&self, now: u64) {
        let due: Vec<(Arc<Session>, Option<u64>)> = self
            .local()
            .values()
            .filter_map(|s| {
                let push = traffic_to_push(s, now);
                let watch = s.open_tunnels() > 0 && now >= s.store_expiry.load(Ordering::Relaxed);
                (push.is_some() || watch).then(|| (s.clone(), push))
            })
            .collect();
        if due.is_empty() {
            return;
        }
        let mut pipe = redis::pipe();
        for (s, push) in &due {
            let k = key(&s.id);
            if let Some(left) = push {
                pipe.cmd("PEXPIRE").arg(&k).arg(*left).arg("GT").ignore();
            }
            pipe.cmd("PTTL").arg(&k);
        }
        let Ok(ttls) = self.pipe::<Vec<i64>>(&pipe).await else {
            return;
        };
        for ((s, push), ttl) in due.iter().zip(ttls) {
            if push.is_some() {
                s.pushed_at.store(now, Ordering::Relaxed);
            }
            // -2: no such key (expired or deleted); -1 (no TTL) is not written by us.
            if ttl == -2 {
                self.end_local(&s.id, Ended::Expired);
                continue;
            }
            let left = u64::try_from(ttl).unwrap_or(s.idle_timeout.as_millis() as u64);
            s.store_expiry.store(now + left, Ordering::Relaxed);
            s.verified_at.store(now, Ordering::Release);
        }
    }

    /// Drop local copies nobody here has used for [`EVICT_AFTER`], whose traffic Redis
    /// already knows. They are not ended: Redis still holds them for the other replicas.
    fn evict(&self, now: u64) {
        let mut local = self.local();
        local.retain(|_, s| {
            let last = s.last_activity.load(Ordering::Relaxed);
            s.open_tunnels() > 0
                || s.pushed_at.load(Ordering::Relaxed) < last
                || now.saturating_sub(last) < EVICT_AFTER.as_millis() as u64
        });
        self.metrics.sessions_active.set(local.len() as i64);
    }
}

/// The idle time left to set as `s`'s TTL, when it had traffic here that Redis has not
/// been told of and its [`refresh_interval`] has passed since the last push; `None`
/// otherwise, or when that traffic is already older than the idle timeout.
fn traffic_to_push(s: &Session, now: u64) -> Option<u64> {
    let last = s.last_activity.load(Ordering::Relaxed);
    let pushed = s.pushed_at.load(Ordering::Relaxed);
    let interval = refresh_interval(s.idle_timeout).as_millis() as u64;
    if last <= pushed || now.saturating_sub(pushed) < interval {
        return None;
    }
    let idle = s.idle_timeout.as_millis() as u64;
    let left = idle.checked_sub(now.saturating_sub(last))?;
    (left > 0).then_some(left)
}
