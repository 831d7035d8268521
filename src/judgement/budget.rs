//! Upload budgets on the wire (docs/reference/policy-files.md, "Upload budget"): what
//! each session (or the proxy, for requests without one) has sent upstream, and the
//! [`Allowance`] an approved request or tunnel draws its bytes from.
//!
//! Bytes are granted after they are read from the client and before they are written
//! upstream, so whatever does not fit is never sent: a request head is taken whole or
//! refused, a tunnel relays exactly what fits and closes, a request body is cut (the HTTP
//! side of that is `crate::proxy::budgeted`). Granting is one atomic operation on the
//! meter the session's requests and tunnels share, so concurrent takers never overspend.
//!
//! The meters are keyed by session id, here rather than in the session store, so the
//! store can change (or live elsewhere) without losing what a session has spent
//! ([`budgets`]). With a shared store a session's bytes come instead from what this
//! replica holds of its fleet-wide budget (docs/scale-out.md, "One upload budget").

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::ask::{Ask, What};
use super::refusal::Refusal;
use crate::policy::{Budget, Reason, Target};
use crate::session::{Held, Leases, StoreError};

/// The bytes one session (or the proxy) has sent upstream.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    spent: AtomicU64,
}

impl Meter {
    /// Take up to `want` bytes under `limit` (`None`: no limit, every byte is counted);
    /// returns how many were granted. Never lets the total pass `limit`.
    pub(crate) fn take(&self, want: u64, limit: Option<u64>) -> u64 {
        let Some(limit) = limit else {
            self.spent.fetch_add(want, Ordering::Relaxed);
            return want;
        };
        let mut spent = self.spent.load(Ordering::Relaxed);
        loop {
            let grant = want.min(limit.saturating_sub(spent));
            if grant == 0 {
                return 0;
            }
            match self.spent.compare_exchange_weak(
                spent,
                spent + grant,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return grant,
                Err(now) => spent = now,
            }
        }
    }

    /// Take all of `want` under `limit`, or nothing: a request head is sent whole or
    /// not at all. Returns whether it was taken.
    pub(crate) fn take_whole(&self, want: u64, limit: Option<u64>) -> bool {
        let Some(limit) = limit else {
            self.spent.fetch_add(want, Ordering::Relaxed);
            return true;
        };
        let mut spent = self.spent.load(Ordering::Relaxed);
        loop {
            if want > limit.saturating_sub(spent) {
                return false;
            }
            match self.spent.compare_exchange_weak(
                spent,
                spent + want,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => spent = now,
            }
        }
    }

    pub(crate) fn spent(&self) -> u64 {
        self.spent.load(Ordering::Relaxed)
    }
}

/// What an approved request or tunnel may send upstream: its session's (or the
/// proxy's) meter, under the budget in force for it.
#[derive(Clone)]
pub(crate) struct Allowance {
    meter: Arc<Meter>,
    budget: Option<Budget>,
    /// With a shared store, a session's bytes come from what this replica holds of its
    /// fleet-wide budget (docs/scale-out.md, "One upload budget"), not from `meter`.
    fleet: Option<Fleet>,
}

#[derive(Clone)]
struct Fleet {
    id: Arc<str>,
    held: Arc<Held>,
    leases: Arc<dyn Leases>,
}

impl std::fmt::Debug for Allowance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allowance")
            .field("budget", &self.budget)
            .field("fleet", &self.fleet.is_some())
            .finish()
    }
}

impl Allowance {
    /// No budget, counted on a meter of its own.
    #[cfg(test)]
    pub(crate) fn unlimited() -> Allowance {
        Allowance {
            meter: Arc::default(),
            budget: None,
            fleet: None,
        }
    }

    /// An allowance of `budget` on a fresh meter.
    #[cfg(test)]
    pub(crate) fn of(budget: Option<Budget>) -> Allowance {
        Allowance {
            meter: Arc::default(),
            budget,
            fleet: None,
        }
    }

    /// Grant up to `want` bytes: all of them without a budget, else what still fits.
    pub(crate) fn grant(&self, want: usize) -> usize {
        match (&self.fleet, self.budget) {
            (Some(f), Some(_)) => f.held.take(want as u64) as usize,
            (Some(f), None) => {
                f.held.count(want as u64);
                want
            }
            (None, budget) => self.meter.take(want as u64, budget.map(|b| b.bytes)) as usize,
        }
    }

    /// Grant all of `want` bytes or none (see [`Meter::take_whole`]).
    pub(crate) fn grant_whole(&self, want: u64) -> bool {
        match (&self.fleet, self.budget) {
            (Some(f), Some(_)) => f.held.take_whole(want),
            (Some(f), None) => {
                f.held.count(want);
                true
            }
            (None, budget) => self.meter.take_whole(want, budget.map(|b| b.bytes)),
        }
    }

    /// Whether the bytes come from a fleet-wide budget, drawn from the store.
    pub(crate) fn leased(&self) -> bool {
        self.fleet.is_some() && self.budget.is_some()
    }

