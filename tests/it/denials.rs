//! One test per denial reason the proxy core produces (docs/reference/answers.md).
//! Each checks the answer, that the origin saw nothing, and the single audit record.

use crate::support::client::{get_via_proxy, send_raw, Response};
use crate::support::expect::{assert_single_denial, Denial};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};

fn url(host: &str, origin: &Origin) -> String {
    format!("http://{host}:{}/", origin.port())
}

fn assert_untouched(origin: &Origin, proxy: &Proxy) {
    assert_eq!(
        origin.connections(),
        0,
        "the origin was reached: {:?}\n{}",
        origin.requests(),
        proxy.diagnostics()
    );
}

#[tokio::test]
async fn name_outside_org_allowlist_is_not_in_org_allowlist() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port())
        .pin("evil.test")
        .start()
        .await;
    let resp = get_via_proxy(proxy.addr, &url("evil.test", &origin), &[]).await;
    let want = Denial::new(403, "not_in_org_allowlist")
        .at("evil.test", origin.port())
        .level("org");
    assert_single_denial(&resp, &want, &proxy).await;
    assert_untouched(&origin, &proxy);
}

#[tokio::test]
async fn denied_domain_wins_over_a_wildcard_allow() {
    let origin = Origin::start().await;
    let org = Org::new()
        .allow("*.allowed.test")
        .deny("bad.allowed.test")
        .ports(&[80, 443, origin.port()])
        .loopback();
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["*.allowed.test"]))
        .pin("bad.allowed.test")
        .pin("ok.allowed.test")
        .start()
        .await;
    let resp = get_via_proxy(proxy.addr, &url("bad.allowed.test", &origin), &[]).await;
    let want = Denial::new(403, "denied_domain")
        .at("bad.allowed.test", origin.port())
        .level("org");
    assert_single_denial(&resp, &want, &proxy).await;
    assert_untouched(&origin, &proxy);

    // The wildcard itself still allows its other names.
    let ok = get_via_proxy(proxy.addr, &url("ok.allowed.test", &origin), &[]).await;
    assert_eq!(ok.status, 200, "{ok:?}\n{}", proxy.diagnostics());
}

#[tokio::test]
async fn allowed_name_on_an_unlisted_port_is_port_not_allowed() {
    let listed = Origin::start_named("listed").await;
    let unlisted = Origin::start_named("unlisted").await;
    let proxy = ProxyBuilder::standard(listed.port()).start().await;
    let resp = get_via_proxy(proxy.addr, &url("allowed.test", &unlisted), &[]).await;
    let want = Denial::new(403, "port_not_allowed")
        .at("allowed.test", unlisted.port())
        .level("org");
    assert_single_denial(&resp, &want, &proxy).await;
    assert_untouched(&unlisted, &proxy);
    assert_untouched(&listed, &proxy);
}

#[tokio::test]
async fn closed_default_without_request_policy_is_network_disabled() {
    let origin = Origin::start().await;
    // No --policy and no default_network_policy: the closed default applies.
    let proxy = ProxyBuilder::new(Org::standard(origin.port()).to_toml())
        .pin("allowed.test")
        .start()
        .await;
    let resp = get_via_proxy(proxy.addr, &url("allowed.test", &origin), &[]).await;
    let want = Denial::new(403, "network_disabled")
        .at("allowed.test", origin.port())
        .level("request");
    assert_single_denial(&resp, &want, &proxy).await;
    assert_untouched(&origin, &proxy);
}

#[tokio::test]
async fn allowlist_header_under_the_closed_default_is_policy_widening() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::new(Org::standard(origin.port()).to_toml())
        .pin("allowed.test")
        .start()
        .await;
    let header = allowlist_json(&["allowed.test"]);
    let resp = get_via_proxy(
        proxy.addr,
        &url("allowed.test", &origin),
        &[("X-Network-Policy", &header)],
    )
    .await;
    let want = Denial::new(403, "policy_widening")
        .at("allowed.test", origin.port())
        .level("request");
    assert_single_denial(&resp, &want, &proxy).await;
    assert_untouched(&origin, &proxy);
}

#[tokio::test]
async fn name_outside_the_policy_file_is_not_in_request_policy() {
    let origin = Origin::start().await;
    let org = Org::standard(origin.port()).allow("other.test");
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["other.test"]))
        .pin("allowed.test")
        .pin("other.test")
        .start()
        .await;
    let resp = get_via_proxy(proxy.addr, &url("allowed.test", &origin), &[]).await;
    let want = Denial::new(403, "not_in_request_policy")
        .at("allowed.test", origin.port())
        .level("request");
    assert_single_denial(&resp, &want, &proxy).await;
    assert_untouched(&origin, &proxy);
}

