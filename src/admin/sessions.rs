//! The session calls of the admin API (docs/reference/control-plane.md, "Sessions").
//!
//! `POST /v1/sessions` checks the `network_policy` against the policies in force (the
//! organization's and `--policy`'s); the memory store does it under its lock, so a
//! reload cannot slip in between the check and the insert. Tokens appear only in the
//! `201` that creates them. While a shared store cannot be reached, every call here
//! answers 503 `session_store_unavailable`.

use std::time::Duration;

use hyper::{Response, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{empty, error, json_response, Admin, Body};
use crate::policy::{check_narrowing, RequestPolicy};
use crate::session::{CreateError, NewSession, StoreError, DEFAULT_IDLE_SECS, MAX_IDLE_SECS};
use crate::session::{DEFAULT_ASK_SECS, MAX_ASK_SECS};

mod canaries;

/// The longest label kept.
const MAX_LABEL: usize = 256;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    network_policy: Option<Value>,
    idle_timeout_seconds: Option<Value>,
    label: Option<String>,
    on_deny: Option<Value>,
    ask_timeout_seconds: Option<Value>,
    canaries: Option<Value>,
    on_canary: Option<Value>,
}

/// `POST /v1/sessions`.
pub(crate) async fn create(admin: &Admin, body: Value) -> Response<Body> {
    let bad = |message: String| error(StatusCode::BAD_REQUEST, "invalid_body", &message);
    let body: CreateBody = match serde_json::from_value(body) {
        Ok(b) => b,
        Err(e) => return bad(format!("{e}")),
    };
    let Some(policy_json) = body.network_policy else {
        return bad("network_policy is required".into());
    };
    let idle = match &body.idle_timeout_seconds {
        None => DEFAULT_IDLE_SECS,
        Some(v) => match v.as_u64().filter(|n| (1..=MAX_IDLE_SECS).contains(n)) {
            Some(n) => n,
            None => {
                return bad(format!(
                    "idle_timeout_seconds must be a whole number from 1 to {MAX_IDLE_SECS}"
                ))
            }
        },
    };
    let ask = match on_deny(&body.on_deny, &body.ask_timeout_seconds) {
        Ok(ask) => ask,
        Err(message) => return bad(message),
    };
    if body.label.as_ref().is_some_and(|l| l.len() > MAX_LABEL) {
        return bad(format!("label is longer than {MAX_LABEL} bytes"));
    }
    let canaries = match canaries::parse(body.canaries.as_ref()) {
        Ok(c) => c,
        Err(message) => return bad(message),
    };
    let org_on_trip = admin.state.policies().org.canaries().on_trip;
    let on_canary = match canaries::on_canary(body.on_canary.as_ref(), org_on_trip) {
        Ok(on) => on,
        Err(canaries::OnCanaryError::Relaxes) => return canaries::relaxes(),
        Err(canaries::OnCanaryError::Bad) => {
            return bad("on_canary must be \"end-session\" or \"refuse\"".into())
        }
    };
    let policy = match RequestPolicy::from_value(&policy_json, "network_policy") {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, "invalid_policy", &e.to_string()),
    };
    let new = NewSession {
        policy,
        policy_json,
        label: body.label,
        idle_timeout: Duration::from_secs(idle),
        ask,
        canaries: canaries.clone(),
        on_canary,
    };
    let state = &admin.state;
    let admit = |p: &RequestPolicy| {
        let policies = state.policies();
        let uppers: Vec<&RequestPolicy> = policies.serve_policy.iter().collect();
        check_narrowing(&policies.org, &uppers, p)
    };
    let (view, token) = match state.sessions.create(new, &admit).await {
        Ok(created) => created,
        Err(CreateError::Store(e)) => return unavailable(&e),
        Err(CreateError::Widening(w)) => {
            return json_response(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"error": {
                    "type": "policy_widening",
                    "message": format!("network_policy widens the policy in force: {w}"),
                    "offending": w.offending,
                }}),
            )
        }
    };
    tracing::info!(session = %view.id, label = ?view.label, canaries = canaries.len(), "session created");
    let mut body = json!({
        "id": view.id,
        "token": token,
        "expires_at": view.expires_at,
        "idle_timeout_seconds": view.idle_timeout_seconds,
        "label": view.label,
    });
    if !canaries.is_empty() {
        // The only place a session's canary values are ever shown.
        body["canaries"] = canaries::shown(&canaries);
    }
    json_response(StatusCode::CREATED, body)
}

