//! Memory given back once tunnels close (docs/ARCHITECTURE.md, "Design notes"). glibc's
//! allocator keeps the pages that freed allocations leave in its arenas for the next
//! ones, so a proxy that held thousands of tunnels stays at that peak long after they
//! closed. Every [`TRIM_EVERY`] the proxy asks it to return what is free (`malloc_trim`),
//! on a blocking thread, since the walk over the arenas takes their locks. Other
//! allocators return memory by themselves; there this does nothing.

use std::time::Duration;

/// How often free memory is given back: after a burst of tunnels closes, RSS is back
/// near idle within this.
pub(super) const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Give free memory back every `period`, for the life of the process.
pub(super) async fn trim_every(period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let _ = tokio::task::spawn_blocking(trim).await;
    }
}

/// Return the allocator's free pages to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() {
    // SAFETY: malloc_trim(3) takes a padding size and touches only the allocator's own
    // state, under its arena locks; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Another allocator (musl, another OS) keeps nothing this could give back.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
