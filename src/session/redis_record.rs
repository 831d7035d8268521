//! How a session is kept in Redis (docs/scale-out.md, "What Redis holds"): one hash per
//! session under `egress-proxy:session:ID`, whose key TTL is the session's idle time
//! left. The token is not in it, only its SHA-256. A session's canaries are, values and
//! all: every replica must look for them, so they cannot be hashed.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{hex, NewSession, Session, SessionPolicy, TokenHash};
use crate::dlp::{check_value, Canary};
use crate::policy::{OnTrip, RequestPolicy};

/// The prefix of every session key.
pub(super) const KEY_PREFIX: &str = "egress-proxy:session:";
/// The channel every replica listens on for ended sessions: `deleted ID` or `revoked ID`.
pub(super) const CHANNEL: &str = "egress-proxy:session-ended";

/// The key of session `id`.
pub(super) fn key(id: &str) -> String {
    format!("{KEY_PREFIX}{id}")
}

/// Whether `id` can be a session id (32 hex digits, as [`super::random_hex`] makes
/// them). Anything else is unknown without asking Redis, and never becomes part of a
/// key.
pub(super) fn plausible_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The hash fields of a new session.
pub(super) fn fields(
    new: &NewSession,
    hash: &TokenHash,
    created_at: SystemTime,
) -> Vec<(&'static str, String)> {
    let created_ms = created_at
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let mut fields = vec![
        ("token_sha256", hex(hash)),
        ("network_policy", new.policy_json.to_string()),
        ("created_at_ms", created_ms.to_string()),
        (
            "idle_timeout_seconds",
            new.idle_timeout.as_secs().to_string(),
        ),
    ];
    if let Some(label) = &new.label {
        fields.push(("label", label.clone()));
    }
    if let Some(ask) = new.ask {
        fields.push(("ask_timeout_seconds", ask.as_secs().to_string()));
    }
    if !new.canaries.is_empty() {
        let canaries: Vec<serde_json::Value> = new
            .canaries
            .iter()
            .map(|c| {
                let value = String::from_utf8_lossy(c.value());
                serde_json::json!({"id": &*c.id, "kind": &*c.kind, "value": value})
            })
            .collect();
        fields.push(("canaries", serde_json::Value::from(canaries).to_string()));
    }
    if let Some(on) = new.on_canary {
        fields.push(("on_canary", super::on_trip_str(on).to_string()));
    }
    fields
}

/// A session read back from its hash; `None` (logged) when the hash is not one this
/// proxy wrote: fail closed, the credentials are unknown.
pub(super) fn parse(id: &str, fields: &HashMap<String, String>) -> Option<Session> {
    let parsed = parse_fields(fields);
    if parsed.is_none() {
        tracing::error!(session = %id, "the session store holds a session this proxy cannot read; its credentials are refused");
    }
    let (hash, new, created_at) = parsed?;
    Some(Session::new(id.to_string(), hash, new, created_at))
}

fn parse_fields(fields: &HashMap<String, String>) -> Option<(TokenHash, NewSession, SystemTime)> {
    let hash = unhex(fields.get("token_sha256")?)?;
    let policy_json: serde_json::Value =
        serde_json::from_str(fields.get("network_policy")?).ok()?;
    let policy = RequestPolicy::from_value(&policy_json, "network_policy").ok()?;
    let created_ms: u64 = fields.get("created_at_ms")?.parse().ok()?;
    let idle: u64 = fields.get("idle_timeout_seconds")?.parse().ok()?;
    let ask = match fields.get("ask_timeout_seconds") {
        Some(secs) => Some(Duration::from_secs(secs.parse().ok()?)),
        None => None,
    };
    let canaries = match fields.get("canaries") {
        Some(text) => canaries(text)?,
        None => Vec::new(),
    };
    let on_canary = match fields.get("on_canary").map(String::as_str) {
        None => None,
        Some("end-session") => Some(OnTrip::EndSession),
        Some("refuse") => Some(OnTrip::Refuse),
        Some(_) => return None,
    };
    let new = NewSession {
        policy,
        policy_json,
        label: fields.get("label").cloned(),
        idle_timeout: Duration::from_secs(idle),
        ask,
        canaries,
        on_canary,
    };
    Some((hash, new, UNIX_EPOCH + Duration::from_millis(created_ms)))
}

