//! The proxy of the control-plane tests (docs/reference/control-plane.md): the closed
//! default, so only sessions open the network, and the admin API with [`ADMIN_TOKEN`];
//! and the checks those tests share: no token leaks, waiting for an answer.

use std::time::Duration;

use serde_json::{json, Value};

use super::client::get_via_proxy;
use super::org::Org;
use super::proxy::{Proxy, ProxyBuilder, AUDIT_TIMEOUT};

/// The bearer token of the admin API.
pub(crate) const ADMIN_TOKEN: &str = "it-admin-token-0123456789abcdef";

/// An org allowing `allowed.test` and `other.test` (and the origin's port), with the
/// closed default: only sessions open the network.
pub(crate) fn org(port: u16) -> Org {
    Org::standard(port).allow("other.test")
}

/// The control-plane proxy for `org`: the three test names pinned, the admin API on,
/// and `extra` flags.
pub(crate) async fn proxy_with(org: &Org, extra: &[&str]) -> Proxy {
    let mut builder = ProxyBuilder::new(org.to_toml())
        .pin("allowed.test")
        .pin("other.test")
        .pin("evil.test")
        .admin(ADMIN_TOKEN);
    for arg in extra {
        builder = builder.arg(arg);
    }
    builder.start().await
}

/// An allowlist request policy of `names`, as a session body's `policy`.
pub(crate) fn allowlist(names: &[&str]) -> Value {
    json!({"type": "allowlist", "allowed_domains": names})
}

/// Neither the audit log nor the proxy's own log holds a token.
pub(crate) fn assert_no_secrets(proxy: &Proxy, tokens: &[&str]) {
    let audit = proxy.audit_text();
    let stderr = proxy.stderr();
    for secret in tokens.iter().copied().chain([ADMIN_TOKEN]) {
        assert!(
            !audit.contains(secret),
            "audit log leaks {secret}:\n{audit}"
        );
        assert!(
            !stderr.contains(secret),
            "proxy log leaks {secret}:\n{stderr}"
        );
    }
}

/// Wait (bounded) until the proxy answers `url` with `status`.
pub(crate) async fn wait_for_status(
    proxy: &Proxy,
    url: &str,
    headers: &[(&str, &str)],
    status: u16,
) {
    let started = std::time::Instant::now();
    loop {
        let resp = get_via_proxy(proxy.addr, url, headers).await;
        if resp.status == status {
            return;
        }
        if started.elapsed() > AUDIT_TIMEOUT {
            panic!(
                "{url} never answered {status}; last {resp:?}\n{}",
                proxy.diagnostics()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