/// `GET /v1/sessions`: every live session, without tokens.
pub(crate) async fn list(admin: &Admin) -> Response<Body> {
    let views = match admin.state.sessions.list().await {
        Ok(views) => views,
        Err(e) => return unavailable(&e),
    };
    // Each with what it sent upstream, as `GET /v1/sessions/{id}` shows it (the console
    // shows it against the budget): with a shared store, one round trip for all.
    let ids: Vec<String> = views.iter().map(|v| v.id.clone()).collect();
    let uploaded = match admin.state.budgets.uploaded_all(&ids).await {
        Ok(all) => all,
        Err(e) => return unavailable(&e),
    };
    let all: Vec<Value> = views
        .into_iter()
        .zip(uploaded)
        .map(|(view, uploaded)| {
            let mut body = json!(view);
            body["uploaded_bytes"] = json!(uploaded);
            body
        })
        .collect();
    json_response(StatusCode::OK, json!({ "sessions": all }))
}

/// `GET /v1/sessions/{id}`, without the token.
pub(crate) async fn get(admin: &Admin, id: &str) -> Response<Body> {
    match admin.state.sessions.get(id).await {
        Ok(Some(view)) => {
            // What it sent upstream: through this proxy, or with a shared store, through
            // every replica (docs/reference/control-plane.md).
            let uploaded = match admin.state.budgets.uploaded(id).await {
                Ok(n) => n,
                Err(e) => return unavailable(&e),
            };
            let mut body = json!(view);
            body["uploaded_bytes"] = json!(uploaded);
            if let Some(shared) = admin.state.budgets.shared() {
                match shared.fleet_tunnels(id).await {
                    Ok(n) => body["open_tunnels"] = json!(n),
                    Err(e) => return unavailable(&e),
                }
            }
            json_response(StatusCode::OK, body)
        }
        Ok(None) => not_found(),
        Err(e) => unavailable(&e),
    }
}

/// `DELETE /v1/sessions/{id}`: ends it now; its open tunnels close.
pub(crate) async fn delete(admin: &Admin, id: &str) -> Response<Body> {
    match admin.state.sessions.delete(id).await {
        Ok(true) => empty(StatusCode::NO_CONTENT),
        Ok(false) => not_found(),
        Err(e) => unavailable(&e),
    }
}

/// The store did not answer: 503, and the caller may try again.
pub(crate) fn unavailable(e: &StoreError) -> Response<Body> {
    let mut resp = error(
        StatusCode::SERVICE_UNAVAILABLE,
        "session_store_unavailable",
        &e.to_string(),
    );
    resp.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("1"),
    );
    resp
}

fn not_found() -> Response<Body> {
    error(StatusCode::NOT_FOUND, "not_found", "no such session")
}

/// `on_deny` (`"refuse"`, the default, or `"ask"`) and `ask_timeout_seconds` (with
/// `ask` only; default 30, at most 300): how long a request the session's policy
/// refuses, and the organization allows, waits for a reviewer
/// (docs/reference/approvals.md).
fn on_deny(on_deny: &Option<Value>, timeout: &Option<Value>) -> Result<Option<Duration>, String> {
    let asks = match on_deny.as_ref().map(|v| v.as_str()) {
        None | Some(Some("refuse")) => false,
        Some(Some("ask")) => true,
        Some(_) => return Err("on_deny must be \"refuse\" or \"ask\"".into()),
    };
    let secs = match timeout {
        None => DEFAULT_ASK_SECS,
        Some(_) if !asks => {
            return Err("ask_timeout_seconds needs \"on_deny\": \"ask\"".into());
        }
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=MAX_ASK_SECS).contains(n))
            .ok_or_else(|| {
                format!("ask_timeout_seconds must be a whole number from 1 to {MAX_ASK_SECS}")
            })?,
    };
    Ok(asks.then(|| Duration::from_secs(secs)))
}
