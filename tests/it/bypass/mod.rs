//! The attacker's view, part 1 (issue 5): every spelling trick on the request target.
//! Literal IPs in lenient and wrapped forms, and names in other case, with a trailing
//! dot, percent-encoded or in Unicode. The request line itself (userinfo, `Host`,
//! CR/LF in a `CONNECT` target) is in `bypass::request`.
//!
//! Each test sends the bytes an attacker would, then checks three things: the answer
//! refuses with the expected reason, no origin saw a connection, and the audit log holds
//! exactly one `egress.denied` line per attempt.

pub(crate) mod looping;
pub(crate) mod request;
pub(crate) mod route;
pub(crate) mod tls;

use crate::support::client::{connect_via_proxy, get_via_proxy, send_raw, Response};
use crate::support::expect::{assert_denials_logged, assert_refused_as_one_of};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};

/// The answer to a target the parser cannot read: either 400 reason will do.
pub(crate) const BAD_TARGET: &[&str] = &["invalid_host", "invalid_request"];

/// A proxy whose org allows `allowed.test` on the origin's port and NO CIDR, so every
/// loopback address (where the origin listens) must be refused by address class.
async fn no_cidr_proxy(origin: &Origin) -> Proxy {
    let org = Org::new()
        .allow("allowed.test")
        .ports(&[80, 443, origin.port()]);
    ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .pin("allowed.test")
        .start()
        .await
}

/// A proxy whose org allows `*.allowed.test` but denies `evil.allowed.test`; loopback
/// is open, every name is pinned there, so only the name rules stand in the way.
async fn wildcard_proxy(ports: &[u16]) -> Proxy {
    let org = Org::new()
        .allow("*.allowed.test")
        .deny("evil.allowed.test")
        .deny("bücher.allowed.test")
        .ports(ports)
        .loopback();
    ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["*.allowed.test"]))
        .pin("evil.allowed.test")
        .pin("ok.allowed.test")
        .pin("xn--bcher-kva.allowed.test")
        .pin("allowed.test")
        .pin("evil.test")
        .start()
        .await
}

/// A proxy for `allowed.test` with loopback open, `evil.test` pinned to the same origin.
pub(crate) async fn open_proxy(origin: &Origin) -> Proxy {
    ProxyBuilder::standard(origin.port())
        .pin("evil.test")
        .start()
        .await
}

pub(crate) fn assert_no_connection(origin: &Origin, proxy: &Proxy) {
    assert_eq!(
        origin.connections(),
        0,
        "the origin was reached: {:?}\n{}",
        origin.requests(),
        proxy.diagnostics()
    );
}

pub(crate) fn refusal(
    resp: &Response,
    status: u16,
    reasons: &[&str],
    proxy: &Proxy,
) -> (String, String) {
    assert_refused_as_one_of(resp, status, reasons, proxy)
}

/// Every way to write 127.0.0.1 (or another loopback or unspecified address that
/// reaches a local listener) that a URL or socket library might accept.
const LOOPBACK_SPELLINGS: &[&str] = &[
    "2130706433",
    "0177.0.0.1",
    "0x7f.0.0.1",
    "0X7F.0.0.1",
    "0x7f000001",
    "017700000001",
    "0x7f.1",
    "127.1",
    "127.0.1",
    "127.0.0.1.",
    "0",
    "0.0.0.0",
    "[::1]",
    "[0:0:0:0:0:0:0:1]",
    "[::]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[::FFFF:7F00:1]",
    "[0:0:0:0:0:ffff:127.0.0.1]",
    "[::127.0.0.1]",
    "[64:ff9b::7f00:1]",
    "[64:ff9b:1::7f00:1]",
    "[2002:7f00:1::]",
    // Teredo: server 127.0.0.1, then client 127.0.0.1 (stored bit-inverted).
    "[2001:0:7f00:1::]",
    "[2001:0:4136:e378:8000:63bf:80ff:fffe]",
];

#[tokio::test]
async fn literal_ip_spellings_as_http_targets_are_private_address() {
    let origin = Origin::start().await;
    let proxy = no_cidr_proxy(&origin).await;
    let mut refusals = Vec::new();
    for host in LOOPBACK_SPELLINGS {
        let url = format!("http://{host}:{}/", origin.port());
        let resp = get_via_proxy(proxy.addr, &url, &[]).await;
        refusals.push(refusal(&resp, 403, &["private_address"], &proxy));
        assert_eq!(resp.json()["error"]["port"], origin.port(), "{host}");
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&origin, &proxy);
}

