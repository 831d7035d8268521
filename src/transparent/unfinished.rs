//! A redirected connection whose first bytes decided nothing (docs/reference/
//! confinement.md, "Transparent listener"): they are never relayed, and the connection
//! is refused and recorded like every other refused one, whatever other connections to
//! the same address are open or waiting. Its record says what the policy says of the
//! destination on its own (a literal address outside `allowed_cidrs` is refused for
//! that, as a ClientHello to it on another connection is), else why its bytes were
//! refused.

use std::net::SocketAddr;

use super::Redirected;
use crate::audit::Via;
use crate::judgement::ask::{Ask, Credentials};
use crate::judgement::judge::{base_levels, decide_now};
use crate::judgement::record::{audit_refusal, Asked, Client};
use crate::judgement::refusal::Refusal;
use crate::judgement::State;
use crate::net::dial::guard;
use crate::policy::{Effective, Host, Reason, Target, Verdict};

/// Record and refuse a connection whose bytes (`tls`: the start of a ClientHello)
/// finished no request line or ClientHello before the header timeout or its close.
pub(super) async fn refuse(state: &State, peer: SocketAddr, redirected: &Redirected, tls: bool) {
    let client = Client::new(peer, Asked::Connect).via(Via::Transparent);
    let target = redirected.target();
    let refusal = destination_refusal(state, &target).unwrap_or_else(|| {
        let reason = match tls {
            true => Reason::SniMismatch,
            false => Reason::InvalidRequest,
        };
        Refusal::new(reason, target.host.to_string(), target.port)
    });
    let refusal = refusal.with_detail(
        "its first bytes finished no request line or ClientHello within --header-timeout",
    );
    audit_refusal(state, &client, &refusal, None).await;
}

/// The refusal `target` gets before any byte of a request is read: the policies in
/// force for a connection without a session (a redirected connection carries no
/// credentials), then, for a literal address, the address check. Pure: nothing is
/// resolved and nothing is held for a reviewer. `None` when neither refuses it (report
/// mode relaxes what it relaxes for every request).
fn destination_refusal(state: &State, target: &Target) -> Option<Refusal> {
    let policies = state.policies();
    // Asked as the tunnel it would have been, with no credentials; its record is written
    // by the caller, so the audit log's state is not asked here.
    let ask = Ask::tunnel(target.clone(), Credentials::None);
    let decision = match decide_now(&ask, &policies, false) {
        // Refused anyway: a secret its name carries is the reason (docs/reference/dlp.md).
        Ok((_, Some(hit))) => return Some(Refusal::exfiltration(hit, target)),
        Ok((decision, None)) => decision,
        Err(widening) => return Some(widening),
    };
    if let Verdict::Deny(reason) = decision.verdict {
        return Some(Refusal::from_decision(&decision, reason, target));
    }
    let Host::Ip(ip) = target.host else {
        return None;
    };
    let levels = match base_levels(&policies, None, target) {
        Ok(levels) => levels,
        Err(widening) => return Some(widening),
    };
    let eff = Effective {
        org: &policies.org,
        levels: &levels,
    };
    match guard(&eff, ip, &state.own, target.port) {
        Ok(_) => None,
        Err((decision, reason)) => {
            let mut refusal = Refusal::from_decision(&decision, reason, target);
            refusal.resolved_ip = Some(ip);
            Some(refusal)
        }
    }
}
