//! The request-head deadline of the HTTP/1.1 listener (`--header-timeout` on a kept-alive
//! connection, docs/reference/command-line.md), as a timer for hyper.
//!
//! hyper starts a sleep each time it waits for a request head and drops it once the
//! head is read: on a kept-alive connection, one per request. With tokio's timer each
//! was a registration in the runtime's timer wheel and its removal, about 1,500
//! instructions a request (`benches/instructions.sh`). Here each worker thread keeps its
//! deadlines in a queue ordered by time, and one task of its own (the ticker) sleeps on
//! tokio's timer until the earliest of them: arming a deadline is a push, dropping one
//! frees its slot. Every deadline of one server is `now + header_timeout`, so a new one
//! goes at the back; the queue stays ordered for any other.
//!
//! A deadline fires when the ticker reaches it, as tokio's would. A deadline armed on a
//! thread is only ever polled and dropped there (a worker's connections never move);
//! one polled elsewhere is armed again there, and its first slot stays taken.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use hyper::rt::{Sleep, Timer};

/// hyper's timer for request heads: [`Deadline`]s on this thread's queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeadTimer;

impl Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        self.sleep_until(now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        Box::pin(Deadline {
            at: deadline,
            armed: None,
        })
    }

    fn now(&self) -> Instant {
        now()
    }
}

/// Now by tokio's clock, the one the ticker sleeps on (the same as the system's, but
/// in tests that pause time).
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// A sleep until `at`, armed on its thread's queue when first polled.
struct Deadline {
    at: Instant,
    /// The queue it is on (the thread's), its slot there and the slot's generation.
    armed: Option<Armed>,
}

#[derive(Clone, Copy)]
struct Armed {
    queue: u64,
    slot: usize,
    generation: u64,
}

impl Sleep for Deadline {}

impl Future for Deadline {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let at = self.at;
        let armed = self.armed;
        QUEUE.with(|queue| {
            let mut queue = queue.borrow_mut();
            match armed {
                Some(armed) if armed.queue == queue.id => queue.poll(armed, cx.waker()),
                // First polled, or polled on another thread than it was armed on: armed
                // on this thread's queue (a deadline already past fires at the ticker's
                // next turn).
                _ => {
                    self.armed = Some(queue.arm(at, cx.waker()));
                    Poll::Pending
                }
            }
        })
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if let Some(armed) = self.armed {
            // `try_with`: a thread being torn down has no queue left to free a slot in.
            let _ = QUEUE.try_with(|queue| {
                if let Ok(mut queue) = queue.try_borrow_mut() {
                    if queue.id == armed.queue {
                        queue.disarm(armed);
                    }
                }
            });
        }
    }
}

thread_local! {
    static QUEUE: RefCell<Queue> = RefCell::new(Queue::new());
}

/// One thread's deadlines.
struct Queue {
    /// Tells this thread's queue from another's.
    id: u64,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// (when, slot, generation), earliest first; an entry whose slot has moved on to
    /// another generation was disarmed and is skipped.
    due: VecDeque<(Instant, usize, u64)>,
    /// Entries of `due` disarmed and not yet reached.
    stale: usize,
    next_generation: u64,
    /// The ticker's waker, and whether a ticker runs on this thread.
    ticker: Option<Waker>,
    ticking: bool,
}

struct Slot {
    generation: u64,
    waker: Option<Waker>,
    fired: bool,
}

impl Queue {
    fn new() -> Queue {
        static IDS: AtomicU64 = AtomicU64::new(1);
        Queue {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            slots: Vec::new(),
            free: Vec::new(),
            due: VecDeque::new(),
            stale: 0,
            next_generation: 1,
            ticker: None,
            ticking: false,
        }
    }