    /// With a fleet-wide budget, make this replica hold at least `need` bytes when the
    /// fleet has them: one draw from the store when it holds less. Without one, or
    /// holding enough already, nothing to do.
    pub(crate) async fn fill(&self, need: u64) -> Result<(), StoreError> {
        match (&self.fleet, self.budget) {
            (Some(f), Some(b)) if f.held.avail() < need.max(1) => {
                f.leases.fill(&f.id, &f.held, b.bytes, need).await
            }
            _ => Ok(()),
        }
    }

    /// Grant up to `want` bytes, drawing from the store first when this replica holds
    /// fewer (a tunnel or a body that outlasts its holding). What the store cannot give
    /// is not granted.
    pub(crate) async fn grant_filled(&self, want: usize) -> usize {
        let granted = self.grant(want);
        if granted == want || !self.leased() {
            return granted;
        }
        let short = (want - granted) as u64;
        if self.fill(short).await.is_err() {
            return granted;
        }
        granted + self.grant(want - granted)
    }

    /// The budget in force, if any.
    pub(crate) fn budget(&self) -> Option<Budget> {
        self.budget
    }

    /// Bytes left under the budget; `None` without one.
    pub(crate) fn remaining(&self) -> Option<u64> {
        let budget = self.budget?;
        if let Some(f) = &self.fleet {
            return Some(f.held.avail());
        }
        Some(budget.bytes.saturating_sub(self.meter.spent()))
    }
}

/// The error a relay or a request body ends with when the budget is spent: the
/// bytes that fit went upstream, the rest did not.
#[derive(Debug)]
pub(crate) struct Spent;

impl std::fmt::Display for Spent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the upload budget is spent")
    }
}

impl std::error::Error for Spent {}

/// [`Spent`] as an I/O error.
pub(crate) fn spent() -> io::Error {
    io::Error::other(Spent)
}

/// Whether `e` (or what caused it) is [`Spent`].
pub(crate) fn is_spent(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(e) = cause {
        if e.is::<Spent>() {
            return true;
        }
        if let Some(inner) = e.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
            if inner.is::<Spent>() {
                return true;
            }
        }
        cause = e.source();
    }
    false
}

/// Step 8 of the order of judgement (docs/reference/answers.md): refuse, before
/// anything is sent (and before any lookup), a request whose declared body would go
/// past what is left, a request or tunnel when nothing is left. What a request's head
/// costs is known only once it is built for upstream: `crate::proxy::budgeted::admit_head`
/// takes it then.
pub(crate) fn admit(ask: &Ask<'_>, allowance: &Allowance) -> Result<(), Refusal> {
    let (Some(budget), Some(left)) = (allowance.budget(), allowance.remaining()) else {
        return Ok(());
    };
    let declared = match &ask.what {
        What::Request(r) => r.declared_length,
        What::Tunnel | What::Name => None,
    };
    let refused = if matches!(ask.what, What::Tunnel) {
        (left == 0).then(|| "the upload budget is spent: no new tunnel opens".to_string())
    } else if let Some(n) = declared.filter(|n| *n > left) {
        Some(format!(
            "the request body ({n} bytes) is more than the {left} bytes left of the upload budget"
        ))
    } else {
        (left == 0).then(|| "the upload budget is spent: no request is sent".to_string())
    };
    match refused {
        None => Ok(()),
        Some(why) => Err(refusal(&ask.target, budget).with_detail(why)),
    }
}

/// Room left for what building the head for upstream adds to the head as received (a
/// `Host` field, an absolute target made origin-form usually shrinks it).
const HEAD_MARGIN: u64 = 512;

/// With a fleet-wide budget, draw what the request may need before it is admitted: its
/// declared body and its head as received, with [`HEAD_MARGIN`] (docs/scale-out.md, "One
/// upload budget"). A store that cannot be reached when this replica holds too little
/// is 503 `session_store_unavailable`: what it holds is spent, never more.
pub(crate) async fn fill(
    ask: &Ask<'_>,
    allowance: &Allowance,
    max_head: usize,
) -> Result<(), Refusal> {
    if !allowance.leased() {
        return Ok(());
    }
    let body = match &ask.what {
        What::Request(r) => r.declared_length.unwrap_or(0),
        What::Tunnel | What::Name => 0,
    };
    // Holding enough for any head (at most `--max-header-bytes`): nothing to add up.
    let most = body.saturating_add(max_head as u64 + HEAD_MARGIN);
    if allowance.remaining().unwrap_or(0) >= most {
        return Ok(());
    }
    let need = body.saturating_add(ask.head_bytes as u64 + HEAD_MARGIN);
    allowance.fill(need).await.map_err(|_| {
        Refusal::auth_required(crate::session::AuthError::StoreUnavailable, &ask.target)
            .with_detail("the session store cannot be reached and this replica holds too little of the upload budget")
    })
}

/// The refusal `budget` makes: `upload_budget_exceeded`, its rule and level.
pub(crate) fn refusal(target: &Target, budget: Budget) -> Refusal {
    let mut refusal = Refusal::new(
        Reason::UploadBudgetExceeded,
        target.host.to_string(),
        target.port,
    );
    refusal.rule = Some(budget.rule().into());
    refusal.level = Some(budget.level);
    refusal
}

mod budgets;
pub(crate) use budgets::Budgets;

#[cfg(test)]
mod tests;
