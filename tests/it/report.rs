//! Report mode relaxes only allowlist decisions (docs/reference/policy-files.md, "Report mode").

use crate::support::client::get_via_proxy;
use crate::support::expect::{assert_single_denial, Denial};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::ProxyBuilder;

#[tokio::test]
async fn report_mode_forwards_an_unlisted_name_and_logs_would_deny() {
    let origin = Origin::start().await;
    let org = Org::standard(origin.port()).mode("report");
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .pin("allowed.test")
        .pin("evil.test")
        .start()
        .await;
    let url = format!("http://evil.test:{}/", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(resp.text(), origin.body());
    assert_eq!(origin.hits(), 1);
    let record = proxy.single_audit().await;
    let ctx = format!("{record}\n{}", proxy.diagnostics());
    assert_eq!(record["event"], "egress.would_deny", "{ctx}");
    assert_eq!(record["reason"], "not_in_org_allowlist", "{ctx}");
    assert_eq!(record["host"], "evil.test", "{ctx}");
    assert_eq!(record["policy_level"], "org", "{ctx}");
}

#[tokio::test]
async fn report_mode_still_enforces_private_address() {
    let origin = Origin::start().await;
    let org = Org::new()
        .allow("allowed.test")
        .ports(&[80, 443, origin.port()])
        .mode("report");
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .pin("allowed.test")
        .start()
        .await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    let want = Denial::new(403, "private_address")
        .at("allowed.test", origin.port())
        .level("address");
    assert_single_denial(&resp, &want, &proxy).await;
    assert_eq!(origin.connections(), 0, "{}", proxy.diagnostics());
}
