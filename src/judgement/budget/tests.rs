//! The meter and the allowance: granting never passes the budget, whoever asks.

use super::*;
use std::time::Duration;

use crate::policy::Level;
use crate::session::Session;

fn budget(bytes: u64) -> Option<Budget> {
    Some(Budget {
        bytes,
        level: Level::Org,
    })
}

#[test]
fn take_grants_what_fits_then_nothing() {
    let meter = Meter::default();
    assert_eq!(meter.take(60, Some(100)), 60);
    assert_eq!(meter.take(60, Some(100)), 40, "only what is left");
    assert_eq!(meter.take(1, Some(100)), 0);
    assert_eq!(meter.take(0, Some(100)), 0);
    assert_eq!(meter.spent(), 100);
    // A narrower budget on the same meter (a header's) is already spent.
    assert_eq!(meter.take(5, Some(50)), 0);
    // Without a budget every byte is counted, so a budget later sees them.
    assert_eq!(meter.take(5, None), 5);
    assert_eq!(meter.spent(), 105);
}

#[test]
fn take_whole_takes_all_or_nothing() {
    let meter = Meter::default();
    assert!(meter.take_whole(60, Some(100)));
    assert!(
        !meter.take_whole(41, Some(100)),
        "more than is left: nothing"
    );
    assert_eq!(meter.spent(), 60);
    assert!(meter.take_whole(40, Some(100)), "exactly what is left");
    assert!(!meter.take_whole(1, Some(100)));
    assert!(meter.take_whole(0, Some(100)), "nothing always fits");
    assert!(meter.take_whole(7, None), "no budget: counted all the same");
    assert_eq!(meter.spent(), 107);
}

#[test]
fn concurrent_takers_never_overspend() {
    const LIMIT: u64 = 1_000_003;
    for round in 0..20 {
        let allowance = Allowance::of(budget(LIMIT));
        let granted: u64 = std::thread::scope(|scope| {
            let takers: Vec<_> = (0..8)
                .map(|t| {
                    let allowance = allowance.clone();
                    scope.spawn(move || {
                        let mut got = 0u64;
                        // Uneven asks, so takers race at the edge of the budget.
                        for i in 0..20_000usize {
                            got += allowance.grant(1 + (i * 7 + t + round) % 97) as u64;
                        }
                        got
                    })
                })
                .collect();
            takers.into_iter().map(|t| t.join().unwrap()).sum()
        });
        assert_eq!(
            granted, LIMIT,
            "round {round}: exactly the budget, never more"
        );
        assert_eq!(allowance.remaining(), Some(0));
    }
}

#[test]
fn remaining_without_a_budget_is_none() {
    let a = Allowance::unlimited();
    assert_eq!(a.grant(10), 10);
    assert_eq!(a.remaining(), None);
    let b = Allowance::of(budget(10));
    assert_eq!(b.remaining(), Some(10));
}

#[test]
fn a_session_keeps_its_meter_and_sessions_do_not_share() {
    let budgets = Budgets::default();
    let hour = Duration::from_secs(3600);
    let (a, b) = (test_session(hour), test_session(hour));
    assert_eq!(budgets.allowance(Some(&a), budget(10)).grant(8), 8);
    assert_eq!(
        budgets.allowance(Some(&a), budget(10)).grant(8),
        2,
        "same meter"
    );
    assert_eq!(
        budgets.allowance(Some(&b), budget(10)).grant(8),
        8,
        "its own"
    );
    assert_eq!(
        budgets.allowance(None, budget(10)).grant(8),
        8,
        "the proxy's"
    );
    assert_eq!(budgets.allowance(None, budget(10)).grant(8), 2);
}

#[test]
fn a_held_session_is_never_pruned() {
    let budgets = Budgets::default();
    let kept = test_session(Duration::ZERO);
    budgets.allowance(Some(&kept), budget(10)).grant(10);
    // Many sessions that go away: the map is pruned, the held one stays spent.
    for _ in 0..500 {
        let gone = test_session(Duration::ZERO);
        budgets.allowance(Some(&gone), budget(10)).grant(1);
        std::thread::sleep(Duration::from_micros(10));
    }
    let left = budgets.sessions.lock().unwrap().by_id.len();
    assert!(left < 200, "sessions let go are pruned ({left} left)");
    assert_eq!(budgets.allowance(Some(&kept), budget(10)).grant(1), 0);
}

fn test_session(idle: Duration) -> Arc<Session> {
    let store = crate::session::MemoryStore::new(Arc::new(crate::metrics::Metrics::new()));
    let policy = crate::policy::RequestPolicy::Disabled;
    let new = crate::session::NewSession {
        policy,
        policy_json: serde_json::json!({}),
        label: None,
        idle_timeout: idle,
        ask: None,
        canaries: Vec::new(),
        on_canary: None,
    };
    store.create(new).0
}
