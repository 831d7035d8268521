//! Upload budgets shared by the fleet through Redis (docs/scale-out.md, "One upload
//! budget"): the [`super::lease`] arithmetic as Lua scripts, each one atomic in Redis,
//! and the upkeep that keeps this replica's reserves alive, gives back what it holds
//! after [`IDLE_RETURN`] (or [`TUNNELS_CLOSED_RETURN`] once its tunnels here closed)
//! and adds what it spent to the fleet's `uploaded_bytes`.
//!
//! Keys, per session (the `{ID}` hash tag keeps them in one slot):
//!
//! - `egress-proxy:budget:{ID}:committed`: bytes committed to replicas (durable).
//! - `egress-proxy:budget:{ID}:reserve:R~B`: replica `R`'s reserve for the budget of `B`
//!   bytes, with a TTL of [`RESERVE_TTL`] it refreshes while it lives.
//! - `egress-proxy:budget:{ID}:holders`: the holders (`R~B`) that may hold a reserve.
//!
//! A replica holds one holding per session and budget: a request whose budget is
//! narrower than the session's (its own `X-Network-Policy`, or a reload) spends only
//! bytes drawn under that budget, so what was drawn under the wider one cannot carry it
//! past its own; the draw counts everything committed to any holder against it.
//! - `egress-proxy:budget:{ID}:uploaded`: bytes sent through every replica.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::held::{Held, Leases};
use super::lease::{MAX_RESERVE, MAX_SLICE, MIN_SLICE, RESERVE_DIVISOR, SLICE_DIVISOR};
use super::redis_store::RedisStore;
use super::{BoxFuture, Store, StoreError, MAX_IDLE_SECS};

/// A reserve not refreshed for this long comes back to the fleet: a replica killed
/// loses its reserve for at most this.
pub(super) const RESERVE_TTL: Duration = Duration::from_secs(30);
/// How often a replica refreshes its reserves and reports what it spent.
pub(super) const REFRESH_EVERY: Duration = Duration::from_secs(5);
/// A holding unused for this long is given back.
pub(super) const IDLE_RETURN: Duration = Duration::from_secs(10);
/// A holding of a session with no tunnel open here (its last one closed) is given back
/// once unused this long: a steady stream of requests keeps it, a pause gives it back.
pub(super) const TUNNELS_CLOSED_RETURN: Duration = Duration::from_secs(1);
/// The budget keys outlive any session's idle time (twice the longest), refreshed by
/// every draw and upkeep while the session is used.
const KEY_TTL_MS: u64 = 2 * MAX_IDLE_SECS * 1000;

/// One draw (`super::lease::Ledger::draw`): KEYS committed, holders, own reserve;
/// ARGV budget, need, replica, reserve TTL, key TTL, reserve key prefix, then the
/// sizing constants. Returns the bytes committed.
const DRAW: &str = r"
local budget, need, me = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local min_slice, max_slice = tonumber(ARGV[7]), tonumber(ARGV[8])
local slice_div, res_div, max_res = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local function clamp(x, lo, hi) if x < lo then return lo elseif x > hi then return hi end return x end
local committed = tonumber(redis.call('GET', KEYS[1]) or '0')
local reserved = 0
for _, r in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if r ~= me then
    local h = redis.call('GET', ARGV[6] .. r)
    if h then reserved = reserved + tonumber(h) else redis.call('SREM', KEYS[2], r) end
  end
end
local own = tonumber(redis.call('GET', KEYS[3]) or '0')
local free = budget - committed
if free < 0 then free = 0 end
free = free - reserved - own
if free < 0 then free = 0 end
local reach = free + own
local floor = clamp(math.floor(budget / 1024), 1, min_slice)
local slice = math.max(need, clamp(math.floor(reach / slice_div), floor, max_slice))
if slice > reach then slice = reach end
local take = 0
if own < slice then
  take = math.min(free, math.max(slice - own, clamp(math.floor(reach / res_div), floor, max_res)))
end
local commit = math.min(slice, own + take)
local left = own + take - commit
redis.call('SET', KEYS[1], string.format('%d', committed + commit), 'PX', ARGV[5])
if left > 0 then
  redis.call('SET', KEYS[3], string.format('%d', left), 'PX', ARGV[4])
  redis.call('SADD', KEYS[2], me)
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
else
  redis.call('DEL', KEYS[3])
  redis.call('SREM', KEYS[2], me)
