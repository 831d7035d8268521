//! A session's open tunnels counted across the fleet (docs/scale-out.md, "Tunnel
//! counts"): each replica keeps its count for the session in a key of its own with a TTL
//! of [`COUNT_TTL`], set from its local count every [`super::redis_budget::REFRESH_EVERY`]
//! while it has tunnels open; the fleet's count is the sum of the live keys, so a
//! replica that dies stops counting when its key expires, without anyone noticing.
//!
//! Keys: `egress-proxy:tunnels:{ID}:R` (replica `R`'s count) and
//! `egress-proxy:tunnels:{ID}:holders` (the replicas that may have one).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::redis_store::RedisStore;
use super::{BoxFuture, Session, StoreError, MAX_IDLE_SECS};

/// A replica's count not refreshed for this long stops counting.
pub(super) const COUNT_TTL: Duration = Duration::from_secs(30);
const KEY_TTL_MS: u64 = 2 * MAX_IDLE_SECS * 1000;

/// Sum the live counts of other replicas (dropping the dead from the holders); KEYS
/// holders; ARGV replica, count key prefix. Shared by the scripts below.
const SUM_OTHERS: &str = r"
local others = 0
for _, r in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if r ~= ARGV[1] then
    local n = redis.call('GET', ARGV[2] .. r)
    if n then others = others + tonumber(n) else redis.call('SREM', KEYS[1], r) end
  end
end
";

/// Take one from this replica's count, deleting the key rather than going below one.
const CLOSE: &str = r"
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n <= 1 then redis.call('DEL', KEYS[1]) return 0 end
return redis.call('DECR', KEYS[1])
";

/// Open one: KEYS holders, own count; ARGV replica, prefix, max, count TTL, key TTL.
/// Returns 1 when opened, 0 when the fleet already holds `max`.
fn open_script() -> String {
    format!(
        "{SUM_OTHERS}
local own = redis.call('INCR', KEYS[2])
if others + own > tonumber(ARGV[3]) then
  if own <= 1 then redis.call('DEL', KEYS[2]) else redis.call('DECR', KEYS[2]) end
  return 0
end
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1"
    )
}

/// The fleet's count: KEYS holders, own count; ARGV replica, prefix.
fn count_script() -> String {
    format!("{SUM_OTHERS}\nreturn others + tonumber(redis.call('GET', KEYS[2]) or '0')")
}

fn base(id: &str) -> String {
    format!("egress-proxy:tunnels:{{{id}}}:")
}

/// The holders key and this replica's count key.
fn keys(id: &str, me: &str) -> [String; 2] {
    let b = base(id);
    [format!("{b}holders"), format!("{b}{me}")]
}

impl RedisStore {
    /// Count a new tunnel of session `id` on the fleet, unless it already holds `max`.
    pub(super) fn open_tunnel<'a>(
        &'a self,
        id: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let [holders, own] = keys(id, &self.replica);
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(open_script())
                .arg(2)
                .arg(holders)
                .arg(own)
                .arg(&self.replica)
                .arg(base(id))
                .arg(max)
                .arg(COUNT_TTL.as_millis() as u64)
                .arg(KEY_TTL_MS);
            let opened: i64 = self.cmd(&cmd).await?;
            Ok(opened == 1)
        })
    }

    /// One tunnel of session `id` closed here. A failure is corrected by the next
    /// refresh, which sets the key from the local count. Never below zero: a key that
    /// expired (the store was away) or was pruned is not made `-1` without a TTL, which
    /// would let every other replica open one tunnel more.
    pub(super) fn close_tunnel(self: Arc<Self>, id: String) {
        tokio::spawn(async move {
            let [_, own] = keys(&id, &self.replica);
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(CLOSE).arg(1).arg(own);
            let _ = self.cmd::<i64>(&cmd).await;
        });
    }

    /// The session's open tunnels on every replica.
    pub(super) async fn fleet_tunnels(&self, id: &str) -> Result<usize, StoreError> {
        let [holders, own] = keys(id, &self.replica);
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(count_script())
            .arg(2)
            .arg(holders)
            .arg(own)
            .arg(&self.replica)
            .arg(base(id));
        let n: i64 = self.cmd(&cmd).await?;
        Ok(n.max(0) as usize)
    }

    /// Add to `pipe` the refresh of `s`'s count here: its local count, with a new TTL
    /// (or no key when it has none open).
    pub(super) fn refresh_tunnels(&self, pipe: &mut redis::Pipeline, s: &Session) {
        let [_, own] = keys(&s.id, &self.replica);
        match s.open_tunnels() {
            0 => pipe.cmd("DEL").arg(own).ignore(),
            n => pipe
                .cmd("SET")
                .arg(own)
                .arg(n)
                .arg("PX")
                .arg(COUNT_TTL.as_millis() as u64)
                .ignore(),
        };
    }
}

impl RedisStore {
    /// Every [`super::redis_budget::REFRESH_EVERY`]: set this replica's count of each
    /// session with tunnels open here (and drop the keys of those that had some).
    pub(super) async fn tunnel_upkeep(&self, now: u64) {
        let every = super::redis_budget::REFRESH_EVERY.as_millis() as u64;
        if now.saturating_sub(self.tunnels_refreshed.load(Ordering::Relaxed)) < every {
            return;
        }
        self.tunnels_refreshed.store(now, Ordering::Relaxed);
        let open: Vec<Arc<Session>> = self
            .local()
            .values()
            .filter(|s| s.open_tunnels() > 0)
            .cloned()
            .collect();
        let now_counted: HashSet<String> = open.iter().map(|s| s.id.clone()).collect();
        let gone: Vec<String> = {
            let mut counted = self
                .tunnels_counted
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let gone = counted.difference(&now_counted).cloned().collect();
            *counted = now_counted;
            gone
        };
        let mut pipe = redis::pipe();
        for s in &open {
            self.refresh_tunnels(&mut pipe, s);
        }
        for id in &gone {
            let [_, own] = keys(id, &self.replica);
            pipe.cmd("DEL").arg(own).ignore();
        }
        if !open.is_empty() || !gone.is_empty() {
            let _ = self.pipe::<()>(&pipe).await;
        }
    }
}