#[tokio::test]
async fn header_naming_a_name_the_org_does_not_allow_is_policy_widening() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port())
        .pin("evil.test")
        .start()
        .await;
    // Rejected as a whole, even though the target itself is allowed.
    let header = allowlist_json(&["allowed.test", "evil.test"]);
    let resp = get_via_proxy(
        proxy.addr,
        &url("allowed.test", &origin),
        &[("X-Network-Policy", &header)],
    )
    .await;
    let want = Denial::new(403, "policy_widening")
        .at("allowed.test", origin.port())
        .level("request");
    assert_single_denial(&resp, &want, &proxy).await;
    assert_untouched(&origin, &proxy);
}

#[tokio::test]
async fn unparseable_policy_header_is_invalid_policy() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port()).start().await;
    let resp = get_via_proxy(
        proxy.addr,
        &url("allowed.test", &origin),
        &[("X-Network-Policy", "{\"type\": \"allowlist\", ")],
    )
    .await;
    let want = Denial::new(400, "invalid_policy")
        .at("allowed.test", origin.port())
        .level("request");
    assert_single_denial(&resp, &want, &proxy).await;
    assert_untouched(&origin, &proxy);
}

#[tokio::test]
async fn two_policy_headers_are_invalid_policy() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port()).start().await;
    let header = allowlist_json(&["allowed.test"]);
    let resp = get_via_proxy(
        proxy.addr,
        &url("allowed.test", &origin),
        &[("X-Network-Policy", &header), ("X-Network-Policy", &header)],
    )
    .await;
    let want = Denial::new(400, "invalid_policy")
        .at("allowed.test", origin.port())
        .level("request");
    assert_single_denial(&resp, &want, &proxy).await;
    assert_untouched(&origin, &proxy);
}

#[tokio::test]
async fn header_policy_narrows_to_its_own_names() {
    let origin = Origin::start().await;
    let org = Org::standard(origin.port()).allow("other.test");
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["allowed.test", "other.test"]))
        .pin("allowed.test")
        .pin("other.test")
        .start()
        .await;
    let header = allowlist_json(&["other.test"]);
    let narrowed = [("X-Network-Policy", header.as_str())];

    let resp = get_via_proxy(proxy.addr, &url("allowed.test", &origin), &narrowed).await;
    let want = Denial::new(403, "not_in_request_policy")
        .at("allowed.test", origin.port())
        .level("request");
    assert_single_denial(&resp, &want, &proxy).await;
    assert_untouched(&origin, &proxy);

    let ok = get_via_proxy(proxy.addr, &url("other.test", &origin), &narrowed).await;
    assert_eq!(ok.status, 200, "{ok:?}\n{}", proxy.diagnostics());
    assert_eq!(origin.hits(), 1);
}

fn webhook_org(origin: &Origin, action: &str) -> Org {
    Org::standard(origin.port())
        .allow("hooks.webhook.site")
        .shared_hosting(action)
}

#[tokio::test]
async fn shared_hosting_with_action_deny_is_shared_hosting() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::new(webhook_org(&origin, "deny").to_toml())
        .policy(allowlist_json(&["hooks.webhook.site"]))
        .pin("hooks.webhook.site")
        .start()
        .await;
    let resp = get_via_proxy(proxy.addr, &url("hooks.webhook.site", &origin), &[]).await;
    let want = Denial::new(403, "shared_hosting")
        .at("hooks.webhook.site", origin.port())
        .level("org");
    let record = assert_single_denial(&resp, &want, &proxy).await;
    assert_eq!(record["shared_hosting"], true, "{record}");
    assert_untouched(&origin, &proxy);
}

#[tokio::test]
async fn shared_hosting_with_action_flag_is_allowed_and_marked() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::new(webhook_org(&origin, "flag").to_toml())
        .policy(allowlist_json(&["hooks.webhook.site"]))
        .pin("hooks.webhook.site")
        .audit_allowed()
        .start()
        .await;
    let resp = get_via_proxy(proxy.addr, &url("hooks.webhook.site", &origin), &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(origin.hits(), 1);
    let record = proxy.allowed_record().await;
    assert_eq!(record["host"], "hooks.webhook.site", "{record}");
    assert_eq!(
        record["shared_hosting"],
        true,
        "{record}\n{}",
        proxy.diagnostics()
    );
}

#[tokio::test]
async fn allowed_name_pinned_to_loopback_without_cidr_is_private_address() {
    let origin = Origin::start().await;
    let org = Org::new()
        .allow("allowed.test")
        .ports(&[80, 443, origin.port()]);
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .pin("allowed.test")
        .start()
        .await;
    let resp = get_via_proxy(proxy.addr, &url("allowed.test", &origin), &[]).await;
    let want = Denial::new(403, "private_address")
        .at("allowed.test", origin.port())
        .level("address");
    let record = assert_single_denial(&resp, &want, &proxy).await;
    assert_eq!(record["resolved_ip"], "127.0.0.1", "{record}");
    assert_untouched(&origin, &proxy);
}