#[tokio::test]
async fn literal_ip_spellings_as_connect_targets_are_private_address() {
    let origin = Origin::start().await;
    let proxy = no_cidr_proxy(&origin).await;
    let mut refusals = Vec::new();
    for host in LOOPBACK_SPELLINGS {
        let target = format!("{host}:{}", origin.port());
        let (resp, _conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
        refusals.push(refusal(&resp, 403, &["private_address"], &proxy));
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&origin, &proxy);
}

#[tokio::test]
async fn ipv6_zone_ids_are_refused_400() {
    let origin = Origin::start().await;
    let proxy = no_cidr_proxy(&origin).await;
    let port = origin.port();
    let mut refusals = Vec::new();
    for host in [
        "[fe80::1%25eth0]",
        "[fe80::1%eth0]",
        "[::1%25lo]",
        "[::1%lo]",
    ] {
        let url = format!("http://{host}:{port}/");
        let raw = format!("GET {url} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n");
        let resp = send_raw(proxy.addr, raw.as_bytes()).await;
        refusals.push(refusal(&resp, 400, BAD_TARGET, &proxy));
        let raw = format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n");
        let resp = send_raw(proxy.addr, raw.as_bytes()).await;
        refusals.push(refusal(&resp, 400, BAD_TARGET, &proxy));
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&origin, &proxy);
}

/// Spellings of `evil.allowed.test` (denied under the allowed wildcard) and of
/// `evil.test` (on no list) that differ only in case and one trailing dot.
const CASE_AND_DOT: &[(&str, &str)] = &[
    ("EVIL.allowed.test", "denied_domain"),
    ("evil.ALLOWED.TEST", "denied_domain"),
    ("Evil.Allowed.Test.", "denied_domain"),
    ("evil.allowed.test.", "denied_domain"),
    ("EVIL.test.", "not_in_org_allowlist"),
    ("evil.TEST", "not_in_org_allowlist"),
];

#[tokio::test]
async fn trailing_dot_and_case_keep_a_denied_name_denied_in_the_url() {
    let evil = Origin::start_named("evil").await;
    let ok = Origin::start_named("ok").await;
    let proxy = wildcard_proxy(&[80, 443, evil.port(), ok.port()]).await;
    let mut refusals = Vec::new();
    for (host, reason) in CASE_AND_DOT {
        let url = format!("http://{host}:{}/", evil.port());
        let resp = get_via_proxy(proxy.addr, &url, &[]).await;
        refusals.push(refusal(&resp, 403, &[reason], &proxy));
        let normalised = host.trim_end_matches('.').to_ascii_lowercase();
        assert_eq!(resp.json()["error"]["host"], normalised, "{host}");
    }
    // Two trailing dots are no longer one name.
    let url = format!("http://evil.allowed.test..:{}/", evil.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    refusals.push(refusal(&resp, 400, BAD_TARGET, &proxy));
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&evil, &proxy);

    // The same normalisation lets a sibling through: it is the rule, not a blanket refusal.
    let url = format!("http://OK.Allowed.Test.:{}/", ok.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(
        ok.requests()[0].header("host"),
        Some(&*format!("ok.allowed.test:{}", ok.port()))
    );
}

#[tokio::test]
async fn trailing_dot_and_case_keep_a_denied_name_denied_in_a_connect_target() {
    let evil = Origin::start_named("evil").await;
    let proxy = wildcard_proxy(&[80, 443, evil.port()]).await;
    let mut refusals = Vec::new();
    for (host, reason) in CASE_AND_DOT {
        let target = format!("{host}:{}", evil.port());
        let (resp, _conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
        refusals.push(refusal(&resp, 403, &[reason], &proxy));
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&evil, &proxy);
}

#[tokio::test]
async fn trailing_dot_and_case_keep_a_denied_name_denied_in_url_and_host_together() {
    let evil = Origin::start_named("evil").await;
    let proxy = wildcard_proxy(&[80, 443, evil.port()]).await;
    let port = evil.port();
    let pairs = [
        ("EVIL.allowed.test.", "evil.allowed.test"),
        ("evil.allowed.test", "EVIL.ALLOWED.TEST."),
        ("Evil.Allowed.Test", "evil.allowed.test."),
    ];
    let mut refusals = Vec::new();
    for (in_url, in_host) in pairs {
        let raw = format!(
            "GET http://{in_url}:{port}/ HTTP/1.1\r\nHost: {in_host}:{port}\r\nConnection: close\r\n\r\n"
        );
        let resp = send_raw(proxy.addr, raw.as_bytes()).await;
        refusals.push(refusal(&resp, 403, &["denied_domain"], &proxy));
        let raw = format!("CONNECT {in_url}:{port} HTTP/1.1\r\nHost: {in_host}:{port}\r\n\r\n");
        let resp = send_raw(proxy.addr, raw.as_bytes()).await;
        refusals.push(refusal(&resp, 403, &["denied_domain"], &proxy));
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&evil, &proxy);
}

#[tokio::test]
async fn percent_encoded_denied_name_is_refused_400() {
    let evil = Origin::start_named("evil").await;
    let proxy = wildcard_proxy(&[80, 443, evil.port()]).await;
    let port = evil.port();
    let mut refusals = Vec::new();
    for host in [
        "ev%69l.allowed.test",
        "evil%2eallowed.test",
        "%65vil.allowed.test",
    ] {
        let resp = get_via_proxy(proxy.addr, &format!("http://{host}:{port}/"), &[]).await;
        refusals.push(refusal(&resp, 400, BAD_TARGET, &proxy));
        let raw = format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n");
        let resp = send_raw(proxy.addr, raw.as_bytes()).await;
        refusals.push(refusal(&resp, 400, BAD_TARGET, &proxy));
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&evil, &proxy);
}

#[tokio::test]
async fn unicode_spellings_of_a_denied_name_never_reach_the_origin() {
    let evil = Origin::start_named("evil").await;
    let proxy = wildcard_proxy(&[80, 443, evil.port()]).await;
    let port = evil.port();
    // Full-width letters and the ideographic full stop both map to `evil.allowed.test`
    // under UTS-46; sent as raw UTF-8 bytes on the request line.
    let hosts = [
        "ｅｖｉｌ.allowed.test",
        "evil。allowed.test",
        "ＥＶＩＬ．ａｌｌｏｗｅｄ．ｔｅｓｔ",
        "bücher.allowed.test",
    ];
    let reasons = ["invalid_host", "invalid_request", "denied_domain"];
    let mut refusals = Vec::new();
    for host in hosts {
        let raw = format!(
            "GET http://{host}:{port}/ HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
        );
        let resp = send_raw(proxy.addr, raw.as_bytes()).await;
        let status = if resp.status == 403 { 403 } else { 400 };
        refusals.push(refusal(&resp, status, &reasons, &proxy));
        let raw = format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n");
        let resp = send_raw(proxy.addr, raw.as_bytes()).await;
        let status = if resp.status == 403 { 403 } else { 400 };
        refusals.push(refusal(&resp, status, &reasons, &proxy));
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&evil, &proxy);
}

#[tokio::test]
async fn punycode_spelling_of_a_denied_unicode_name_is_denied_domain() {
    let evil = Origin::start_named("evil").await;
    // The deny list says `bücher.allowed.test`; the attacker writes its xn-- form.
    let proxy = wildcard_proxy(&[80, 443, evil.port()]).await;
    let port = evil.port();
    let mut refusals = Vec::new();
    for host in ["xn--bcher-kva.allowed.test", "XN--BCHER-KVA.allowed.test."] {
        let resp = get_via_proxy(proxy.addr, &format!("http://{host}:{port}/"), &[]).await;
        refusals.push(refusal(&resp, 403, &["denied_domain"], &proxy));
        assert_eq!(resp.json()["error"]["host"], "xn--bcher-kva.allowed.test");
        let (resp, _conn) = connect_via_proxy(proxy.addr, &format!("{host}:{port}"), &[]).await;
        refusals.push(refusal(&resp, 403, &["denied_domain"], &proxy));
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&evil, &proxy);
}
