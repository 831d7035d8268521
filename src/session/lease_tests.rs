use proptest::prelude::*;

use super::*;

/// One step of a fleet of three replicas sharing a budget.
#[derive(Debug, Clone)]
enum Step {
    /// A replica needs this many bytes and draws.
    Draw(u32, u64),
    /// A replica spends up to this many of the bytes committed to it.
    Spend(u32, u64),
    /// A replica idles: it stops spending and gives back what it holds.
    Return(u32),
    /// A replica's reserve key expires while it lives (it could not refresh it).
    Expire(u32),
    /// A replica is killed: it may have spent all it held, and its reserve expires.
    Kill(u32),
}

fn step() -> impl Strategy<Value = Step> {
    let r = 0u32..3;
    prop_oneof![
        4 => (r.clone(), 0u64..5000).prop_map(|(r, n)| Step::Draw(r, n)),
        4 => (r.clone(), 0u64..5000).prop_map(|(r, n)| Step::Spend(r, n)),
        1 => r.clone().prop_map(Step::Return),
        1 => r.clone().prop_map(Step::Expire),
        1 => r.prop_map(Step::Kill),
    ]
}

proptest! {
    /// Whatever the interleaving, the bytes spent through every replica together never
    /// pass the budget, and what is committed and reserved never exceeds it.
    #[test]
    fn the_fleet_never_spends_past_the_budget(
        budget in 0u64..200_000,
        steps in proptest::collection::vec(step(), 0..300),
    ) {
        let mut ledger = Ledger::new(budget);
        let mut held = [0u64; 3];
        let mut spent = 0u64;
        for s in steps {
            match s {
                Step::Draw(r, n) => held[r as usize] += ledger.draw(r, n),
                Step::Spend(r, n) => {
                    let n = n.min(held[r as usize]);
                    held[r as usize] -= n;
                    spent += n;
                }
                Step::Return(r) => ledger.give_back(r, std::mem::take(&mut held[r as usize])),
                Step::Expire(r) => ledger.expire(r),
                Step::Kill(r) => {
                    spent += std::mem::take(&mut held[r as usize]);
                    ledger.expire(r);
                }
            }
            prop_assert!(spent <= budget, "spent {spent} of {budget}");
            let reserved: u64 = ledger.reserves.values().sum();
            prop_assert!(ledger.committed + reserved <= budget);
            prop_assert_eq!(ledger.committed, spent + held.iter().sum::<u64>());
        }
    }

    /// A draw gets what it needs whenever that much is free or reserved to it.
    #[test]
    fn a_draw_gets_what_it_needs_when_the_fleet_has_it(
        budget in 1u64..10_000_000,
        used in 0u64..10_000_000,
        own in 0u64..100_000,
        need in 0u64..100_000,
    ) {
        let free = budget.saturating_sub(used).saturating_sub(own);
        let d = plan(budget, free, own, need);
        prop_assert!(d.take <= free);
        prop_assert!(d.commit <= own + d.take);
        prop_assert!(d.commit >= need.min(free + own));
    }
}

#[test]
fn slices_shrink_as_the_budget_nears_its_end() {
    let budget = 100 << 20;
    let early = plan(budget, budget, 0, 0);
    let late = plan(budget, budget / 100, 0, 0);
    assert_eq!(early.commit, MAX_SLICE.min(budget / SLICE_DIVISOR));
    assert!(late.commit < early.commit / 10, "{late:?} vs {early:?}");
    assert!(late.commit >= floor(budget));
}

#[test]
fn a_dead_replicas_reserve_comes_back_and_its_slice_does_not() {
    let mut ledger = Ledger::new(1 << 20);
    let slice = ledger.draw(0, 0);
    let reserved = ledger.reserves[&0];
    assert!(reserved > 0);
    let free = ledger.free();
    ledger.expire(0);
    assert_eq!(ledger.free(), free + reserved);
    assert_eq!(
        ledger.committed, slice,
        "a dead replica may have spent its slice"
    );
}

#[test]
fn three_replicas_strand_little_at_the_end() {
    // Each replica spends what it is given until no draw gives anything; what the two
    // that did not notice the end still hold is stranded.
    let budget: u64 = 10 << 20;
    let mut ledger = Ledger::new(budget);
    let mut held = [0u64; 3];
    let mut spent = 0;
    for round in 0..100_000u32 {
        let r = (round % 3) as usize;
        if held[r] < 1000 {
            let got = ledger.draw(r as u32, 1000 - held[r]);
            held[r] += got;
            if got == 0 && held[r] == 0 {
                break;
            }
        }
        let n = held[r].min(1000);
        held[r] -= n;
        spent += n;
    }
    let stranded = budget - spent;
    assert!(stranded * 100 <= budget, "{stranded} of {budget} stranded");
}
