//! The pending approvals' bookkeeping: sharing, the bounds, withdrawal, expiry.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::session::{MemoryStore, NewSession, Session};

fn asked(host: &str, port: u16) -> Wanted {
    Wanted {
        host: host.into(),
        port,
        method: "GET".into(),
        path: Some("/".repeat(300)),
        entry: format!("{host}:{port}"),
    }
}

fn session(store: &MemoryStore) -> Arc<Session> {
    store
        .create(NewSession {
            policy: crate::policy::RequestPolicy::Disabled,
            policy_json: serde_json::json!({}),
            label: None,
            idle_timeout: Duration::from_secs(60),
            ask: Some(Duration::from_secs(30)),
            canaries: Vec::new(),
            on_canary: None,
        })
        .0
}

const LONG: Duration = Duration::from_secs(30);

#[test]
fn one_destination_one_approval_per_session() {
    let approvals = Approvals::new(None);
    let store = MemoryStore::new(Arc::new(crate::metrics::Metrics::new()));
    let (s1, s2) = (session(&store), session(&store));
    let a = approvals
        .join(Some(&s1), asked("a.test", 443), LONG)
        .unwrap();
    let b = approvals
        .join(Some(&s1), asked("a.test", 443), LONG)
        .unwrap();
    assert_eq!(a.pending.id, b.pending.id);
    assert_eq!(a.pending.waiting(), 2);
    assert_eq!(a.pending.asked.path.as_ref().unwrap().len(), MAX_PATH);
    let other_port = approvals
        .join(Some(&s1), asked("a.test", 80), LONG)
        .unwrap();
    let other_session = approvals
        .join(Some(&s2), asked("a.test", 443), LONG)
        .unwrap();
    let sessionless = approvals.join(None, asked("a.test", 443), LONG).unwrap();
    let ids = [&other_port, &other_session, &sessionless].map(|w| w.pending.id.clone());
    assert!(ids.iter().all(|id| *id != a.pending.id));
    assert_eq!(approvals.list().len(), 4);
}

#[test]
fn the_bounds_per_session_and_in_all() {
    let approvals = Approvals::new(None);
    let store = MemoryStore::new(Arc::new(crate::metrics::Metrics::new()));
    let mut held = Vec::new();
    let one = session(&store);
    for i in 0..MAX_PENDING_PER_SESSION {
        held.push(
            approvals
                .join(Some(&one), asked(&format!("h{i}.test"), 443), LONG)
                .unwrap(),
        );
    }
    assert!(approvals
        .join(Some(&one), asked("more.test", 443), LONG)
        .is_err());
    // A destination already pending is joined, not counted again.
    assert!(approvals
        .join(Some(&one), asked("h0.test", 443), LONG)
        .is_ok());
    let sessions: Vec<_> = (0..MAX_PENDING / MAX_PENDING_PER_SESSION)
        .map(|_| session(&store))
        .collect();
    for s in &sessions[1..] {
        for i in 0..MAX_PENDING_PER_SESSION {
            held.push(
                approvals
                    .join(Some(s), asked(&format!("h{i}.test"), 443), LONG)
                    .unwrap(),
            );
        }
    }
    assert_eq!(approvals.list().len(), MAX_PENDING);
    let fresh = session(&store);
    assert!(
        approvals
            .join(Some(&fresh), asked("a.test", 443), LONG)
            .is_err(),
        "full in all"
    );
    drop(held);
    assert!(approvals.list().is_empty(), "nobody waits: withdrawn");
}

fn decided(outcome: Outcome) -> Decided {
    Decided {
        outcome,
        policies: None,
    }
}

#[tokio::test]
async fn a_decision_wakes_every_waiter_and_the_deadline_expires_the_rest() {
    let approvals = Arc::new(Approvals::new(Some(Duration::from_millis(50))));
    let w1 = approvals.join(None, asked("a.test", 443), LONG).unwrap();
    let w2 = approvals.join(None, asked("a.test", 443), LONG).unwrap();
    let id = w1.pending.id.clone();
    let released = approvals.decide(&id, decided(Outcome::AllowOnce)).unwrap();
    assert_eq!(released.len(), 2);
    assert_eq!(approvals.wait(&w1).await.outcome, Outcome::AllowOnce);
    assert_eq!(approvals.wait(&w2).await.outcome, Outcome::AllowOnce);
    assert!(
        approvals.decide(&id, decided(Outcome::Deny)).is_none(),
        "decided once"
    );

    let w3 = approvals
        .join(None, asked("b.test", 443), Duration::from_millis(50))
        .unwrap();
    assert_eq!(approvals.wait(&w3).await.outcome, Outcome::Expired);
    assert!(approvals.get(&w3.pending.id).is_none());
}

#[test]
fn every_held_request_is_listed_and_a_decision_releases_only_those() {
    let approvals = Approvals::new(None);
    let methods = ["GET", "POST", "PUT"];
    let waiters: Vec<_> = methods
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut a = asked("a.test", 443);
            a.method = m.to_string();
            a.path = Some(format!("/{i}"));
            approvals.join(None, a, LONG).unwrap()
        })
        .collect();
    let pending = approvals.get(&waiters[0].pending.id).unwrap();
    let listed: Vec<_> = pending
        .requests()
        .into_iter()
        .map(|h| (h.method, h.path.unwrap()))
        .collect();
    assert_eq!(
        listed,
        [("GET", "/0"), ("POST", "/1"), ("PUT", "/2")].map(|(m, p)| (m.into(), p.into()))
    );
    // One that gave up is no longer listed.
    let mut waiters = waiters;
    drop(waiters.remove(1));
    assert_eq!(pending.waiting(), 2);
    let released = approvals
        .decide(&pending.id, decided(Outcome::AllowOnce))
        .unwrap();
    assert_eq!(released.len(), 2);
    // After the decision: a new approval, not the decided one.
    let late = approvals.join(None, asked("a.test", 443), LONG).unwrap();
    assert_ne!(late.pending.id, pending.id);
    assert_eq!(late.pending.waiting(), 1);
}
