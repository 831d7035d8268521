//! The session-store interface: what the request path, the admin API and reload ask of
//! wherever sessions live (docs/scale-out.md). The methods return boxed futures so the
//! store can be a trait object chosen by `--session-store`; the memory store's are ready
//! at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::{AuthError, Session, SessionPolicy, View};
use crate::dlp::Canary;
use crate::policy::{OnTrip, RequestPolicy, Widening};

/// A boxed future that can move between tasks.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What `POST /v1/sessions` asks for, once its body is checked.
pub(crate) struct NewSession {
    pub policy: RequestPolicy,
    /// The `network_policy` as the client sent it.
    pub policy_json: serde_json::Value,
    pub label: Option<String>,
    pub idle_timeout: Duration,
    /// `"on_deny": "ask"` with its timeout (docs/reference/approvals.md).
    pub ask: Option<Duration>,
    /// Its own canaries (`"canaries"`, docs/reference/dlp.md), ids `c1`, `c2`, ...
    pub canaries: Vec<Canary>,
    /// `"on_canary"`: what a tripped canary does; `None` follows the organization.
    pub on_canary: Option<OnTrip>,
}

/// The store could not be reached or did not answer in time.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the session store is unavailable: {0}")]
pub struct StoreError(pub String);

/// Why a session was not created.
#[derive(Debug)]
pub(crate) enum CreateError {
    /// Its policy widens the policies in force (422).
    Widening(Widening),
    /// The store is unavailable (503).
    Store(StoreError),
}

/// Checks a session's policy against the policies in force: `Err` names what widens.
pub(crate) type Admit<'a> = &'a (dyn Fn(&RequestPolicy) -> Result<(), Widening> + Sync);

/// The sessions a reload ended, each with the entries that were no longer covered.
pub(crate) type Revoked = Vec<(String, Vec<String>)>;

/// Where sessions live.
pub(crate) trait Store: Send + Sync {
    /// The session `id` if `token` is its token; the request is traffic for it.
    fn verify<'a>(
        &'a self,
        id: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Arc<Session>, AuthError>>;

    /// Create a session if `admit` accepts its policy. Returns what the `201` shows and
    /// the token (the only time it exists outside the client).
    fn create<'a>(
        &'a self,
        new: NewSession,
        admit: Admit<'a>,
    ) -> BoxFuture<'a, Result<(View, String), CreateError>>;

    /// The live session `id`, without its token.
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<View>, StoreError>>;

    /// Every live session, oldest first.
    fn list(&self) -> BoxFuture<'_, Result<Vec<View>, StoreError>>;

    /// End the session `id` now (DELETE): its tunnels close wherever they are. False
    /// when there is no such session.
    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// An approved `allow-session` (docs/reference/approvals.md): put `policy` in force
    /// for `session` from now on; with a shared store, on every replica within the time
    /// a replica trusts its copy. A session that has ended stays ended.
    fn set_policy<'a>(
        &'a self,
        session: &'a Arc<Session>,
        policy: SessionPolicy,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// A reload: end every session whose policy `uncovered` names entries for (with the
    /// entries), and run `swap` to put the new policies in force, so that no session is
    /// created against the policies being replaced where the store can promise it.
    fn revoke<'a>(
        &'a self,
        uncovered: &'a (dyn Fn(&RequestPolicy) -> Option<Vec<String>> + Sync),
        swap: Box<dyn FnOnce() + Send + 'a>,
    ) -> BoxFuture<'a, Revoked>;

    /// Periodic upkeep, a few times a second: idle expiry, and for a shared store,
    /// telling it of traffic and watching its health.
    fn tick(&self) -> BoxFuture<'_, ()>;

    /// False while the store cannot be reached (`/healthz` answers 503).
    fn available(&self) -> bool;
}
