//! A future polled only when it asked to be.
//!
//! A connection waits on two things at once: hyper's work and the server's phase (a
//! shutdown). `select!` polls both each time the connection's task wakes, several times
//! a request, and a poll of a `watch` receiver's wait takes its notifier's lock: about
//! 450 instructions a request (`benches/instructions.sh`). [`Woken`] gives the future a
//! waker of its own that sets a flag, and polls it again only once that flag is set.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// `inner`, polled on the first poll and then only after it woke its waker.
pub(crate) struct Woken<F> {
    inner: Pin<Box<F>>,
    flag: Arc<Flag>,
    waker: Waker,
}

struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F: Future> Woken<F> {
    pub(crate) fn new(inner: F) -> Woken<F> {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Woken {
            inner: Box::pin(inner),
            waker: Waker::from(flag.clone()),
            flag,
        }
    }
}

impl<F: Future> Future for Woken<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // The task's waker first: a wake after the flag is read still reaches it.
        this.flag.task.register(cx.waker());
        if !this.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.inner
            .as_mut()
            .poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// It completes when its future does, woken from another task, and is not polled
    /// in between.
    #[tokio::test]
    async fn it_is_polled_again_only_once_its_future_woke() {
        let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (tx, mut rx) = tokio::sync::watch::channel(false);
        rx.mark_unchanged();
        let counted = polls.clone();
        let mut changed = Box::pin(async move { drop(rx.changed().await) });
        let waited = Woken::new(std::future::poll_fn(move |cx| {
            counted.fetch_add(1, Ordering::Relaxed);
            changed.as_mut().poll(cx)
        }));
        let mut waited = std::pin::pin!(waited);
        let noop = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&noop);
        for _ in 0..10 {
            assert!(waited.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::Relaxed), 1, "polled once, then left");
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            tx.send_replace(true);
            tx.closed().await;
        });
        tokio::time::timeout(Duration::from_secs(5), waited)
            .await
            .expect("woken when the value changed");
        assert_eq!(polls.load(Ordering::Relaxed), 2);
    }
}
