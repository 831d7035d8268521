//! The canaries' step of the judgement (docs/reference/dlp.md), first of all: a
//! question whose target name, or whatever else its listener read from the client (a
//! URL, a header field), carries a canary in any of its forms is refused
//! `exfiltration_detected`, whatever else would refuse it too, before anything of it is
//! sent or resolved. With `[canaries] on_trip = "end-session"` (the default) the
//! session it ran under ends at once, as `DELETE` ends it.

use std::sync::Arc;

use super::ask::{Ask, What};
use super::policies::Policies;
use super::refusal::Refusal;
use super::state::State;
use crate::audit::{new_request_id, Record};
use crate::dlp::{By, FoundIn, Hit, Scanner};
use crate::policy::{Host, Level, OnTrip};
use crate::session::Session;

/// The first canary `ask` carries: in its target's name (unless `inside` a tunnel,
/// whose name was looked at when it opened), then in what else its listener read.
pub(super) fn scan(ask: &Ask<'_>, scanner: &Scanner, inside: bool) -> Option<Hit> {
    if scanner.is_empty() {
        return None;
    }
    look(
        ask,
        inside,
        |name, found_in| scanner.scan_name(name, found_in),
        &|bytes, found_in| scanner.scan(bytes, found_in),
    )
}

/// The first hit of `name` in `ask`'s target name (unless `inside` a tunnel), then of
/// `bytes` in what else its listener read: the canaries' and the detectors' places.
pub(super) fn look(
    ask: &Ask<'_>,
    inside: bool,
    name: impl Fn(&str, FoundIn) -> Option<Hit>,
    bytes: &dyn Fn(&[u8], FoundIn) -> Option<Hit>,
) -> Option<Hit> {
    let in_name = match (&ask.target.host, &ask.what) {
        (Host::Name(n), What::Name) => name(n.as_str(), FoundIn::Dns),
        (Host::Name(n), _) if !inside => name(n.as_str(), FoundIn::Target),
        _ => None,
    };
    in_name.or_else(|| ask.exposed.and_then(|e| e.scan(bytes)))
}

/// What a tripped canary does under `policies` for `session`: the organization's
/// `on_trip`, unless the session's `"on_canary"` says `end-session` (a session may not
/// relax the organization's `end-session`; that was refused when it was created).
pub(crate) fn on_trip(policies: &Policies, session: Option<&Arc<Session>>) -> OnTrip {
    match session.and_then(|s| s.on_canary) {
        Some(OnTrip::EndSession) => OnTrip::EndSession,
        _ => policies.org.canaries().on_trip,
    }
}

/// The refusal of a tripped canary; the session it ran under, if any, ends unless the
/// organization says `on_trip = "refuse"`.
pub(super) async fn tripped(
    state: &State,
    on_trip: OnTrip,
    session: Option<Arc<Session>>,
    hit: Hit,
    ask: &Ask<'_>,
) -> Refusal {
    let refusal = Refusal::exfiltration(hit, &ask.target).in_session(&session);
    end_session(state, on_trip, session.as_ref(), &refusal).await;
    refusal
}

/// After `refusal` (a canary found, where the listener found it: a tunnel's server name
/// or first bytes too), end `session` unless `on_trip` is `refuse`: at once, on every
/// replica, as `DELETE` does, with a `session.ended` record (`"cause": "canary"`).
/// Anything but a canary's refusal ends nothing.
pub(crate) async fn end_session(
    state: &State,
    on_trip: OnTrip,
    session: Option<&Arc<Session>>,
    refusal: &Refusal,
) {
    let (OnTrip::EndSession, Some(session), Some(hit)) = (on_trip, session, &refusal.dlp) else {
        return;
    };
    if hit.by != By::Canary {
        // A secret detector refuses; only a canary ends a session.
        return;
    }
    let canary = &hit.id;
    match state.sessions.delete(&session.id).await {
        Ok(_) => {
            let mut record = Record::new(
                "session.ended",
                new_request_id(),
                String::new(),
                String::new(),
                String::new(),
                None,
            );
            record.session = Some(session.id.clone());
            record.reason = Some(refusal.reason.as_str());
            record.policy_level = Some(Level::Dlp.as_str());
            record.cause = Some("canary");
            record.dlp = Some((**hit).clone());
            state.audit.write_detached(record);
            tracing::warn!(session = %session.id, %canary, "a canary was sent: the session is ended");
        }
        Err(e) => {
            tracing::error!(session = %session.id, %canary, error = %e, "a canary was sent, and the session could not be ended (the session store did not answer); its request is refused");
        }
    }
}
