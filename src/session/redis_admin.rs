//! The Redis store's admin side (docs/scale-out.md): what `GET /v1/sessions` shows,
//! every session by `SCAN`, and the revocation a reload asks for, on every replica.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use redis::FromRedisValue;

use super::memory::view;
use super::redis_record::{self as record, key, plausible_id};
use super::redis_store::RedisStore;
use super::store::Revoked;
use super::{now_ms, Ended, Session, SessionPolicy, StoreError, View};
use crate::policy::RequestPolicy;

impl RedisStore {
    /// What `GET` shows: Redis's TTL says when the fleet last saw traffic, this
    /// replica's copy may know of later traffic not yet pushed.
    fn view_of(&self, id: &str, fields: &HashMap<String, String>, pttl: i64) -> Option<View> {
        let held = self.local().get(id).cloned();
        let session = match held {
            Some(s) => s,
            None => Arc::new(record::parse(id, fields)?),
        };
        let now = now_ms();
        let idle = session.idle_timeout.as_millis() as u64;
        let remote_last = now.saturating_sub(idle.saturating_sub(pttl.max(0) as u64));
        session
            .last_activity
            .fetch_max(remote_last, Ordering::Relaxed);
        Some(view(&session))
    }

    /// Every session key, by SCAN (never KEYS, which would stall Redis).
    pub(super) async fn all_ids(&self) -> Result<Vec<String>, StoreError> {
        let mut ids = Vec::new();
        let mut cursor = 0u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(format!("{}*", record::KEY_PREFIX))
                .arg("COUNT")
                .arg(1000);
            let (next, keys): (u64, Vec<String>) = self.cmd(&scan).await?;
            ids.extend(
                keys.iter()
                    .filter_map(|k| k.strip_prefix(record::KEY_PREFIX))
                    .filter(|id| plausible_id(id))
                    .map(str::to_string),
            );
            if next == 0 {
                return Ok(ids);
            }
            cursor = next;
        }
    }

    /// The views of `ids` that still exist.
    pub(super) async fn views(&self, ids: &[String]) -> Result<Vec<View>, StoreError> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("HGETALL").arg(key(id)).cmd("PTTL").arg(key(id));
        }
        let replies: Vec<redis::Value> = self.pipe(&pipe).await?;
        let mut views = Vec::new();
        for (id, pair) in ids.iter().zip(replies.chunks(2)) {
            let fields: HashMap<String, String> =
                FromRedisValue::from_redis_value(pair[0].clone()).unwrap_or_default();
            let pttl: i64 = FromRedisValue::from_redis_value(pair[1].clone()).unwrap_or(-2);
            if !fields.is_empty() {
                views.extend(self.view_of(id, &fields, pttl));
            }
        }
        Ok(views)
    }

    /// A reload: the new policies go in force here first (sessions they do not cover are
    /// refused on this replica from then on, `policy_widening`), then every session in
    /// Redis they do not cover is ended everywhere.
    pub(super) async fn revoke_in_redis(
        &self,
        uncovered: &(dyn Fn(&RequestPolicy) -> Option<Vec<String>> + Sync),
    ) -> Result<Revoked, StoreError> {
        let ids = self.all_ids().await?;
        let mut revoked = Vec::new();
        for id in ids {
            let fields: HashMap<String, String> =
                self.cmd(redis::cmd("HGETALL").arg(key(&id))).await?;
            let Some(session) = record::parse(&id, &fields) else {
                continue;
            };
            if let Some(offending) = uncovered(&session.policy().compiled) {
                if self.end_everywhere(&id, Ended::Revoked).await? {
                    revoked.push((id, offending));
                }
            }
        }
        Ok(revoked)
    }
}

/// Replaces the policy of `id` only while its key exists: a session that ended is not
/// brought back.
const SET_POLICY: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'network_policy', ARGV[1])
return 1
";

impl RedisStore {
    /// An approved `allow-session`: the policy written to the session's hash (where the
    /// other replicas read it when they next ask whether the session lives), and put in
    /// force here at once.
    pub(super) async fn set_policy_in_redis(
        &self,
        session: &Arc<Session>,
        policy: SessionPolicy,
    ) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(SET_POLICY)
            .arg(1)
            .arg(key(&session.id))
            .arg(policy.json.to_string());
        let _: i64 = self.cmd(&cmd).await?;
        session.set_policy(policy);
        Ok(())
    }
}
