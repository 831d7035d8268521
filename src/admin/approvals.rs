//! The approval calls of the admin API (docs/reference/approvals.md):
//! `GET /v1/approvals` lists the requests held for a reviewer, `POST /v1/approvals/{id}`
//! decides one. What may be held and what an approval lets through is the judgement's
//! (`crate::judgement::ask`); this module shows and decides.

use hyper::{Response, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{error, json_response, Admin, Body};
use crate::audit::rfc3339;
use crate::judgement::approvals::{Decided, Held, Outcome, Pending};
use crate::judgement::hold::{allowed_now, widen_session};

/// `GET /v1/approvals`: every pending approval, oldest first.
pub(crate) fn list(admin: &Admin) -> Response<Body> {
    let all: Vec<Value> = admin
        .state
        .approvals
        .list()
        .iter()
        .map(|p| view(p))
        .collect();
    json_response(StatusCode::OK, json!({ "approvals": all }))
}

fn view(p: &Pending) -> Value {
    json!({
        "id": p.id,
        "session": p.session.as_ref().map(|s| s.id.as_str()),
        "host": p.asked.host,
        "port": p.asked.port,
        "method": p.asked.method,
        "path": p.asked.path,
        "entry": p.asked.entry,
        "since": rfc3339(p.since),
        "expires_at": rfc3339(p.expires_at),
        "waiting": p.waiting(),
        "requests": requests(&p.requests()),
    })
}

/// Held requests as the list and a decision's answer show them.
fn requests(held: &[Held]) -> Vec<Value> {
    held.iter()
        .map(|h| json!({"method": h.method, "path": h.path, "since": rfc3339(h.since)}))
        .collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecideBody {
    decision: String,
}

/// `POST /v1/approvals/{id}` with `{"decision": "allow-once" | "allow-session" | "deny"}`.
pub(crate) async fn decide(admin: &Admin, id: &str, body: Value) -> Response<Body> {
    let bad = |message: String| error(StatusCode::BAD_REQUEST, "invalid_body", &message);
    let body: DecideBody = match serde_json::from_value(body) {
        Ok(b) => b,
        Err(e) => return bad(format!("{e}")),
    };
    let Some(outcome) = Outcome::parse(&body.decision) else {
        return bad(r#"decision must be "allow-once", "allow-session" or "deny""#.into());
    };
    let approvals = &admin.state.approvals;
    let gone = || {
        error(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!(
                "no pending approval {id}: it was decided, it expired, or its requests went away"
            ),
        )
    };
    let Some(pending) = approvals.get(id) else {
        return gone();
    };
    // An allow is judged now, against the policies in force (a reload may have
    // narrowed them since the request was held); the held requests are judged again
    // by the same snapshot, so what this answer says is what they get.
    let policies = admin.state.policies();
    let refused = match outcome.allows() {
        true => allowed_now(&policies, &pending).err(),
        false => None,
    };
    if outcome == Outcome::AllowSession && refused.is_none() {
        if let Err(resp) = allow_session(admin, &pending).await {
            return resp;
        }
    }
    let decided = Decided {
        outcome,
        policies: outcome.allows().then_some(policies),
    };
    let Some(released) = approvals.decide(id, decided) else {
        return gone();
    };
    let mut body = json!({"id": id, "decision": outcome.as_str(),
        "waiting": released.len(), "requests": requests(&released)});
    let Some(refusal) = refused else {
        return json_response(StatusCode::OK, body);
    };
    // Refused by the policy in force: the held requests get its refusal.
    let message = format!(
        "the policy in force refuses {}:{} ({}): the waiting requests are refused, not allowed",
        pending.asked.host,
        pending.asked.port,
        refusal.reason.as_str()
    );
    body["error"] = json!({"type": "refused_by_policy", "message": message,
        "reason": refusal.reason.as_str(),
        "policy_level": refusal.level.map(|l| l.as_str()), "rule": refusal.rule});
    json_response(StatusCode::CONFLICT, body)
}

/// `allow-session`: the approval's entry added to its session's policy, which must stay
/// inside the policies in force.
async fn allow_session(admin: &Admin, pending: &Pending) -> Result<(), Response<Body>> {
    let Some(session) = &pending.session else {
        return Err(error(
            StatusCode::CONFLICT,
            "no_session",
            "this request has no session to add the destination to: allow-once or deny",
        ));
    };
    let policies = admin.state.policies();
    let widened = widen_session(&policies, session, &pending.asked.entry)
        .map_err(|why| error(StatusCode::CONFLICT, "policy_widening", &why))?;
    admin
        .state
        .sessions
        .set_policy(session, widened)
        .await
        .map_err(|e| {
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "session_store_unavailable",
                &e.to_string(),
            )
        })
}
