//! One test per denial reason the proxy core produces (docs/reference/answers.md).
//! Each checks the answer, that the origin saw nothing, and the single audit record.
//!
//! A denial of one request is a row of the table in [`denials!`]: the proxy's set-up, the
//! request, and the denial it must draw. Each row is a test of its own, named for the
//! behaviour, and its name is in every failure message. Cases of another shape (several
//! spellings sent to one proxy, a request that is allowed and only marked) follow the
//! table, written out.

mod case;

use crate::support::client::get_via_proxy;
use crate::support::expect::{assert_denied_response, Denial};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};
use case::{get, raw};

fn url(host: &str, origin: &Origin) -> String {
    format!("http://{host}:{}/", origin.port())
}

fn assert_untouched(case: &str, origin: &Origin, proxy: &Proxy) {
    assert_eq!(
        origin.connections(),
        0,
        "{case}: the origin was reached: {:?}\n{}",
        origin.requests(),
        proxy.diagnostics()
    );
}

/// The two reasons of a target the URI parser rejects: the order of judgement does not
/// say whether it is "unparseable" (`invalid_request`) or a host that "does not survive
/// normalisation" (`invalid_host`). Either way it carries the header, the body and one
/// record.
const BAD_TARGET: &[&str] = &["invalid_host", "invalid_request"];

/// The rows: `test_name: case;`, each a `#[tokio::test]` that checks its [`case::Case`].
macro_rules! denials {
    ($($(#[$doc:meta])* $name:ident: $case:expr;)+) => {$(
        $(#[$doc])*
        #[tokio::test]
        async fn $name() {
            $case.check(stringify!($name)).await;
        }
    )+};
}

denials! {
    name_outside_org_allowlist_is_not_in_org_allowlist:
        get(standard_and_evil, "evil.test")
            .denied(403, "not_in_org_allowlist").at("evil.test").level("org");
    /// The wildcard itself still allows its other names.
    denied_domain_wins_over_a_wildcard_allow:
        get(wildcard_with_a_denied_name, "bad.allowed.test")
            .denied(403, "denied_domain").at("bad.allowed.test").level("org")
            .then_allowed("ok.allowed.test");
    allowed_name_on_an_unlisted_port_is_port_not_allowed:
        get(ProxyBuilder::standard, "allowed.test").on_an_unlisted_port()
            .denied(403, "port_not_allowed").at("allowed.test").level("org");
    /// No --policy and no default_network_policy: the closed default applies.
    closed_default_without_request_policy_is_network_disabled:
        get(closed_default, "allowed.test")
            .denied(403, "network_disabled").at("allowed.test").level("request");
    allowlist_header_under_the_closed_default_is_policy_widening:
        get(closed_default, "allowed.test").policy_header(&["allowed.test"])
            .denied(403, "policy_widening").at("allowed.test").level("request");
    name_outside_the_policy_file_is_not_in_request_policy:
        get(policy_of_other, "allowed.test")
            .denied(403, "not_in_request_policy").at("allowed.test").level("request");
    /// Rejected as a whole, even though the target itself is allowed.
    header_naming_a_name_the_org_does_not_allow_is_policy_widening:
        get(standard_and_evil, "allowed.test").policy_header(&["allowed.test", "evil.test"])
            .denied(403, "policy_widening").at("allowed.test").level("request");
    unparseable_policy_header_is_invalid_policy:
        get(ProxyBuilder::standard, "allowed.test").header("{\"type\": \"allowlist\", ")
            .denied(400, "invalid_policy").at("allowed.test").level("request");
    two_policy_headers_are_invalid_policy:
        get(ProxyBuilder::standard, "allowed.test")
            .policy_header(&["allowed.test"]).policy_header(&["allowed.test"])
            .denied(400, "invalid_policy").at("allowed.test").level("request");
    header_policy_narrows_to_its_own_names:
        get(policy_of_both, "allowed.test").policy_header(&["other.test"])
            .denied(403, "not_in_request_policy").at("allowed.test").level("request")
            .then_allowed("other.test");
    shared_hosting_with_action_deny_is_shared_hosting:
        get(shared_hosting_denied, "hooks.webhook.site")
            .denied(403, "shared_hosting").at("hooks.webhook.site").level("org")
            .record_has("shared_hosting", true);
    allowed_name_pinned_to_loopback_without_cidr_is_private_address:
        get(loopback_closed, "allowed.test")
            .denied(403, "private_address").at("allowed.test").level("address")
            .record_has("resolved_ip", "127.0.0.1");
    percent_encoded_host_is_refused_with_400:
        get(ProxyBuilder::standard, "bad_host%41.test").denied_as_one_of(400, BAD_TARGET);
    host_with_a_space_is_refused_with_400:
        raw(ProxyBuilder::standard, "GET http://bad host.test:{port}/ HTTP/1.1\r\n\
             Host: bad host.test:{port}\r\nConnection: close\r\n\r\n")
            .denied_as_one_of(400, BAD_TARGET);
    garbage_bytes_are_invalid_request:
        raw(ProxyBuilder::standard, "\x00\x01\x02 not http at all\r\n\r\n")
            .denied(400, "invalid_request");
    origin_form_request_to_the_proxy_is_invalid_request:
        raw(ProxyBuilder::standard, "GET / HTTP/1.1\r\n\
             Host: allowed.test:{port}\r\nConnection: close\r\n\r\n")
            .denied(400, "invalid_request");
    host_header_naming_another_authority_is_host_mismatch:
        raw(standard_and_evil, "GET http://allowed.test:{port}/ HTTP/1.1\r\n\
             Host: evil.test\r\nConnection: close\r\n\r\n")
            .denied(403, "host_mismatch");
}

// The proxies of the rows, each started for an origin on `port`.

/// The usual proxy, with `evil.test` pinned too: its denial is the policy's, not a
/// failed lookup's.
fn standard_and_evil(port: u16) -> ProxyBuilder {
    ProxyBuilder::standard(port).pin("evil.test")
}

fn wildcard_with_a_denied_name(port: u16) -> ProxyBuilder {
    let org = Org::new()
        .allow("*.allowed.test")
        .deny("bad.allowed.test")
        .ports(&[80, 443, port])
        .loopback();
    ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["*.allowed.test"]))
        .pin("bad.allowed.test")
        .pin("ok.allowed.test")
}