/// A session's canaries read back from their field.
fn canaries(text: &str) -> Option<Vec<Canary>> {
    let list: Vec<serde_json::Value> = serde_json::from_str(text).ok()?;
    list.iter()
        .map(|c| {
            let field = |name: &str| c.get(name)?.as_str();
            let value = field("value")?.as_bytes().to_vec();
            check_value(&value).ok()?;
            Some(Canary::new(field("id")?, field("kind")?, value))
        })
        .collect()
}

fn unhex(text: &str) -> Option<TokenHash> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks(2).enumerate() {
        let pair = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

/// A message on [`CHANNEL`].
pub(super) fn message(why: super::Ended, id: &str) -> String {
    let word = match why {
        super::Ended::Revoked => "revoked",
        super::Ended::Expired => "expired",
        super::Ended::Deleted => "deleted",
    };
    format!("{word} {id}")
}

/// A message on [`CHANNEL`] read back.
pub(super) fn parse_message(payload: &[u8]) -> Option<(super::Ended, &str)> {
    let text = std::str::from_utf8(payload).ok()?;
    let (word, id) = text.split_once(' ')?;
    let why = match word {
        "revoked" => super::Ended::Revoked,
        "expired" => super::Ended::Expired,
        "deleted" => super::Ended::Deleted,
        _ => return None,
    };
    Some((why, id))
}

/// Puts the policy the store holds for `s` (its JSON text) in force here when it is not
/// the one in force. A text this proxy cannot read leaves the copy as it is (logged).
pub(super) fn refresh_policy(s: &Session, text: &str) {
    let Ok(json) = serde_json::from_str::<serde_json::Value>(text) else {
        tracing::error!(session = %s.id, "the session store holds a policy this proxy cannot read; the copy here stays in force");
        return;
    };
    if s.policy().json == json {
        return;
    }
    match RequestPolicy::from_value(&json, "network_policy") {
        Ok(compiled) => s.set_policy(SessionPolicy::new(compiled, json)),
        Err(e) => {
            tracing::error!(session = %s.id, error = %e, "the session store holds a policy this proxy cannot compile; the copy here stays in force");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_holds_no_token() {
        let token = "ab".repeat(32);
        let hash = super::super::hash_token(&token);
        let new = NewSession {
            policy: RequestPolicy::Disabled,
            policy_json: serde_json::json!({"type": "disabled"}),
            label: Some("l".into()),
            idle_timeout: Duration::from_secs(7),
            ask: Some(Duration::from_secs(9)),
            canaries: vec![Canary::new(
                "c1",
                "generic",
                b"a-canary-of-the-session".to_vec(),
            )],
            on_canary: Some(OnTrip::Refuse),
        };
        let fields: HashMap<String, String> = fields(&new, &hash, SystemTime::now())
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert!(fields.values().all(|v| !v.contains(&token)));
        let back = parse(&"0".repeat(32), &fields).unwrap();
        assert!(back.token_matches(&token));
        assert!(!back.token_matches("cd"));
        assert_eq!(back.idle_timeout, Duration::from_secs(7));
        assert_eq!(back.label.as_deref(), Some("l"));
        assert_eq!(back.ask, Some(Duration::from_secs(9)));
        assert_eq!(back.on_canary, Some(OnTrip::Refuse));
        let found = back
            .canaries
            .scan(b"x=a-canary-of-the-session", crate::dlp::FoundIn::Url);
        assert_eq!(found.map(|h| h.id.to_string()), Some("c1".into()));
    }

    #[test]
    fn messages_and_ids() {
        let text = message(super::super::Ended::Revoked, "x");
        let (why, id) = parse_message(text.as_bytes()).unwrap();
        assert_eq!((why, id), (super::super::Ended::Revoked, "x"));
        assert!(parse_message(b"gone x").is_none());
        assert!(plausible_id(&"a1".repeat(16)));
        assert!(!plausible_id("*"));
        assert!(!plausible_id(&"g".repeat(32)));
    }
}