end
return commit
";

/// Give back (`super::lease::Ledger::give_back`): KEYS committed, holders, own reserve;
/// ARGV unspent, replica.
const GIVE_BACK: &str = r"
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local u = math.min(tonumber(ARGV[1]), c)
if u > 0 then redis.call('SET', KEYS[1], string.format('%d', c - u), 'KEEPTTL') end
redis.call('DEL', KEYS[3])
redis.call('SREM', KEYS[2], ARGV[2])
return u
";

fn base(id: &str) -> String {
    format!("egress-proxy:budget:{{{id}}}:")
}

/// Who holds a holding in the store's ledger: this replica, for one budget (`~-` for
/// the bytes of requests under no budget, which are only counted).
fn holder(replica: &str, budget: Option<u64>) -> String {
    match budget {
        Some(b) => format!("{replica}~{b}"),
        None => format!("{replica}~-"),
    }
}

/// The keys a script is given: committed, holders, the holder `me`'s reserve.
fn keys(id: &str, me: &str) -> [String; 3] {
    let b = base(id);
    [
        format!("{b}committed"),
        format!("{b}holders"),
        format!("{b}reserve:{me}"),
    ]
}

/// The key of the bytes sent through every replica for session `id`.
pub(super) fn uploaded_key(id: &str) -> String {
    format!("{}uploaded", base(id))
}

impl RedisStore {
    async fn draw(
        &self,
        id: &str,
        held: &Arc<Held>,
        budget: u64,
        need: u64,
    ) -> Result<(), StoreError> {
        let _one = held.drawing.lock().await;
        if held.avail() >= need.max(1) {
            return Ok(());
        }
        // Keep this holding in the map (an idle upkeep may have let it go meanwhile),
        // so it is refreshed, reported and given back.
        self.holdings.slot(id, Some(budget), Some(held));
        let me = holder(&self.replica, Some(budget));
        let [committed, holders, reserve] = keys(id, &me);
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(DRAW)
            .arg(3)
            .arg(committed)
            .arg(holders)
            .arg(reserve)
            .arg(budget)
            .arg(need.saturating_sub(held.avail()))
            .arg(&me)
            .arg(RESERVE_TTL.as_millis() as u64)
            .arg(KEY_TTL_MS)
            .arg(format!("{}reserve:", base(id)))
            .arg(MIN_SLICE)
            .arg(MAX_SLICE)
            .arg(SLICE_DIVISOR)
            .arg(RESERVE_DIVISOR)
            .arg(MAX_RESERVE);
        let got: u64 = self.cmd(&cmd).await?;
        held.add(got);
        Ok(())
    }

