//! The refusals the DNS listener audited a moment ago. A stub resolver asks for `A` and
//! `AAAA` of one name at once, from one socket, and may repeat itself: those queries are
//! one attempt, and make one audit record (each is still counted in the metrics). A
//! query from another socket, for another name, or after [`WINDOW`] is recorded again.
//! A name that carries a canary or a secret is recorded as `[redacted]`, so there a
//! keyed hash of the name asked (never the name) and the canary or detector found tell
//! one attempt from another.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::op::Message;

use crate::judgement::refusal::Refusal;
use crate::policy::Reason;

/// How long a refusal stands for the same question from the same socket.
pub(crate) const WINDOW: Duration = Duration::from_secs(2);

/// At most this many refusals are remembered; when that many are younger than
/// [`WINDOW`], every refusal is recorded (more records, never fewer).
pub(crate) const CAPACITY: usize = 4096;

/// The client's socket, the name, the reason, whether the name was answered (a secret
/// only reported, `egress.flagged`) or refused, and, for a name recorded as
/// `[redacted]`, the canary or detector found and the hash of the name asked.
type Key = (SocketAddr, String, Reason, bool, Option<(Arc<str>, u64)>);

/// Refusals recorded in the last [`WINDOW`], by client socket, name and reason.
#[derive(Default)]
pub(crate) struct Recent {
    seen: Mutex<HashMap<Key, Instant>>,
    /// Keys the hash of a redacted name, at random for the process.
    names: RandomState,
}

impl Recent {
    pub(crate) fn new() -> Recent {
        Recent::default()
    }

    /// Whether `refusal` for `client`'s DNS message `query` is to be recorded: false when
    /// the same one was recorded less than [`WINDOW`] ago.
    pub(crate) fn first(&self, client: SocketAddr, refusal: &Refusal, query: &[u8]) -> bool {
        let found = self.found(refusal, query);
        self.first_at(client, refusal, false, found, Instant::now())
    }

    /// [`Recent::first`] for a name answered and recorded `egress.flagged`: its own
    /// record, apart from a refusal for the same reason.
    pub(crate) fn first_flagged(
        &self,
        client: SocketAddr,
        refusal: &Refusal,
        query: &[u8],
    ) -> bool {
        let found = self.found(refusal, query);
        self.first_at(client, refusal, true, found, Instant::now())
    }

    /// For a refusal with a canary or secret found (its host `[redacted]`): what was found
    /// and the hash of the name asked, lower-cased, so that `A` and `AAAA` agree.
    fn found(&self, refusal: &Refusal, query: &[u8]) -> Option<(Arc<str>, u64)> {
        let hit = refusal.dlp.as_ref()?;
        let name = Message::from_vec(query)
            .ok()
            .and_then(|m| m.queries().first().map(|q| q.name().to_lowercase()));
        let hash = name.map_or(0, |name| self.names.hash_one(name.to_ascii()));
        Some((hit.id.clone(), hash))
    }

    fn first_at(
        &self,
        client: SocketAddr,
        refusal: &Refusal,
        flagged: bool,
        found: Option<(Arc<str>, u64)>,
        now: Instant,
    ) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let key = (client, refusal.host.clone(), refusal.reason, flagged, found);
        if let Some(at) = seen.get(&key) {
            if now.duration_since(*at) < WINDOW {
                return false;
            }
        }
        if seen.len() >= CAPACITY {
            seen.retain(|_, at| now.duration_since(*at) < WINDOW);
            if seen.len() >= CAPACITY {
                return true;
            }
        }
        seen.insert(key, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(host: &str, reason: Reason) -> Refusal {
        Refusal::new(reason, host.to_string(), 0)
    }

    #[test]
    fn a_repeat_within_the_window_is_not_recorded_again() {
        let recent = Recent::new();
        let a: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:5001".parse().unwrap();
        let t = Instant::now();
        let evil = refusal("evil.test", Reason::NotInOrgAllowlist);
        assert!(recent.first_at(a, &evil, false, None, t), "first");
        assert!(
            !recent.first_at(a, &evil, false, None, t + Duration::from_millis(5)),
            "AAAA"
        );
        assert!(recent.first_at(b, &evil, false, None, t), "another socket");
        let other = refusal("other.test", Reason::NotInOrgAllowlist);
        assert!(recent.first_at(a, &other, false, None, t), "another name");
        let invalid = refusal("evil.test", Reason::InvalidHost);
        assert!(
            recent.first_at(a, &invalid, false, None, t),
            "another reason"
        );
        assert!(
            recent.first_at(a, &evil, false, None, t + WINDOW),
            "after the window"
        );
        assert!(
            recent.first_at(a, &evil, true, None, t),
            "answered, not refused"
        );
    }

    /// Names that carry a secret are all `[redacted]`: another name, or another canary
    /// or detector, is another attempt; the same name again (`AAAA`, or in other case)
    /// is not.
    #[test]
    fn a_redacted_name_is_told_apart_by_the_name_asked_and_what_was_found() {
        use crate::dlp::{By, Encoding, FoundIn, Hit};
        use hickory_proto::op::Query;
        use hickory_proto::rr::{Name, RecordType};
        let found = |id: &str| {
            let mut r = refusal(crate::judgement::refusal::REDACTED, Reason::SecretDetected);
            r.dlp = Some(Box::new(Hit {
                id: id.into(),
                kind: "detector".into(),
                encoding: Encoding::Plain,
                found_in: FoundIn::Dns,
                by: By::Secret,
            }));
            r
        };
        let query = |name: &str, kind| {
            let mut m = Message::new();
            m.add_query(Query::query(Name::from_ascii(name).unwrap(), kind));
            m.to_vec().unwrap()
        };
        let recent = Recent::new();
        let a: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let github = found("github_token");
        assert!(recent.first(a, &github, &query("one.evil.test.", RecordType::A)));
        assert!(
            !recent.first(a, &github, &query("ONE.evil.test.", RecordType::AAAA)),
            "AAAA of the same name"
        );
        assert!(
            recent.first(a, &github, &query("two.evil.test.", RecordType::A)),
            "another name, the same detector"
        );
        assert!(
            recent.first(
                a,
                &found("aws_access_key_id"),
                &query("one.evil.test.", RecordType::A)
            ),
            "another detector"
        );
    }

    #[test]
    fn a_full_table_records_everything() {
        let recent = Recent::new();
        let t = Instant::now();
        let evil = refusal("evil.test", Reason::NotInOrgAllowlist);
        for port in 0..CAPACITY as u16 {
            assert!(recent.first_at(
                SocketAddr::from(([127, 0, 0, 1], port)),
                &evil,
                false,
                None,
                t
            ));
        }
        let last = SocketAddr::from(([127, 0, 0, 2], 1));
        assert!(recent.first_at(last, &evil, false, None, t));
        assert!(
            recent.first_at(last, &evil, false, None, t),
            "not remembered: recorded again"
        );
        let later = t + WINDOW;
        assert!(
            recent.first_at(last, &evil, false, None, later),
            "old ones dropped"
        );
        assert!(
            !recent.first_at(last, &evil, false, None, later),
            "remembered again"
        );
    }
}
