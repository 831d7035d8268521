//! A session's own canaries (docs/reference/dlp.md, "A session's canaries"): `"canaries"`
//! in `POST /v1/sessions`, each `{"kind": K}` (minted here) or `{"value": "..."}`, at
//! most 16, ids `c1`, `c2`, ...; and `"on_canary"`, which may not relax the
//! organization's `end-session`.

use hyper::{Response, StatusCode};
use serde_json::{json, Value};

use super::super::{json_response, Body};
use crate::dlp::{check_value, Canary, Kind};
use crate::policy::OnTrip;

/// The most canaries a session may have.
pub(super) const MAX: usize = 16;

/// The kind recorded for a value the client chose.
const CHOSEN: &str = "custom";

/// The canaries `"canaries"` asks for, minted; or why the body is refused (never a value).
pub(super) fn parse(canaries: Option<&Value>) -> Result<Vec<Canary>, String> {
    let Some(canaries) = canaries else {
        return Ok(Vec::new());
    };
    let list = canaries
        .as_array()
        .ok_or("canaries must be a list of {\"kind\": K} or {\"value\": V}")?;
    if list.len() > MAX {
        return Err(format!("a session has at most {MAX} canaries"));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let id = format!("c{}", i + 1);
        let bad = |why: &str| format!("canaries[{i}]: {why}");
        let object = item
            .as_object()
            .filter(|o| o.len() == 1)
            .ok_or_else(|| bad("must be {\"kind\": K} or {\"value\": V}, one of the two"))?;
        let canary = match (object.get("kind"), object.get("value")) {
            (Some(kind), None) => {
                let name = kind.as_str().ok_or_else(|| bad("kind is a string"))?;
                let kind = Kind::parse(name).map_err(|e| bad(&e))?;
                let value = kind
                    .mint()
                    .map_err(|e| bad(&format!("cannot draw random bytes: {e}")))?;
                Canary::new(&id, kind.as_str(), value.into_bytes())
            }
            (None, Some(value)) => {
                let value = value.as_str().ok_or_else(|| bad("value is a string"))?;
                check_value(value.as_bytes()).map_err(|e| bad(&e))?;
                Canary::new(&id, CHOSEN, value.as_bytes().to_vec())
            }
            _ => return Err(bad("must be {\"kind\": K} or {\"value\": V}")),
        };
        out.push(canary);
    }
    Ok(out)
}

/// Why `"on_canary"` is refused.
pub(super) enum OnCanaryError {
    /// Neither `end-session` nor `refuse` (400).
    Bad,
    /// `refuse` under the organization's `end-session` (422 `policy_widening`).
    Relaxes,
}

/// `"on_canary"`, given the organization's `on_trip`.
pub(super) fn on_canary(
    on_canary: Option<&Value>,
    org: OnTrip,
) -> Result<Option<OnTrip>, OnCanaryError> {
    let asked = match on_canary.map(|v| v.as_str()) {
        None => return Ok(None),
        Some(Some("end-session")) => OnTrip::EndSession,
        Some(Some("refuse")) => OnTrip::Refuse,
        Some(_) => return Err(OnCanaryError::Bad),
    };
    if org == OnTrip::EndSession && asked == OnTrip::Refuse {
        return Err(OnCanaryError::Relaxes);
    }
    Ok(Some(asked))
}

/// The 422 of an `"on_canary"` that relaxes the organization's `end-session`.
pub(super) fn relaxes() -> Response<Body> {
    let message = "on_canary \"refuse\" relaxes the organization's on_trip \"end-session\"";
    json_response(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({"error": {
            "type": "policy_widening",
            "message": message,
            "offending": ["on_canary"],
        }}),
    )
}

/// The `201`'s `"canaries"`: each id, kind and value.
pub(super) fn shown(canaries: &[Canary]) -> Value {
    let list: Vec<Value> = canaries
        .iter()
        .map(|c| {
            let value = String::from_utf8_lossy(c.value());
            json!({"id": &*c.id, "kind": &*c.kind, "value": value})
        })
        .collect();
    Value::from(list)
}
