//! The refusals the DNS listener audited a moment ago. A stub resolver asks for `A` and
//! `AAAA` of one name at once, from one socket, and may repeat itself: those queries are
//! one attempt, and make one audit record (each is still counted in the metrics). A
//! query from another socket, for another name, or after [`WINDOW`] is recorded again.
//! A name that carries a canary or a secret is recorded as `[redacted]`, so there the
//! canary or detector that found it tells one attempt from another.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::judgement::refusal::Refusal;
use crate::policy::Reason;

/// How long a refusal stands for the same question from the same socket.
pub(crate) const WINDOW: Duration = Duration::from_secs(2);

/// At most this many refusals are remembered; when that many are younger than
/// [`WINDOW`], every refusal is recorded (more records, never fewer).
pub(crate) const CAPACITY: usize = 4096;

/// The client's socket, the name, the reason, whether the name was answered (a secret
/// only reported, `egress.flagged`) or refused, and the canary or detector found.
type Key = (SocketAddr, String, Reason, bool, Option<Arc<str>>);

/// Refusals recorded in the last [`WINDOW`], by client socket, name and reason.
#[derive(Default)]
pub(crate) struct Recent {
    seen: Mutex<HashMap<Key, Instant>>,
}

impl Recent {
    pub(crate) fn new() -> Recent {
        Recent::default()
    }

    /// Whether `refusal` for `client` is to be recorded: false when the same one was
    /// recorded less than [`WINDOW`] ago.
    pub(crate) fn first(&self, client: SocketAddr, refusal: &Refusal) -> bool {
        self.first_at(client, refusal, false, Instant::now())
    }

    /// [`Recent::first`] for a name answered and recorded `egress.flagged`: its own
    /// record, apart from a refusal for the same reason.
    pub(crate) fn first_flagged(&self, client: SocketAddr, refusal: &Refusal) -> bool {
        self.first_at(client, refusal, true, Instant::now())
    }

    fn first_at(&self, client: SocketAddr, refusal: &Refusal, flagged: bool, now: Instant) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let found = refusal.dlp.as_ref().map(|hit| hit.id.clone());
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
        assert!(recent.first_at(a, &evil, false, t), "first");
        assert!(
            !recent.first_at(a, &evil, false, t + Duration::from_millis(5)),
            "AAAA"
        );
        assert!(recent.first_at(b, &evil, false, t), "another socket");
        let other = refusal("other.test", Reason::NotInOrgAllowlist);
        assert!(recent.first_at(a, &other, false, t), "another name");
        let invalid = refusal("evil.test", Reason::InvalidHost);
        assert!(recent.first_at(a, &invalid, false, t), "another reason");
        assert!(
            recent.first_at(a, &evil, false, t + WINDOW),
            "after the window"
        );
        assert!(recent.first_at(a, &evil, true, t), "answered, not refused");
    }

    /// Names that carry a secret are all `[redacted]`: another canary or detector is
    /// another attempt, the same one again (`AAAA`) is not.
    #[test]
    fn a_redacted_name_is_told_apart_by_what_was_found_in_it() {
        use crate::dlp::{By, Encoding, FoundIn, Hit};
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
        let recent = Recent::new();
        let a: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let t = Instant::now();
        assert!(recent.first_at(a, &found("github_token"), false, t));
        assert!(
            !recent.first_at(a, &found("github_token"), false, t),
            "AAAA"
        );
        assert!(
            recent.first_at(a, &found("aws_access_key_id"), false, t),
            "another detector"
        );
    }

    #[test]
    fn a_full_table_records_everything() {
        let recent = Recent::new();
        let t = Instant::now();
        let evil = refusal("evil.test", Reason::NotInOrgAllowlist);
        for port in 0..CAPACITY as u16 {
            assert!(recent.first_at(SocketAddr::from(([127, 0, 0, 1], port)), &evil, false, t));
        }
        let last = SocketAddr::from(([127, 0, 0, 2], 1));
        assert!(recent.first_at(last, &evil, false, t));
        assert!(
            recent.first_at(last, &evil, false, t),
            "not remembered: recorded again"
        );
        let later = t + WINDOW;
        assert!(
            recent.first_at(last, &evil, false, later),
            "old ones dropped"
        );
        assert!(
            !recent.first_at(last, &evil, false, later),
            "remembered again"
        );
    }
}