/// No `--policy`: the closed default.
fn closed_default(port: u16) -> ProxyBuilder {
    ProxyBuilder::new(Org::standard(port).to_toml()).pin("allowed.test")
}

/// The org allows `allowed.test` and `other.test`; the policy file only `other.test`.
fn policy_of_other(port: u16) -> ProxyBuilder {
    policy_of(port, &["other.test"])
}

/// The org and the policy file both allow `allowed.test` and `other.test`.
fn policy_of_both(port: u16) -> ProxyBuilder {
    policy_of(port, &["allowed.test", "other.test"])
}

fn policy_of(port: u16, names: &[&str]) -> ProxyBuilder {
    let org = Org::standard(port).allow("other.test");
    ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(names))
        .pin("allowed.test")
        .pin("other.test")
}

fn shared_hosting_denied(port: u16) -> ProxyBuilder {
    webhook_proxy(port, "deny")
}

fn webhook_proxy(port: u16, action: &str) -> ProxyBuilder {
    let org = Org::standard(port)
        .allow("hooks.webhook.site")
        .shared_hosting(action);
    ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["hooks.webhook.site"]))
        .pin("hooks.webhook.site")
}

/// `allowed.test` on the origin's port, without the loopback CIDR opened.
fn loopback_closed(port: u16) -> ProxyBuilder {
    let org = Org::new().allow("allowed.test").ports(&[80, 443, port]);
    ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .pin("allowed.test")
}

#[tokio::test]
async fn shared_hosting_with_action_flag_is_allowed_and_marked() {
    let origin = Origin::start().await;
    let proxy = webhook_proxy(origin.port(), "flag")
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
async fn literal_loopback_in_any_spelling_is_private_address() {
    let origin = Origin::start().await;
    let proxy = loopback_closed(origin.port()).start().await;
    let spellings = [
        "127.0.0.1",
        "2130706433",
        "0x7f.1",
        "127.1",
        "[::ffff:127.0.0.1]",
    ];
    for host in spellings {
        let resp = get_via_proxy(proxy.addr, &url(host, &origin), &[]).await;
        let want = Denial::new(403, "private_address")
            .level("address")
            .case(host);
        assert_denied_response(&resp, &want, &proxy);
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
    assert_untouched("every spelling", &origin, &proxy);
}

#[tokio::test]
async fn host_that_fails_normalisation_is_invalid_host() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port()).start().await;
    let long_label = format!("{}.test", "a".repeat(64));
    let hosts = [
        "bad!host.test",
        "-bad.test",
        "a..b.test",
        long_label.as_str(),
    ];
    for host in hosts {
        let resp = get_via_proxy(proxy.addr, &url(host, &origin), &[]).await;
        let want = Denial::new(400, "invalid_host").case(host);
        assert_denied_response(&resp, &want, &proxy);
    }
    let records = proxy.expect_audit_count(hosts.len()).await;
    assert!(
        records.iter().all(|r| r["reason"] == "invalid_host"),
        "{records:?}"
    );
    assert_untouched("every host", &origin, &proxy);
}
