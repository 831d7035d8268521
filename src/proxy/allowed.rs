//! The allowed record of a forwarded request ([`super::forward`], and a WebSocket's
//! handshake): its byte counts and the one record written when it ends, an upload cut
//! or a canary's trip recorded as the refusal it is (docs/reference/audit-log.md).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use hyper::Uri;

use super::budgeted::Sent;
use crate::judgement::approved::Approved;
use crate::judgement::budget;
use crate::judgement::record::{audit_allowed, audit_cut, audit_flagged, inspected_url, Client};
use crate::judgement::refusal::Refusal;
use crate::judgement::State;

/// The allowed record of one forwarded request and its byte counts, written once: when
/// its response body ends or is dropped, or, when no response came (upstream failed
/// after the request went out, or the client went away first), when this is dropped.
pub(super) struct AllowedRecord {
    pub(super) state: Arc<State>,
    pub(super) client: Client,
    pub(super) approved: Approved,
    /// The request's target as the client sent it, for the record's `url`; `None` when
    /// no record is written unless asked (no `--audit-allowed`, no budget).
    pub(super) uri: Option<Uri>,
    /// The bytes sent upstream, and whether the upload budget cut the request body.
    pub(super) sent: Arc<Sent>,
    /// The address the request went to, once known.
    pub(super) dialed: Option<std::net::SocketAddr>,
    pub(super) armed: bool,
    /// Whether a canary's trip has ended the session already.
    pub(super) trip_ended: bool,
}

impl AllowedRecord {
    /// The refusal of a request whose body the upload budget cut.
    pub(super) fn cut_refusal(&self) -> Refusal {
        let approved = &self.approved;
        let budget = approved.budget.budget().expect("only a budget cuts a body");
        let mut refusal = budget::refusal(&approved.target, budget)
            .in_session(&approved.session)
            .with_detail("the request body went past the upload budget: it was cut");
        refusal.resolved_ip = self.dialed.map(|d| d.ip());
        refusal
    }

    pub(super) fn write(&mut self, down: u64) {
        if !std::mem::take(&mut self.armed) {
            return;
        }
        let up = self.sent.bytes.load(Ordering::Relaxed);
        if let Some(tunnel) = &self.client.within {
            tunnel.add((up, down));
        }
        let metrics = &self.state.metrics;
        metrics.bytes_up.inc_by(up);
        metrics.bytes_down.inc_by(down);
        let (state, client, approved) = (&self.state, &self.client, &self.approved);
        if let Some(hit) = self.sent.flagged.get() {
            // A secret in the body, let through: recorded (docs/reference/dlp.md).
            audit_flagged(state, client, approved, hit.clone(), None);
        }
        if let Some(refusal) = self.tripped() {
            // One record, never the URL (docs/reference/dlp.md); the session ends.
            audit_cut(state, client, &refusal, None, (up, down));
            self.end_session_detached(refusal);
            return;
        }
        if approved.budget.budget().is_some() && self.sent.cut.load(Ordering::Relaxed) {
            let refusal = self.cut_refusal();
            let url = self.uri.take().map(|uri| record_url(&uri, approved));
            audit_cut(state, client, &refusal, url, (up, down));
            return;
        }
        if !state.audit_allowed && !state.traced {
            // No record (`audit_allowed` makes none either), so no URL built for one.
            return;
        }
        let url = self.uri.take().map(|uri| record_url(&uri, approved));
        audit_allowed(state, client, approved, self.dialed, url, (up, down));
    }
}

impl Drop for AllowedRecord {
    fn drop(&mut self) {
        self.write(0);
    }
}

/// The record's `url` of a request to `approved`: as the client sent it, or for a
/// request read inside an intercepted tunnel, `https://` and the tunnel's authority.
pub(super) fn record_url(uri: &Uri, approved: &Approved) -> String {
    match &approved.upstream_tls {
        None => uri.to_string(),
        Some(_) => inspected_url(
            uri.path_and_query().map_or("/", |p| p.as_str()),
            &approved.target,
        ),
    }
}