    /// The upkeep of budgets, once per tick: refresh and report every
    /// [`REFRESH_EVERY`], give back what was idle [`IDLE_RETURN`].
    pub(super) async fn budget_upkeep(&self, now: u64) {
        let mut refresh = Vec::new();
        let mut idle = Vec::new();
        let tunnels: HashMap<String, usize> = self
            .local()
            .iter()
            .map(|(id, s)| (id.clone(), s.open_tunnels()))
            .collect();
        {
            let mut by_id = self.holdings.lock();
            for (id, slot) in by_id
                .iter_mut()
                .flat_map(|(id, v)| v.iter_mut().map(move |s| (id, s)))
            {
                let budget = &slot.budget;
                let used = slot.held.used_ms.load(Ordering::Relaxed);
                let spent = slot.held.spent();
                let open = tunnels.get(id).copied().unwrap_or(0) > 0;
                // No tunnel of it open here (its last one closed, or it only sends
                // requests) and nothing sent for a second.
                let closed =
                    !open && now.saturating_sub(used) >= TUNNELS_CLOSED_RETURN.as_millis() as u64;
                if closed || now.saturating_sub(used) >= IDLE_RETURN.as_millis() as u64 {
                    idle.push((
                        (id.clone(), *budget),
                        slot.held.clone(),
                        spent - slot.reported,
                    ));
                } else if now.saturating_sub(slot.refreshed_ms) >= REFRESH_EVERY.as_millis() as u64
                {
                    refresh.push(((id.clone(), *budget), spent - slot.reported));
                    slot.refreshed_ms = now;
                    slot.reported = spent;
                }
            }
            for ((id, budget), _, _) in &idle {
                if let Some(slots) = by_id.get_mut(id) {
                    slots.retain(|s| s.budget != *budget);
                    if slots.is_empty() {
                        by_id.remove(id);
                    }
                }
            }
        }
        if !refresh.is_empty() {
            let mut pipe = redis::pipe();
            for ((id, budget), delta) in &refresh {
                let [committed, _, reserve] = keys(id, &holder(&self.replica, *budget));
                pipe.cmd("PEXPIRE")
                    .arg(reserve)
                    .arg(RESERVE_TTL.as_millis() as u64)
                    .ignore();
                pipe.cmd("PEXPIRE").arg(committed).arg(KEY_TTL_MS).ignore();
                if *delta > 0 {
                    pipe.cmd("INCRBY")
                        .arg(uploaded_key(id))
                        .arg(*delta)
                        .ignore();
                    pipe.cmd("PEXPIRE")
                        .arg(uploaded_key(id))
                        .arg(KEY_TTL_MS)
                        .ignore();
                }
            }
            let _ = self.pipe::<()>(&pipe).await;
        }
        for ((id, budget), held, delta) in idle {
            let unspent = held.drain();
            if unspent == 0 && delta == 0 && !held.drawn.swap(false, Ordering::Relaxed) {
                continue;
            }
            let me = holder(&self.replica, budget);
            if self.give_back(&id, &me, unspent, delta).await.is_err() {
                // Not given back: the bytes stay committed (never spendable twice);
                // the reserve comes back when its key expires.
                tracing::debug!(session = %id, "could not give back an idle upload-budget holding");
            }
        }
    }

    async fn give_back(
        &self,
        id: &str,
        me: &str,
        unspent: u64,
        delta: u64,
    ) -> Result<(), StoreError> {
        let [committed, holders, reserve] = keys(id, me);
        let mut pipe = redis::pipe();
        pipe.cmd("EVAL")
            .arg(GIVE_BACK)
            .arg(3)
            .arg(committed)
            .arg(holders)
            .arg(reserve)
            .arg(unspent)
            .arg(me)
            .ignore();
        if delta > 0 {
            pipe.cmd("INCRBY").arg(uploaded_key(id)).arg(delta).ignore();
            pipe.cmd("PEXPIRE")
                .arg(uploaded_key(id))
                .arg(KEY_TTL_MS)
                .ignore();
        }
        self.pipe::<()>(&pipe).await
    }
}

impl Leases for RedisStore {
    fn held(&self, id: &str, budget: Option<u64>) -> Arc<Held> {
        self.holdings.slot(id, budget, None)
    }

    fn fill<'a>(
        &'a self,
        id: &'a str,
        held: &'a Arc<Held>,
        budget: u64,
        need: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            if held.avail() >= need.max(1) {
                return Ok(());
            }
            if !self.available() {
                return Err(StoreError("the session store is unavailable".into()));
            }
            self.draw(id, held, budget, need).await
        })
    }

    fn open_tunnel<'a>(
        &'a self,
        id: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        RedisStore::open_tunnel(self, id, max)
    }

    fn close_tunnel(self: Arc<Self>, id: String) {
        RedisStore::close_tunnel(self, id)
    }

    fn fleet_tunnels<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<usize, StoreError>> {
        Box::pin(RedisStore::fleet_tunnels(self, id))
    }

    fn uploaded<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<u64>, StoreError>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            // One pipeline of GETs (not MGET: each session's keys have a slot of their own).
            let mut pipe = redis::pipe();
            for id in ids {
                pipe.cmd("GET").arg(uploaded_key(id));
            }
            let fleet: Vec<Option<u64>> = self.pipe(&pipe).await?;
            Ok(ids
                .iter()
                .zip(fleet)
                .map(|(id, n)| n.unwrap_or(0) + self.holdings.unreported(id))
                .collect())
        })
    }
}