    fn arm(&mut self, at: Instant, waker: &Waker) -> Armed {
        let generation = self.next_generation;
        self.next_generation += 1;
        let slot = Slot {
            generation,
            waker: Some(waker.clone()),
            fired: false,
        };
        let index = match self.free.pop() {
            Some(i) => {
                self.slots[i] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        let earliest = self.due.front().is_none_or(|&(first, ..)| at < first);
        match self.due.back() {
            Some(&(last, ..)) if at < last => {
                let i = self.due.partition_point(|&(when, ..)| when <= at);
                self.due.insert(i, (at, index, generation));
            }
            _ => self.due.push_back((at, index, generation)),
        }
        if !self.ticking {
            self.ticking = true;
            tokio::spawn(tick());
        } else if earliest {
            // The ticker sleeps until a later deadline, or none: it looks again.
            if let Some(ticker) = &self.ticker {
                ticker.wake_by_ref();
            }
        }
        Armed {
            queue: self.id,
            slot: index,
            generation,
        }
    }

    fn poll(&mut self, armed: Armed, waker: &Waker) -> Poll<()> {
        let slot = &mut self.slots[armed.slot];
        if slot.generation != armed.generation || slot.fired {
            return Poll::Ready(());
        }
        match &slot.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => slot.waker = Some(waker.clone()),
        }
        Poll::Pending
    }

    fn disarm(&mut self, armed: Armed) {
        let slot = &mut self.slots[armed.slot];
        if slot.generation != armed.generation {
            return;
        }
        if !slot.fired {
            // Its entry is still in `due`, to be skipped.
            self.stale += 1;
        }
        slot.generation = 0;
        slot.waker = None;
        self.free.push(armed.slot);
        // Most deadlines are dropped long before they are due: keep the skipped entries
        // from piling up (at most twice the live ones).
        if self.stale > 1024 && self.stale > 2 * (self.due.len() - self.stale) {
            let slots = &self.slots;
            self.due.retain(|&(_, i, g)| slots[i].generation == g);
            self.stale = 0;
        }
    }

    /// Fire every deadline due by `now`, returning their wakers; the earliest left.
    fn fire(&mut self, now: Instant, woken: &mut Vec<Waker>) -> Option<Instant> {
        while let Some(&(at, i, generation)) = self.due.front() {
            if at > now {
                return Some(at);
            }
            self.due.pop_front();
            let slot = &mut self.slots[i];
            if slot.generation == generation {
                slot.fired = true;
                woken.extend(slot.waker.take());
            } else {
                self.stale = self.stale.saturating_sub(1);
            }
        }
        None
    }
}

/// Clears the thread's `ticking` when its ticker ends (its runtime shut down), so the
/// next deadline armed there starts another.
struct Ticking;

impl Drop for Ticking {
    fn drop(&mut self) {
        let _ = QUEUE.try_with(|queue| {
            if let Ok(mut queue) = queue.try_borrow_mut() {
                queue.ticking = false;
                queue.ticker = None;
            }
        });
    }
}

/// The thread's ticker: fire what is due, then sleep on tokio's timer until the
/// earliest deadline left, or until a new earliest one is armed.
async fn tick() {
    let _ticking = Ticking;
    let mut sleep = Box::pin(tokio::time::sleep(Duration::ZERO));
    let mut woken = Vec::new();
    std::future::poll_fn(|cx| loop {
        let next = QUEUE.with(|queue| {
            let mut queue = queue.borrow_mut();
            let next = queue.fire(now(), &mut woken);
            match &queue.ticker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => queue.ticker = Some(cx.waker().clone()),
            }
            next
        });
        // Woken outside the borrow: a waker may run code that arms a deadline.
        woken.drain(..).for_each(Waker::wake);
        let Some(next) = next else {
            return Poll::<()>::Pending;
        };
        let next = tokio::time::Instant::from_std(next);
        if sleep.deadline() != next {
            sleep.as_mut().reset(next);
        }
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deadline fires at its time, not before; one dropped first never wakes anyone;
    /// one armed earlier than those queued fires first.
    #[tokio::test(start_paused = true)]
    async fn deadlines_fire_in_order_and_dropped_ones_never() {
        let start = now();
        let late = HeadTimer.sleep(Duration::from_secs(10));
        let dropped = HeadTimer.sleep(Duration::from_secs(5));
        let early = HeadTimer.sleep(Duration::from_secs(2));
        let late = tokio::spawn(async move {
            late.await;
            now() - start
        });
        let mut dropped = tokio::spawn(dropped);
        let early = tokio::spawn(async move {
            early.await;
            now() - start
        });
        tokio::task::yield_now().await;
        dropped.abort();
        assert!((&mut dropped).await.unwrap_err().is_cancelled());
        let early = early.await.unwrap();
        let late = late.await.unwrap();
        assert!(early >= Duration::from_secs(2) && early < Duration::from_secs(3));
        assert!(late >= Duration::from_secs(10) && late < Duration::from_secs(11));
    }

    /// Disarmed entries do not pile up: past the bound they are swept.
    #[tokio::test(start_paused = true)]
    async fn disarmed_entries_are_swept() {
        for _ in 0..5_000 {
            let mut sleep = HeadTimer.sleep(Duration::from_secs(60));
            let waker = futures_util::task::noop_waker();
            let mut cx = Context::from_waker(&waker);
            assert!(sleep.as_mut().poll(&mut cx).is_pending());
        }
        let (due, live) = QUEUE.with(|q| {
            let q = q.borrow();
            (q.due.len(), q.due.len() - q.stale)
        });
        assert_eq!(live, 0);
        assert!(due <= 2_100, "{due} entries left");
    }
}