#[tokio::test]
async fn literal_loopback_in_any_spelling_is_private_address() {
    let origin = Origin::start().await;
    let org = Org::new()
        .allow("allowed.test")
        .ports(&[80, 443, origin.port()]);
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .pin("allowed.test")
        .start()
        .await;
    let spellings = [
        "127.0.0.1",
        "2130706433",
        "0x7f.1",
        "127.1",
        "[::ffff:127.0.0.1]",
    ];
    for host in spellings {
        let resp = get_via_proxy(proxy.addr, &url(host, &origin), &[]).await;
        let want = Denial::new(403, "private_address").level("address");
        crate::support::expect::assert_denied_response(&resp, &want, &proxy);
        assert_eq!(
            resp.json()["error"]["port"],
            origin.port(),
            "{host}: {resp:?}"
        );
    }
    let records = proxy.expect_audit_count(spellings.len()).await;
    for record in &records {
        assert_eq!(record["event"], "egress.denied", "{record}");
        assert_eq!(record["reason"], "private_address", "{record}");
    }
    assert_untouched(&origin, &proxy);
}

async fn invalid_host_proxy(origin: &Origin) -> Proxy {
    ProxyBuilder::standard(origin.port()).start().await
}

#[tokio::test]
async fn host_that_fails_normalisation_is_invalid_host() {
    let origin = Origin::start().await;
    let proxy = invalid_host_proxy(&origin).await;
    let long_label = format!("{}.test", "a".repeat(64));
    let hosts = [
        "bad!host.test",
        "-bad.test",
        "a..b.test",
        long_label.as_str(),
    ];
    for host in hosts {
        let resp = get_via_proxy(proxy.addr, &url(host, &origin), &[]).await;
        crate::support::expect::assert_denied_response(
            &resp,
            &Denial::new(400, "invalid_host"),
            &proxy,
        );
    }
    let records = proxy.expect_audit_count(hosts.len()).await;
    assert!(
        records.iter().all(|r| r["reason"] == "invalid_host"),
        "{records:?}"
    );
    assert_untouched(&origin, &proxy);
}

/// A 400 refusal whose reason may be either of the two target reasons: the order of judgement
/// does not say whether a target the URI parser rejects is "unparseable"
/// (`invalid_request`) or a host that "does not survive normalisation"
/// (`invalid_host`). Either way it carries the header, the body and one record.
async fn assert_bad_target_refused(resp: &Response, proxy: &Proxy) {
    let reason = resp
        .header("x-egress-denied")
        .unwrap_or_default()
        .to_string();
    assert!(
        reason == "invalid_host" || reason == "invalid_request",
        "X-Egress-Denied {reason:?}: {resp:?}\n{}",
        proxy.diagnostics()
    );
    assert_single_denial(resp, &Denial::new(400, &reason), proxy).await;
}

#[tokio::test]
async fn percent_encoded_host_is_refused_with_400() {
    let origin = Origin::start().await;
    let proxy = invalid_host_proxy(&origin).await;
    let resp = get_via_proxy(proxy.addr, &url("bad_host%41.test", &origin), &[]).await;
    assert_bad_target_refused(&resp, &proxy).await;
    assert_untouched(&origin, &proxy);
}

#[tokio::test]
async fn host_with_a_space_is_refused_with_400() {
    let origin = Origin::start().await;
    let proxy = invalid_host_proxy(&origin).await;
    let req = format!(
        "GET http://bad host.test:{0}/ HTTP/1.1\r\nHost: bad host.test:{0}\r\nConnection: close\r\n\r\n",
        origin.port()
    );
    let resp = send_raw(proxy.addr, req.as_bytes()).await;
    assert_bad_target_refused(&resp, &proxy).await;
    assert_untouched(&origin, &proxy);
}

#[tokio::test]
async fn garbage_bytes_are_invalid_request() {
    let origin = Origin::start().await;
    let proxy = invalid_host_proxy(&origin).await;
    let resp = send_raw(proxy.addr, b"\x00\x01\x02 not http at all\r\n\r\n").await;
    assert_single_denial(&resp, &Denial::new(400, "invalid_request"), &proxy).await;
    assert_untouched(&origin, &proxy);
}

#[tokio::test]
async fn origin_form_request_to_the_proxy_is_invalid_request() {
    let origin = Origin::start().await;
    let proxy = invalid_host_proxy(&origin).await;
    let req = format!(
        "GET / HTTP/1.1\r\nHost: allowed.test:{}\r\nConnection: close\r\n\r\n",
        origin.port()
    );
    let resp = send_raw(proxy.addr, req.as_bytes()).await;
    assert_single_denial(&resp, &Denial::new(400, "invalid_request"), &proxy).await;
    assert_untouched(&origin, &proxy);
}

#[tokio::test]
async fn host_header_naming_another_authority_is_host_mismatch() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port())
        .pin("evil.test")
        .start()
        .await;
    let req = format!(
        "GET http://allowed.test:{}/ HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n",
        origin.port()
    );
    let resp = send_raw(proxy.addr, req.as_bytes()).await;
    assert_single_denial(&resp, &Denial::new(403, "host_mismatch"), &proxy).await;
    assert_untouched(&origin, &proxy);
}
